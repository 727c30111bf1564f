"""The suite starts its modules longest first (`tests/support/ordering.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.ordering import MODULE_SECONDS, longest_first, read_module_seconds

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Collected:
    nodeid: str


def test_whole_modules_go_longest_first_and_keep_their_own_order() -> None:
    items = [
        Collected(n)
        for n in ("a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "new.py::t1", "b.py::t2")
    ]
    seconds = {"a.py": 5.0, "b.py": 30.0, "c.py": 1.0}  # new.py: the median, 5 s, after a.py
    ordered = [item.nodeid for item in longest_first(items, seconds)]
    assert ordered == ["b.py::t1", "b.py::t2", "a.py::t1", "a.py::t2", "new.py::t1", "c.py::t1"]


def test_without_seconds_the_order_is_as_collected() -> None:
    items = [Collected(n) for n in ("b.py::t", "a.py::t", "b.py::u")]
    assert [i.nodeid for i in longest_first(items, {})] == ["b.py::t", "b.py::u", "a.py::t"]


def test_the_seconds_name_only_modules_that_exist() -> None:
    """A module renamed or removed leaves its line behind: write the file again
    (`benchmarks.suite_cpu --save-module-seconds`)."""
    seconds = read_module_seconds(MODULE_SECONDS)
    assert len(seconds) > 50
    assert [name for name in seconds if not (ROOT / name).is_file()] == []
    assert all(value >= 0 for value in seconds.values())
