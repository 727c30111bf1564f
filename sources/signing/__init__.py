"""dlt source of the electronic signing service's API v1: every entity, incremental on
`updated_since`, paced to the service's limits, and merged so nothing is lost or doubled.

The resources are defined at module level and bound to one `SyncContext` (client, workspace,
options) when the source is built; the algorithms live in the modules they are named after:
`incremental` (passes over a changing list), `paging`, `children`, `rows`, `client`, `pacing`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import dlt
from dlt.sources import DltResource

from . import settings
from .children import fetch_for_each
from .client import SigningClient, checked_base_url, item_path
from .columns import column_hints
from .context import SyncContext, check_service
from .control import RunControl
from .errors import (
    AuthError,
    DailyLimitReached,
    Forbidden,
    Interrupted,
    KeyRefused,
    RequestBudgetExhausted,
    ResponseTooLarge,
    RetryAfterTooLong,
    RunStopped,
    ServiceUnreachable,
    SigningAPIError,
    SourceConfigError,
    UnexpectedAnswer,
)
from .incremental import (
    ResourceSyncStatus,
    describe_sync,
    incomplete_shipments,
    incremental_pass,
)
from .pacing import Pacer
from .paging import Record, fingerprint
from .rows import (
    audit_event_rows,
    field_rows,
    shape_contact,
    shape_document,
    shape_shipment,
    webhook_rows,
    workspace_row,
)
from .selection import SOURCE_TABLES, chosen_resources
from .stats import RunStats
from .times import parse_iso, to_iso

EVENTS_LIMIT = settings.EVENTS_LIMIT  # the API's cap on one audit trail
RESOURCES = settings.RESOURCES
SHIPMENT_RESOURCES = settings.SHIPMENT_RESOURCES
# Ids are unique only within a workspace: every merge key starts with the workspace, so equal
# ids of two workspaces sharing a warehouse never meet (and a deleted webhook of one workspace
# never deletes another's).
WORKSPACE_AND_ID = ("workspace_id", "id")

__all__ = [
    "EVENTS_LIMIT",
    "RESOURCES",
    "SHIPMENT_RESOURCES",
    "SOURCE_TABLES",
    "AuthError",
    "DailyLimitReached",
    "Interrupted",
    "KeyRefused",
    "RequestBudgetExhausted",
    "ResourceSyncStatus",
    "ResponseTooLarge",
    "RetryAfterTooLong",
    "RunControl",
    "RunStats",
    "RunStopped",
    "ServiceUnreachable",
    "SigningAPIError",
    "SourceConfigError",
    "UnexpectedAnswer",
    "checked_base_url",
    "chosen_resources",
    "describe_sync",
    "incomplete_shipments",
    "parse_iso",
    "signing_source",
    "to_iso",
]


@dlt.source(name="signing", max_table_nesting=1)
def signing_source(
    api_key: str = dlt.secrets.value,
    base_url: str = dlt.config.value,
    since: str | None = None,
    max_requests: int | None = None,
    lag_seconds: float = settings.CURSOR_LAG_SECONDS,
    page_size: int = settings.PAGE_SIZE,
    concurrency: int = settings.CHILD_CONCURRENCY,
    requests_per_second: float = settings.REQUESTS_PER_SECOND,
    burst: int = settings.BURST,
    give_up_after_seconds: float = settings.GIVE_UP_AFTER_SECONDS,
    max_retry_after_seconds: float = settings.MAX_RETRY_AFTER_SECONDS,
    request_deadline_seconds: float = settings.REQUEST_DEADLINE_SECONDS,
    max_response_bytes: int = settings.MAX_RESPONSE_BYTES,
    max_pages_without_new_records: int = settings.MAX_PAGES_WITHOUT_NEW_RECORDS,
    control: Any = None,
) -> Sequence[DltResource]:
    """The signing API as dlt resources. Asks `/me` at once, so a wrong key or URL fails
    before anything is written.

    Args:
        api_key: workspace API key (`SOURCES__SIGNING__API_KEY` or `.dlt/secrets.toml`).
        base_url: API root ending in `/v1` (`SOURCES__SIGNING__BASE_URL`).
        since: ISO time the first run starts from instead of the whole history.
        max_requests: stop cleanly after this many requests; the next run continues.
        lag_seconds: how far before each pass's start the next pass begins.
        page_size: list page size (5..200: pages overlap by 4 records).
        concurrency: child requests in flight at once (all through one pacer).
        requests_per_second: the pacer's ceiling before the service's headers say more; the
            reference states 10/s per key.
        burst: requests the pacer may send at once before settling to the rate.
        give_up_after_seconds: seconds of failures in a row (from the sending of the first
            failed request, 5xx answers included) after which the service is given up on.
        max_retry_after_seconds: a longer `Retry-After` (or `X-RateLimit-Reset` with nothing
            left) stops the run instead of waiting.
        request_deadline_seconds: the longest one request may take, answer included; a
            request past it is retried like a time-out.
        max_response_bytes: the largest answer read, decompressed; a larger one stops the
            run (exit 1) and is not retried.
        max_pages_without_new_records: list pages in a row that bring no record not read
            before, after which a pass gives up on a list that makes no sense (the cursor
            stays for the next run, and a warning says what the service did).
        control: a `RunControl` to stop the run from outside and read its counters.
    """
    _check_settings(
        page_size, request_deadline_seconds, max_response_bytes, max_pages_without_new_records
    )
    run = control if isinstance(control, RunControl) else RunControl()
    pacer = Pacer(requests_per_second, burst, control=run, max_wait=max_retry_after_seconds)
    client = SigningClient(
        base_url,
        api_key,
        control=run,
        pacer=pacer,
        max_requests=max_requests,
        give_up_after_seconds=give_up_after_seconds,
        max_retry_after_seconds=max_retry_after_seconds,
        request_deadline_seconds=request_deadline_seconds,
        max_response_bytes=max_response_bytes,
        connections=concurrency + 2,
    )
    context = SyncContext(
        client, since, lag_seconds, page_size, concurrency, max_pages_without_new_records
    )
    run.on_finish(context.close)  # also when /me fails: the run's finish releases the client
    run.workspace_id = check_service(context)
    changes = shipment_changes(context)
    return (
        workspaces(context),
        documents(context),
        changes,
        changes | shipments(context),
        changes | audit_events(context),
        changes | shipment_fields(context),
        contacts(context),
        webhooks(context),
    )


def _check_settings(
    page_size: int, deadline: float, max_bytes: int, max_pages_without_new: int
) -> None:
    """One line for a setting out of range, before any request."""
    smallest = settings.PAGE_OVERLAP + 1
    if not smallest <= page_size <= settings.MAX_PAGE_SIZE:
        raise SigningAPIError(
            f"page_size must be {smallest}..{settings.MAX_PAGE_SIZE} (pages overlap by "
            f"{settings.PAGE_OVERLAP} records), not {page_size}"
        )
    if deadline <= 0:
        raise SigningAPIError(f"request_deadline_seconds must be above 0, not {deadline}")
    if max_bytes < 1:
        raise SigningAPIError(f"max_response_bytes must be 1 or more, not {max_bytes}")
    if max_pages_without_new < 1:
        raise SigningAPIError(
            f"max_pages_without_new_records must be 1 or more, not {max_pages_without_new}"
        )


def _columns(table: str, **extra: dict[str, Any]) -> Any:
    """Column hints of a root table: every column of `columns.TABLES[table]` with its type
    (so columns still all null exist from the first load), `workspace_id` non-nullable, the
    merge tie-breaker `_fetch_seq`, then `extra`."""
    columns = column_hints(table)
    columns["workspace_id"] = {"data_type": "text", "nullable": False}
    columns["_fetch_seq"] = {"data_type": "bigint", "dedup_sort": "desc"}
    columns.update(extra)
    return {name: {**hints, "name": name} for name, hints in columns.items()}


def _nested(table: str) -> Any:
    """Hints of a nested table (`parent__list`): every column of `columns.TABLES[table]`."""
    return {"columns": column_hints(table)}


def _counted(
    context: SyncContext, table: str, batches: Iterator[list[Record]]
) -> Iterator[list[Record]]:
    for rows in batches:
        yield context.counted(table, rows)


@dlt.resource(
    write_disposition="merge", primary_key=WORKSPACE_AND_ID, columns=_columns("workspaces")
)
def workspaces(context: SyncContext) -> Iterator[list[Record]]:
    """The workspace the key belongs to (GET /me), one row, loaded when it changed."""
    state = dlt.current.resource_state()
    row = workspace_row(context.me(), context.guard)
    digest = fingerprint(row)
    if state.get("fingerprint") != digest:
        yield context.counted("workspaces", context.stamp([row], "workspaces"))
        state["fingerprint"] = digest


def _document_detail(context: SyncContext, document_id: str) -> list[Record]:
    document, _, _ = context.client.get_data(item_path("documents", document_id), shape="record")
    row = shape_document(document, context.workspace_id, context.guard)
    return context.stamp([row], "documents")


@dlt.resource(
    write_disposition="merge",
    primary_key=WORKSPACE_AND_ID,
    columns=_columns("documents"),
    nested_hints={
        "fields": _nested("documents__fields"),
        "placeholders": _nested("documents__placeholders"),
        "blocks": _nested("documents__blocks"),
    },
)
def documents(context: SyncContext) -> Iterator[list[Record]]:
    """Changed documents, read whole: blocks and theme come only from GET /documents/{id}."""
    state = dlt.current.resource_state()
    pending: dict[str, int] = state.setdefault("pending_details", {})
    detail = partial(_document_detail, context)
    try:
        yield from _counted(
            context, "documents", fetch_for_each(context, list(pending), detail, pending)
        )
        for page in incremental_pass(context, "documents", state):
            changed = [d["id"] for d in page]
            yield from _counted(
                context, "documents", fetch_for_each(context, changed, detail, pending)
            )
    except RunStopped:
        return


@dlt.resource(selected=False)
def shipment_changes(context: SyncContext) -> Iterator[dict[str, Any]]:
    """Pages of shipments changed since the cursor; feeds the three shipment tables.

    The first item is always a kick so that children left unfinished by a stopped run are
    fetched even when nothing changed since."""
    state = dlt.current.resource_state()
    yield {"kick": True, "shipments": []}
    try:
        for page in incremental_pass(context, "shipments", state):
            yield {"kick": False, "shipments": page}
    except RunStopped:
        return


@dlt.transformer(
    write_disposition="merge",
    primary_key=WORKSPACE_AND_ID,
    columns=_columns("shipments"),
    nested_hints={"recipients": _nested("shipments__recipients")},
)
def shipments(item: dict[str, Any], context: SyncContext) -> Iterator[list[Record]]:
    """Shipments with their recipients (archived included)."""
    if item["shipments"]:
        ws, guard = context.workspace_id, context.guard
        rows = [shape_shipment(s, ws, guard) for s in item["shipments"]]
        yield context.counted("shipments", rows)


def _children_of(
    context: SyncContext, table: str, item: dict[str, Any], fetch_one: Any
) -> Iterator[list[Record]]:
    """Rows of one child endpoint for the shipments of `item`, plus (on the kick) the backlog
    a stopped run left in this transformer's state."""
    state = dlt.current.resource_state()
    pending: dict[str, int] = state.setdefault("pending", {})
    # dlt interleaves this generator's calls: only the first (kick) item takes the backlog a
    # stopped run left, or two calls would fetch the same ids.
    backlog = list(pending) if item["kick"] else []
    ids = backlog + [s["id"] for s in item["shipments"]]
    try:
        yield from _counted(context, table, fetch_for_each(context, ids, fetch_one, pending))
    except RunStopped:
        return


