"""Paging ends on its own whatever a service answers about its lists, and loses no record that
its pages hold: a `total` too high, too low or missing, pages larger or smaller than asked, a
service that ignores `offset` or answers empty pages past the first.

Each case serves contacts from a stand-in API over loopback HTTP and loads them with the real
pipeline into DuckDB; what counts is which records landed, how many list requests were made,
and what the run said (one warning line per list).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from pipelines.load.run import LoadOptions, LoadResult, load_incremental
from sandbox import JSON
from tests.support import FakeAPI, FakeWorkspace, StandIn, fast, honest_page, source_env

KEY = "sk_test_standin"
PAGE = 100  # the page size these runs ask for
OVERLAP = 4  # records shared by consecutive pages (sources/signing/settings.py)

CONTACTS_ONLY = LoadOptions(resources=("contacts",))


def contacts(count: int) -> list[JSON]:
    """`count` contacts, each changed at its own second of 2026-01-01."""
    return [
        {
            "id": f"con_{n:04d}",
            "name": f"Contact {n}",
            "email": f"c{n}@example.com",
            "updated_at": f"2026-01-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z",
            "custom": {},
            "group_ids": [],
        }
        for n in range(count)
    ]


def load(
    stand_in: StandIn, warehouse: Path, max_pages_without_new_records: int | None = None
) -> LoadResult:
    """One run of the contacts resource against the stand-in, configured as a user does."""
    patience = max_pages_without_new_records
    with source_env(stand_in.base_url, KEY, max_pages_without_new_records=patience):
        return load_incremental(warehouse, CONTACTS_ONLY, settings=replace(fast(), page_size=PAGE))


def loaded_ids(warehouse: Path) -> set[str]:
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return {row[0] for row in connection.execute("select id from raw.contacts").fetchall()}


def list_requests(stand_in: StandIn) -> list[dict[str, str]]:
    return [arrival.query for arrival in stand_in.requests_to("/v1/contacts")]


def paging_warnings(result: LoadResult) -> list[str]:
    return [w for w in result.stats.warnings if w.startswith("contacts: GET /contacts")]


# ---------------------------------------------------------------------- pages that lie
def total_too_high(records: list[JSON], offset: int, limit: int) -> JSON:
    return {**honest_page(records, offset, limit), "total": 10_000}


def total_too_low(records: list[JSON], offset: int, limit: int) -> JSON:
    return {**honest_page(records, offset, limit), "total": 120}


def total_missing(records: list[JSON], offset: int, limit: int) -> JSON:
    page = honest_page(records, offset, limit)
    del page["total"]
    return page


def total_not_a_number(records: list[JSON], offset: int, limit: int) -> JSON:
    return {**honest_page(records, offset, limit), "total": "lots"}


def total_changing_wildly(records: list[JSON], offset: int, limit: int) -> JSON:
    return {**honest_page(records, offset, limit), "total": [3, 90_000, 0][offset // 7 % 3]}


def limit_ignored(records: list[JSON], offset: int, limit: int) -> JSON:
    """Pages of 250 whatever was asked."""
    return honest_page(records, offset, 250)


def smaller_pages_than_asked(records: list[JSON], offset: int, limit: int) -> JSON:
    """An honest service whose pages hold at most 30 records (its `total` is right)."""
    return honest_page(records, offset, min(limit, 30))


@pytest.mark.parametrize(
    ("pages", "warned"),
    [
        pytest.param(total_too_high, "a total of 10,000 for a list that ends at 450", id="high"),
        pytest.param(total_too_low, "a total of 120 with records served up to 196", id="low"),
        pytest.param(total_missing, "no usable `total`", id="missing"),
        pytest.param(total_not_a_number, "no usable `total`", id="not-a-number"),
        pytest.param(total_changing_wildly, "a total of", id="changing"),
        pytest.param(
            limit_ignored,
            "pages larger than asked (250 records for a limit of 100)",
            id="limit-ignored",
        ),
        pytest.param(smaller_pages_than_asked, None, id="smaller-pages"),
    ],
)
def test_every_record_loads_and_paging_ends_whatever_the_pages_say(
    tmp_path: Path, pages: Callable[[list[JSON], int, int], JSON], warned: str | None
) -> None:
    records = contacts(450)
    workspace = FakeWorkspace("ws_paging", contacts=records, pages=pages)
    warehouse = tmp_path / "signing.duckdb"

    with StandIn(FakeAPI({KEY: workspace}).app()) as stand_in:
        result = load(stand_in, warehouse)
        requests = list_requests(stand_in)

    assert result.stopped is None, result.stopped
    assert loaded_ids(warehouse) == {r["id"] for r in records}
    # Every page moves on by at least a page less the overlap (30 at the smallest), and a
    # list ends with at most one page that repeats the overlap; the one pass fits, since the
    # records never change: no step back, no catch-up beyond one pass from its start.
    smallest_step = min(30, PAGE) - OVERLAP
    one_pass = -(-450 // smallest_step) + 2
    assert len(requests) <= 2 * one_pass, requests
    said = paging_warnings(result)
    if warned is None:
        assert said == [], said
    else:
        assert len(said) == 1, result.stats.warnings
        assert warned in said[0], said
        assert "read to there" in said[0], said  # the pages showed the end: not a give-up
        assert "\n" not in said[0]


def test_a_list_whose_pages_prove_its_end_moves_the_cursor_on(tmp_path: Path) -> None:
    """A `total` that lies (too high) does not keep the next run from starting where this one
    ended: the pages showed the end, so nothing is left unread."""
    records = contacts(250)
    workspace = FakeWorkspace("ws_cursor", contacts=records, pages=total_too_high)
    warehouse = tmp_path / "signing.duckdb"

    with StandIn(FakeAPI({KEY: workspace}).app()) as stand_in:
        first = load(stand_in, warehouse)
        first_run = len(list_requests(stand_in))
        second = load(stand_in, warehouse)
        requests = list_requests(stand_in)

    assert first.stopped is None
    assert second.stopped is None
    assert "updated_since" not in requests[0]
    # The second run's pass used a cursor (its check for deleted records, which follows,
    # pages the whole list: the lying total never agrees with the warehouse).
    assert "updated_since" in requests[first_run], requests[first_run]
    assert loaded_ids(warehouse) == {r["id"] for r in records}


# ---------------------------------------------------------------------- pages that go nowhere
def empty_past_the_first(records: list[JSON], offset: int, limit: int) -> JSON:
    """The reported case: a `total` of 1,000, and nothing at any offset but 0."""
    page = {**honest_page(records, offset, limit), "total": 1_000}
    if offset > 0:
        page["data"] = []
    return page


def offset_ignored(records: list[JSON], offset: int, limit: int) -> JSON:
    """The first page again, whatever the offset."""
    return {**honest_page(records, 0, limit), "total": len(records) * 10}


@pytest.mark.parametrize(
    ("pages", "what"),
    [
        pytest.param(empty_past_the_first, "an empty page at offset 96", id="empty-pages"),
        # Its offsets pass its (too high) total before the pager gives up: no telling sign.
        pytest.param(offset_ignored, "", id="offset-ignored"),
    ],
)
def test_a_list_that_goes_nowhere_is_given_up_on_keeping_what_was_read(
    tmp_path: Path, pages: Callable[[list[JSON], int, int], JSON], what: str
) -> None:
    """The pager gives up after `max_pages_without_new_records` (20) pages in a row that bring
    nothing new: instead of 2,430 requests over empty pages until a signal, 21 or so. What was
    read is loaded, one line says what the service did, and since records past that point may
    exist, the next run reads from the same cursor rather than one that passed them."""
    records = contacts(150)  # more than one page
    workspace = FakeWorkspace("ws_nowhere", contacts=records, pages=pages)
    warehouse = tmp_path / "signing.duckdb"

    with StandIn(FakeAPI({KEY: workspace}).app()) as stand_in:
        first = load(stand_in, warehouse)
        first_requests = list_requests(stand_in)
        second = load(stand_in, warehouse)
        second_requests = list_requests(stand_in)[len(first_requests) :]

    assert first.stopped is None
    # One page with records, then at most 20 that bring none (and no catch-up pass).
    assert 2 <= len(first_requests) <= 1 + 20, first_requests
    assert loaded_ids(warehouse) == {r["id"] for r in records[:PAGE]}
    said = paging_warnings(first)
    assert len(said) == 1, first.stats.warnings
    assert what in said[0], said
    assert "paging stopped: 20 pages in a row" in said[0], said
    assert "next run reads this list again from the same cursor" in said[0], said
    # The cursor stayed: the second run asks for the list from where the first did.
    assert second.stopped is None
    assert "updated_since" not in second_requests[0], second_requests[0]


def test_max_pages_without_new_records_from_the_environment_bounds_the_pages(
    tmp_path: Path,
) -> None:
    """`SOURCES__SIGNING__MAX_PAGES_WITHOUT_NEW_RECORDS=3`: one page with records, then three
    that repeat it, and the pass gives up."""
    workspace = FakeWorkspace("ws_patience", contacts=contacts(150), pages=offset_ignored)

    with StandIn(FakeAPI({KEY: workspace}).app()) as stand_in:
        result = load(stand_in, tmp_path / "signing.duckdb", max_pages_without_new_records=3)
        requests = list_requests(stand_in)

    assert len(requests) == 1 + 3, requests
    (said,) = paging_warnings(result)
    assert "paging stopped: 3 pages in a row" in said, said
