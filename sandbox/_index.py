"""Records of one kind sorted by `(updated_at, id)`, so that a list page is a slice.

`updated_since` is a bisection and a page a slice whatever the size; the rarely used filters
that have no index scan in order instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from sortedcontainers import SortedList

from ._config import Order


@dataclass(slots=True)
class Page:
    items: list[Any]
    total: int


class Indexed(Protocol):
    id: str
    updated_at: int


R = TypeVar("R", bound=Indexed)


class Index(Generic[R]):
    """Records of one kind sorted by `(updated_at, id)`."""

    def __init__(self, records: Iterable[R] = ()) -> None:
        self.by_id: dict[str, R] = {r.id: r for r in records}
        self._keys = SortedList((r.updated_at, r.id) for r in self.by_id.values())

    def __len__(self) -> int:
        return len(self.by_id)

    def add(self, record: R) -> None:
        self.by_id[record.id] = record
        self._keys.add((record.updated_at, record.id))

    def discard(self, record: R) -> None:
        if self.by_id.pop(record.id, None) is not None:
            self._keys.discard((record.updated_at, record.id))

    def touch(self, record: R, updated_at: int) -> None:
        """Move a record to its new `updated_at`; must be the only way it changes."""
        self.move(record.id, record.updated_at, updated_at)
        record.updated_at = updated_at

    def move(self, record_id: str, old: int, new: int) -> None:
        """Re-key a record held by several indexes: each needs the old key to find it."""
        if record_id in self.by_id:
            self._keys.discard((old, record_id))
            self._keys.add((new, record_id))

    def page(self, since_ms: int | None, order: Order, offset: int, limit: int) -> Page:
        start = 0 if since_ms is None else self._keys.bisect_left((since_ms, ""))
        total = len(self._keys) - start
        if order == "asc":
            keys = self._keys.islice(start + offset, start + offset + limit)
        else:
            stop = len(self._keys) - offset
            keys = self._keys.islice(max(start, stop - limit), max(start, stop), reverse=True)
        return Page([self.by_id[key[1]] for key in keys], total)

    def scan(self, since_ms: int | None, order: Order) -> Iterator[R]:
        start = 0 if since_ms is None else self._keys.bisect_left((since_ms, ""))
        keys = self._keys.islice(start, len(self._keys), reverse=(order == "desc"))
        return (self.by_id[key[1]] for key in keys)


def filtered_page(
    records: Iterator[Any], keep: Callable[[Any], bool], offset: int, limit: int
) -> Page:
    """Offset paging over a filter, for the rarely used filters that have no index."""
    items: list[Any] = []
    total = 0
    for record in records:
        if keep(record):
            if offset <= total < offset + limit:
                items.append(record)
            total += 1
    return Page(items, total)