def _events_of(context: SyncContext, shipment_id: str) -> list[Record]:
    path = item_path("shipments", shipment_id, "events")
    events, _, _ = context.client.get_data(path, {"limit": settings.EVENTS_LIMIT})
    if len(events) >= settings.EVENTS_LIMIT:
        context.client.stats.count_truncated_trail()
    rows = audit_event_rows(shipment_id, events, context.workspace_id, context.guard)
    return context.stamp(rows, "audit_events")


def _fields_of(context: SyncContext, shipment_id: str) -> list[Record]:
    path = item_path("shipments", shipment_id, "fields")
    _, body, _ = context.client.get_data(path, shape="entries")
    rows = field_rows(shipment_id, body, context.workspace_id, context.guard)
    return context.stamp(rows, "shipment_fields")


@dlt.transformer(
    write_disposition="merge", primary_key=WORKSPACE_AND_ID, columns=_columns("audit_events")
)
def audit_events(item: dict[str, Any], context: SyncContext) -> Iterator[list[Record]]:
    """The audit trail of each changed shipment, one row per event."""
    yield from _children_of(context, "audit_events", item, partial(_events_of, context))


@dlt.transformer(
    write_disposition="merge",
    primary_key=("workspace_id", "shipment_id", "recipient_id", "field_id"),
    columns=_columns(
        "shipment_fields", value={"data_type": "text"}, placeholders={"data_type": "json"}
    ),
)
def shipment_fields(item: dict[str, Any], context: SyncContext) -> Iterator[list[Record]]:
    """Filled-in field values of each changed shipment, one row per recipient and field."""
    yield from _children_of(context, "shipment_fields", item, partial(_fields_of, context))


