"""What every resource of one run shares: the client, the workspace `/me` names, the options,
and the order in which rows were read."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from . import settings
from .client import SigningClient
from .paging import Record


@dataclass
class SyncContext:
    """Bound to every resource when the source is built, as verified sources bind a client."""

    client: SigningClient
    initial_since: str | None = None
    lag_seconds: float = settings.CURSOR_LAG_SECONDS
    page_size: int = settings.PAGE_SIZE
    concurrency: int = settings.CHILD_CONCURRENCY
    _me: dict[str, Any] | None = None
    _sequence: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def me(self) -> dict[str, Any]:
        """GET /me, once per run."""
        with self._lock:
            if self._me is None:
                body, _ = self.client.get("/me")
                self._me = body
            return self._me

    @property
    def workspace_id(self) -> str:
        return str(self.me()["workspace"]["id"])

    def stamp(self, rows: list[Record]) -> list[Record]:
        """Number rows in the order they were read from the API: when one record is read
        twice in a run, the merge keeps the later read (`_fetch_seq` is its dedup sort).
        It must happen on arrival: dlt interleaves transformers, so emit order is not read
        order."""
        with self._lock:
            for row in rows:
                row["_fetch_seq"] = next(self._sequence)
        return rows

    def counted(self, table: str, rows: list[Record]) -> list[Record]:
        """Count rows for the progress display and the summary."""
        self.client.stats.count_rows(table, len(rows))
        return rows
