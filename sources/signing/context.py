"""What every resource of one run shares: the client, the workspace `/me` names, the options,
and the order in which rows were read."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import settings
from .client import SigningClient
from .deletions import Deletions
from .errors import NotFound, RunStopped, SigningAPIError
from .paging import Record
from .privacy import PrivacyPolicy
from .rows import FieldGuard
from .urls import item_path
from .window import ReloadWindow


@dataclass
class SyncContext:
    """Bound to every resource when the source is built, as verified sources bind a client."""

    client: SigningClient
    # The settings the resources read (`SigningConfiguration`'s, and the run's `since`).
    initial_since: str | None
    lag_seconds: float
    page_size: int
    concurrency: int
    max_pages_without_new_records: int
    # What becomes of personal columns, and who was erased; the pipeline adds the erasures
    # the warehouse records before it builds the source.
    privacy: PrivacyPolicy = field(default_factory=PrivacyPolicy)
    deletions: Deletions = field(default_factory=Deletions)
    # `load --resources X --full-refresh`: the resources whose state starts again (the rows
    # stay until the reload merges over them); `load --reload`: the window read again, through
    # a state of its own that is thrown away, so no cursor moves.
    restart: frozenset[str] = frozenset()
    window: ReloadWindow | None = None
    # Records read by id (`records_source`) that the service would not serve (`Unserved`), by
    # (kind, id), with the reason: the webhook drain sets their deliveries aside.
    unserved: dict[tuple[str, str], str] = field(default_factory=dict)
    # Per child table, the shipments whose children this run fetched, with the version
    # listed (`children.fetch_for_each`): a later page listing one unchanged skips it.
    settled_children: dict[str, dict[str, Any]] = field(default_factory=dict)
    guard: FieldGuard = field(init=False)
    _me: dict[str, Any] | None = None
    _pool: ThreadPoolExecutor | None = None
    _sequence: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.guard = FieldGuard(self.client.stats.warn)

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

    def pool(self) -> ThreadPoolExecutor:
        """The one thread pool of child requests: `concurrency` threads for every resource, so
        threads never outnumber the client's connections."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="child")
            return self._pool

    def close(self) -> None:
        """Release the threads and connections (queued child requests are cancelled)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    def stamp(self, rows: list[Record], table: str) -> list[Record]:
        """Number rows in the order they were read from the API: when one record is read
        twice in a run, the merge keeps the later read (`_fetch_seq` is its dedup sort).
        It must happen on arrival: dlt interleaves transformers, so emit order is not read
        order. A `_fetch_seq` already there came from the API: it is replaced, and said."""
        with self._lock:
            for row in rows:
                if "_fetch_seq" in row:
                    self.guard.dropped(table, "_fetch_seq", "the source numbers rows itself")
                row["_fetch_seq"] = next(self._sequence)
        return rows

    def still_served(self, table: str, record_id: str) -> bool | None:
        """What the record's own `GET` says: False when it answers 404 (the record is gone),
        True when it answers, None when it did not answer this run. Only its own 404 proves a
        deletion: a 404 on something else (one of its children, a gateway's) never does."""
        path, _ = settings.LIST_ENDPOINTS[table]
        try:
            self.client.get(item_path(path.strip("/"), record_id))
        except NotFound:
            return False
        except RunStopped:
            raise
        except SigningAPIError:
            return None
        return True

    def counted(self, table: str, rows: list[Record]) -> list[Record]:
        """Count rows for the progress display and the summary."""
        self.client.stats.count_rows(table, len(rows))
        return rows


def check_service(context: SyncContext) -> str:
    """Ask `/me` and return the workspace id, or fail with one line that says what to fix:
    a base URL that is not the API's root, or a service that is not the signing API."""
    base = str(context.client.base_url)
    try:
        me = context.me()
    except NotFound:
        raise SigningAPIError(
            f"{base}/me answered 404: the base URL must be the API's root, ending in /v1 "
            "(e.g. https://host/api/v1); check SOURCES__SIGNING__BASE_URL"
        ) from None
    workspace = me.get("workspace") if isinstance(me, dict) else None
    workspace_id = workspace.get("id") if isinstance(workspace, dict) else None
    if (
        not isinstance(workspace_id, str | int)
        or isinstance(workspace_id, bool)
        or not workspace_id
    ):
        raise SigningAPIError(
            f"{base}/me did not answer like the signing API (no workspace in its answer); "
            "check SOURCES__SIGNING__BASE_URL"
        )
    return str(workspace_id)