@dlt.resource(
    write_disposition="merge",
    primary_key=WORKSPACE_AND_ID,
    columns=_columns("contacts"),
    nested_hints={
        "custom": _nested("contacts__custom"),
        "group_ids": _nested("contacts__group_ids"),
    },
)
def contacts(context: SyncContext) -> Iterator[list[Record]]:
    """Contacts; custom properties as `contacts__custom` key/value rows."""
    state = dlt.current.resource_state()
    try:
        for page in incremental_pass(context, "contacts", state):
            ws, guard = context.workspace_id, context.guard
            yield context.counted("contacts", [shape_contact(c, ws, guard) for c in page])
    except RunStopped:
        return


@dlt.resource(
    write_disposition="merge",
    primary_key=WORKSPACE_AND_ID,
    columns=_columns(
        "webhooks",
        deleted={"data_type": "bool", "hard_delete": True},
        last_error={"data_type": "text"},
    ),
)
def webhooks(context: SyncContext) -> Iterator[list[Record]]:
    """Webhook subscriptions (the list is small and unpaged); deleted ones are removed. A key
    without the scope they need is warned about and the rest loads."""
    state = dlt.current.resource_state()
    try:
        hooks, _, _ = context.client.get_data("/webhooks")
    except Forbidden as refused:
        scope = settings.SKIPPABLE_ON_403["/webhooks"]
        context.client.stats.warn(
            f"webhooks skipped: the key lacks the `{scope}` scope ({refused})"
        )
        return
    except RunStopped:
        return
    ws = context.workspace_id
    loaded: dict[str, str] = state.setdefault("fingerprints", {})
    current = webhook_rows(hooks, ws, context.guard)
    changed = [row for i, row in current.items() if loaded.get(i) != fingerprint(row)]
    gone = [{"id": i, "workspace_id": ws, "deleted": True} for i in loaded if i not in current]
    state["fingerprints"] = {i: fingerprint(row) for i, row in current.items()}
    if changed or gone:
        yield context.counted("webhooks", context.stamp(changed + gone, "webhooks"))
