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
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

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
    total: int


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


def anchored_pages(
    fetch: Callable[[int], ListPage],
    *,
    page_size: int,
    overlap: int,
    position: PagerPosition,
) -> Iterator[list[Read]]:
    """Yield the new records of each page with their fingerprints; `position` is kept current
    for resuming."""
    seen: dict[str, str] = dict(position.anchors)
    offset = position.offset
    while True:
        page = fetch(offset)
        items = page.data
        if offset > 0:
            cut = _last_unchanged(items, seen)
            if cut is None:
                # Nothing here was read before unchanged: the list moved by more than the
                # overlap (or shrank). Step back until the covered part is in sight again.
                position.step_backs += 1
                offset = max(0, offset - (page_size - overlap))
                continue
            fresh = [Read(record, fingerprint(record)) for record in items[cut + 1 :]]
        else:
            fresh = [Read(record, fingerprint(record)) for record in items]
        for record, digest in fresh:
            seen[record["id"]] = digest
        end_reached = offset + len(items) >= page.total or not items
        offset = offset + len(items) - (0 if end_reached else overlap)
        position.offset = offset
        position.anchors = {r["id"]: seen[r["id"]] for r in items[-overlap:] if r["id"] in seen}
        if fresh:
            yield fresh
        if end_reached:
            return


def _last_unchanged(items: list[Record], seen: dict[str, str]) -> int | None:
    for index in range(len(items) - 1, -1, -1):
        record = items[index]
        known = seen.get(record["id"])
        if known is not None and known == fingerprint(record):
            return index
    return None
