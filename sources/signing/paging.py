"""Offset paging that loses nothing while the list changes under it, in any order.

Offset paging over a changing list skips records: when a record on an already-read page
changes and moves, the records after it shift, and the one at the page edge is never read
(see docs/design.md, hazards). Shipments carry no `updated_at`, so keyset paging is not available.

What holds whatever the order: records that do not change keep their relative order and their
content. So every request overlaps the previous page, and the page is cut after the last record
in it that was already read *and is unchanged* (same fingerprint): everything before that record
was covered. If a page holds no such record, the list shifted more than the overlap, and the
pager steps back until it finds one. Records that change during the pass may be missed by it,
but their new `updated_at` lies after the run's cursor, so the next run reads them.

Nothing the service says about its list is trusted beyond what its pages show: `total`, the
size of a page and what an offset returns may all be wrong (see `anchored_pages`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from . import settings

Record = dict[str, Any]


def fingerprint(record: Record) -> str:
    """A short digest of a record's whole content, stable across key order."""
    return hashlib.blake2b(
        orjson.dumps(record, option=orjson.OPT_SORT_KEYS), digest_size=8
    ).hexdigest()


class Read(NamedTuple):
    """A record as a page returned it, with its fingerprint: computed once, when the pager
    reads it, and shared by everything that compares it later."""

    record: Record
    digest: str


@dataclass
class ListPage:
    data: list[Record]
    total: int | None  # what the service says the list holds; None when it said nothing usable


@dataclass
class PagerPosition:
    """Where an interrupted pass resumes: the next offset and the last records read."""

    offset: int = 0
    anchors: dict[str, str] = field(default_factory=dict)
    step_backs: int = 0

    def to_state(self) -> dict[str, Any]:
        return {"offset": self.offset, "anchors": self.anchors}

    @classmethod
    def from_state(cls, state: dict[str, Any] | None) -> PagerPosition:
        if not state:
            return cls()
        return cls(offset=int(state.get("offset", 0)), anchors=dict(state.get("anchors", {})))


@dataclass
class PagingReport:
    """What the service did that paging had to see through, each kind said once, for one
    warning line; and `gave_up`, set when the pager stopped before the pages showed where the
    list ended (so records beyond may not have been read)."""

    oddities: dict[str, str] = field(default_factory=dict)
    gave_up: str | None = None

    def note(self, kind: str, description: str) -> None:
        self.oddities.setdefault(kind, description)


def anchored_pages(
    fetch: Callable[[int], ListPage],
    *,
    page_size: int,
    overlap: int,
    position: PagerPosition,
    patience: int = settings.MAX_PAGES_WITHOUT_NEW_RECORDS,
    report: PagingReport | None = None,
) -> Iterator[list[Read]]:
    """Yield the records of each page not read before in this pass (new, or changed since),
    with their fingerprints; `position` is kept current for resuming.

    The pages decide where the list ends, not `total`: a page shorter than asked ends it (the
    list ended inside it when it was read), unless `total` says more and the page brought new
    records (a service that serves smaller pages than asked); a full page never ends it, so a
    `total` too low loses nothing. Every request either brings a record not read before or
    counts toward `patience`: after that many in a row the pager gives up (`report.gave_up`),
    so no `total`, page size or offset a service answers keeps it paging forever."""
    report = report if report is not None else PagingReport()
    seen: dict[str, str] = dict(position.anchors)
    offset = position.offset
    without_new = 0  # requests in a row that brought no record not read before
    while True:
        page = fetch(offset)
        items = page.data
        _note_oddities(page, offset, page_size, report)
        cut = _last_unchanged(items, seen) if offset > 0 else None
        fresh: list[Read] = []
        ended = False
        if offset > 0 and cut is None:
            # Nothing here was read before unchanged: the list moved by more than the
            # overlap, or shrank (an empty page). Step back until the covered part is in
            # sight again.
            position.step_backs += 1
            offset = max(0, offset - (page_size - overlap))
        else:
            fresh = _not_read(items if cut is None else items[cut + 1 :], seen)
            end = offset + len(items)
            short = len(items) < page_size
            ended = short and (not fresh or page.total is None or end >= page.total)
            if ended and page.total is not None and end < page.total:
                report.note(
                    "total-high", f"a total of {page.total:,} for a list that ends at {end:,}"
                )
            # Forward by the page less the overlap, and by one at least (a page shorter than
            # the overlap).
            offset = end if ended else max(end - overlap, offset + 1)
            position.offset = offset
            position.anchors = {r["id"]: seen[r["id"]] for r in items[-overlap:] if r["id"] in seen}
        if fresh:
            yield fresh
        if ended:
            return
        without_new = 0 if fresh else without_new + 1
        if without_new >= patience:
            report.gave_up = f"{without_new} pages in a row brought no record not read before"
            return


def _not_read(records: list[Record], seen: dict[str, str]) -> list[Read]:
    """The records not read before in this pass as they are now (new, or changed since), with
    their fingerprints; `seen` learns them."""
    fresh = []
    for record in records:
        digest = fingerprint(record)
        if seen.get(record["id"]) != digest:
            seen[record["id"]] = digest
            fresh.append(Read(record, digest))
    return fresh


def _note_oddities(page: ListPage, offset: int, page_size: int, report: PagingReport) -> None:
    """What a page says about the service beyond its records, in words."""
    size = len(page.data)
    if size > page_size:
        report.note(
            "larger", f"pages larger than asked ({size:,} records for a limit of {page_size})"
        )
    if page.total is None:
        report.note("total-missing", "no usable `total`")
    elif offset + size > page.total:
        report.note(
            "total-low",
            f"a total of {page.total:,} with records served up to {offset + size:,}",
        )
    elif size == 0 and offset > 0 and page.total > offset:
        report.note(
            "empty", f"an empty page at offset {offset:,} while its total said {page.total:,}"
        )


def _last_unchanged(items: list[Record], seen: dict[str, str]) -> int | None:
    for index in range(len(items) - 1, -1, -1):
        record = items[index]
        known = seen.get(record["id"])
        if known is not None and known == fingerprint(record):
            return index
    return None
