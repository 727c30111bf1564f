"""The privacy tests' scan (`tests/support/privacy.py`, one Aho-Corasick pass) finds exactly
what searching for each needle apart finds: the definition every privacy assertion relies on."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tests.support.privacy import found_in

# Few letters, quotes, backslashes and non-ASCII: needles overlap, nest and need JSON escapes.
LETTERS = st.text(alphabet='abé"\\ü\n', max_size=5)


@given(needles=st.sets(LETTERS, min_size=1, max_size=8), text=st.text('abé"\\ü\n', max_size=60))
def test_one_pass_finds_what_a_search_per_needle_finds(needles: set[str], text: str) -> None:
    one_by_one = {n for n in needles if n in text or json.dumps(n)[1:-1] in text}
    assert found_in(text, needles) == one_by_one
