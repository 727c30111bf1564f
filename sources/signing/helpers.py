"""The work behind the signing resources: incremental list passes kept in dlt state, child
fetches over a thread pool, and the shaping of API records into warehouse rows."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from . import settings
from .client import NotFound, RunStopped, SigningClient
from .paging import ListPage, PagerPosition, Record, anchored_pages, fingerprint

log = logging.getLogger(__name__)


def to_iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass
class SyncContext:
    """What every resource of one run shares: the client, the workspace, the options, and the
    counters the progress display reads."""

    client: SigningClient
    initial_since: str | None = None
    lag_seconds: float = settings.CURSOR_LAG_SECONDS
    page_size: int = settings.PAGE_SIZE
    concurrency: int = settings.CHILD_CONCURRENCY
    _workspace: dict[str, Any] | None = None
    _sequence: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def workspace(self) -> dict[str, Any]:
        """GET /me, once per run."""
        with self._lock:
            if self._workspace is None:
                body, _ = self.client.get("/me")
                self._workspace = body
            return self._workspace

    @property
    def workspace_id(self) -> str:
        return str(self.workspace()["workspace"]["id"])

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
        with self._lock:
            self.client.stats.rows[table] += len(rows)
        return rows


def incremental_pass(
    context: SyncContext, name: str, state: dict[str, Any]
) -> Iterator[list[Record]]:
    """Pages of records of a list endpoint that changed since the saved cursor.

    A pass that took more than one request may have missed records that changed while it
    paged (their new `updated_at` lies after its start); catch-up passes re-read from its
    start until one pass fits in a single response, a consistent snapshot. So a run leaves the
    warehouse equal to the service as of its last request, not merely "eventually" equal.

    State kept per resource: `cursor` (ISO time the next run reads from); `known`
    (fingerprints of what the last run loaded and the next may return again, so a run with
    no change loads no row); and `pass`, an interrupted pass: its `since`, the server time it
    `started`, its pager `position` and the fingerprints it `fetched` so far.
    """
    path, extra = settings.LIST_ENDPOINTS[name]
    interrupted: dict[str, Any] = state.get("pass") or {}
    if interrupted:
        since = interrupted.get("since")
    else:
        since = state.get("cursor") or context.initial_since
    started: datetime | None = (
        parse_iso(interrupted["started"]) if interrupted.get("started") else None
    )
    position = PagerPosition.from_state(interrupted.get("position"))
    fetched: dict[str, str] = dict(interrupted.get("fetched", {}))
    known: dict[str, str] = state.get("known", {})
    requests = 0

    def fetch(offset: int) -> ListPage:
        nonlocal started, requests
        params: dict[str, str | int] = {**extra, "limit": context.page_size, "offset": offset}
        if since:
            params["updated_since"] = since
        body, at = context.client.get(path, params)
        requests += 1
        if started is None:
            started = at
        return ListPage(list(body["data"]), int(body["total"]))

    def cursor_after(moment: datetime | None) -> datetime:
        assert moment is not None
        return moment - timedelta(seconds=context.lag_seconds + 1)  # +1: Date has whole seconds

    first_started: datetime | None = (
        parse_iso(interrupted["first_started"]) if interrupted.get("first_started") else started
    )
    try:
        for round_number in range(settings.MAX_CATCH_UP_PASSES + 1):
            changed_in_pass = 0
            for fresh in anchored_pages(
                fetch, page_size=context.page_size, overlap=settings.PAGE_OVERLAP, position=position
            ):
                if first_started is None:
                    first_started = started
                cursor = cursor_after(first_started)
                changed = []
                for record in fresh:
                    digest = fingerprint(record)
                    if known.get(record["id"]) != digest and fetched.get(record["id"]) != digest:
                        changed.append(dict(record))
                    # Remember what the next run can return again: every shipment (they have
                    # no updated_at), the records at or after the cursor for the rest.
                    stamp = record.get("updated_at")
                    if not isinstance(stamp, str) or parse_iso(stamp) >= cursor:
                        fetched[record["id"]] = digest
                changed_in_pass += len(changed)
                if changed:
                    yield context.stamp(changed)
            if first_started is None:
                first_started = started
            done = requests <= 1 or (round_number > 0 and not changed_in_pass)
            if done or round_number == settings.MAX_CATCH_UP_PASSES:
                break
            # Catch up on what changed while this pass paged: from its exact start, since the
            # run's cursor below keeps the lag for anything stamped a little early.
            log.info(
                "%s: %d requests in the pass; catching up on changes made meanwhile", name, requests
            )
            assert started is not None
            since, started, requests = to_iso(started), None, 0
            position = PagerPosition()
    except RunStopped:
        # Times are the service's (its Date header), never this machine's clock: a pass
        # stopped before its first answer keeps "unknown" and learns it when it resumes.
        state["pass"] = {
            "since": since,
            "started": to_iso(started) if started else None,
            "first_started": to_iso(first_started) if first_started else None,
            "position": position.to_state(),
            "fetched": fetched,
        }
        raise
    state["cursor"] = to_iso(cursor_after(first_started))
    state["known"] = fetched
    state.pop("pass", None)


def fetch_for_each(
    context: SyncContext,
    ids: Iterable[str],
    fetch_one: Callable[[str], list[Record]],
    pending: dict[str, int],
) -> Iterator[list[Record]]:
    """Run `fetch_one` for every id on the shared pacer, `concurrency` at a time, yielding rows
    as they come. Ids stay in `pending` (saved in state) until their rows are yielded, so a
    stopped run leaves exactly the unfinished ones for the next run."""
    queue = list(dict.fromkeys(ids))
    for item in queue:
        pending[item] = 1
    stopped: RunStopped | None = None
    with ThreadPoolExecutor(max_workers=context.concurrency, thread_name_prefix="child") as pool:
        futures: dict[Future[list[Record]], str] = {pool.submit(fetch_one, i): i for i in queue}
        for future in as_completed(futures):
            item = futures[future]
            try:
                rows = future.result()
            except NotFound:
                rows = []  # the parent vanished between the list and this call
            except RunStopped as error:
                stopped = error
                continue
            pending.pop(item, None)
            if rows:
                yield rows
    if stopped is not None:
        raise stopped


# ---------------------------------------------------------------------- shaping
def shape_document(document: Record, workspace_id: str) -> Record:
    document = dict(document)
    document["workspace_id"] = workspace_id
    document["placeholders"] = [
        {"value": name, "document_id": document["id"], "workspace_id": workspace_id}
        for name in document.get("placeholders") or []
    ]
    document["fields"] = [
        {**f, "document_id": document["id"], "workspace_id": workspace_id}
        for f in document.get("fields") or []
    ]
    if "blocks" in document:
        document["blocks"] = [
            {**b, "document_id": document["id"], "workspace_id": workspace_id}
            for b in document.get("blocks") or []
        ]
    return document


def shape_shipment(shipment: Record, workspace_id: str) -> Record:
    shipment = dict(shipment)
    shipment["workspace_id"] = workspace_id
    shipment["recipients"] = [
        {**r, "shipment_id": shipment["id"], "workspace_id": workspace_id}
        for r in shipment.get("recipients") or []
    ]
    return shipment


def shape_contact(contact: Record, workspace_id: str) -> Record:
    """`custom` becomes key/value rows (keys with dots stay verbatim, unlike flattened columns)."""
    contact = dict(contact)
    contact["workspace_id"] = workspace_id
    custom = contact.get("custom") or {}
    contact["custom"] = [
        {"key": str(key), "value": value, "contact_id": contact["id"], "workspace_id": workspace_id}
        for key, value in (custom.items() if isinstance(custom, dict) else [])
    ]
    contact["group_ids"] = [
        {"value": group, "contact_id": contact["id"], "workspace_id": workspace_id}
        for group in contact.get("group_ids") or []
    ]
    return contact


def audit_event_rows(shipment_id: str, events: list[Record], workspace_id: str) -> list[Record]:
    return [{**e, "shipment_id": shipment_id, "workspace_id": workspace_id} for e in events]


def _field_value(value: Any) -> str | None:
    """Text values verbatim; anything else (a payment object) as JSON text, so one text
    column holds every field type losslessly (`type` says which it is)."""
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def field_rows(body: Record, workspace_id: str) -> list[Record]:
    """One row per shipment, recipient and field, with the value as text (see _field_value)."""
    shipment_id = body.get("shipment_id")
    rows = []
    for entry in body.get("data") or []:
        for filled in entry.get("fields") or []:
            rows.append(
                {
                    "shipment_id": shipment_id,
                    "recipient_id": entry.get("recipient_id"),
                    "field_id": filled.get("field_id"),
                    "workspace_id": workspace_id,
                    "document_name": body.get("document_name"),
                    "recipient_name": entry.get("recipient_name"),
                    "recipient_email": entry.get("recipient_email"),
                    "recipient_status": entry.get("status"),
                    "recipient_signed_at": entry.get("signed_at"),
                    "placeholders": entry.get("placeholders"),
                    "external_id": filled.get("external_id"),
                    "label": filled.get("label"),
                    "type": filled.get("type"),
                    "required": filled.get("required"),
                    "value": _field_value(filled.get("value")),
                }
            )
    return rows
