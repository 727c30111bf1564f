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
from .children import Version, fetch_for_each, listed_versions, not_yet_fetched
from .columns import PERSONAL_COLUMNS, column_hints
from .configuration import Pacing, SigningConfiguration, configured_source
from .connection import connect
from .context import SyncContext
from .control import RunControl
from .deletions import (
    Deletions,
    DeletionSettings,
    FullCheck,
    TableDeletions,
    WarehouseRecords,
    describe_deletions,
)
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
from .incremental import ResourceSyncStatus, describe_sync, incomplete_shipments
from .lists import list_pages, list_state
from .paging import Record, fingerprint
from .privacy import PrivacyConfigError, PrivacyPolicy, configured_privacy, describe_policy
from .reconcile import check_due
from .rows import (
    ErasedPeople,
    audit_event_rows,
    field_rows,
    shape_contact,
    shape_document,
    shape_shipment,
    webhook_rows,
    workspace_row,
)
from .selection import RELOADED_RESOURCES, SOURCE_TABLES, chosen_resources, reloaded_resources
from .stats import RunCounters, RunStats
from .times import parse_iso, to_iso
from .urls import checked_base_url, item_path
from .window import ReloadWindow

EVENTS_LIMIT = settings.EVENTS_LIMIT  # the API's cap on one audit trail
RESOURCES = settings.RESOURCES
SHIPMENT_RESOURCES = settings.SHIPMENT_RESOURCES
DELETABLE_TABLES = settings.DELETABLE_TABLES
CHILD_TABLES = settings.CHILD_TABLES
DELETED_AT = settings.DELETED_AT
DELETE_MODES = settings.DELETE_MODES
# Ids are unique only within a workspace: every merge key starts with the workspace, so equal
# ids of two workspaces sharing a warehouse never meet (and a deleted webhook of one workspace
# never deletes another's).
WORKSPACE_AND_ID = ("workspace_id", "id")

__all__ = [
    "CHILD_TABLES",
    "DELETABLE_TABLES",
    "DELETED_AT",
    "DELETE_MODES",
    "EVENTS_LIMIT",
    "PERSONAL_COLUMNS",
    "RELOADED_RESOURCES",
    "RESOURCES",
    "SHIPMENT_RESOURCES",
    "SOURCE_TABLES",
    "AuthError",
    "DailyLimitReached",
    "DeletionSettings",
    "Deletions",
    "FullCheck",
    "Interrupted",
    "KeyRefused",
    "Pacing",
    "PrivacyConfigError",
    "PrivacyPolicy",
    "ReloadWindow",
    "RequestBudgetExhausted",
    "ResourceSyncStatus",
    "ResponseTooLarge",
    "RetryAfterTooLong",
    "RunControl",
    "RunCounters",
    "RunStats",
    "RunStopped",
    "ServiceUnreachable",
    "SigningAPIError",
    "SigningConfiguration",
    "SourceConfigError",
    "SyncContext",
    "TableDeletions",
    "UnexpectedAnswer",
    "WarehouseRecords",
    "checked_base_url",
    "chosen_resources",
    "configured_privacy",
    "configured_source",
    "connect",
    "describe_deletions",
    "describe_policy",
    "describe_sync",
    "fingerprint",
    "incomplete_shipments",
    "parse_iso",
    "reloaded_resources",
    "signing_source",
    "to_iso",
]


@dlt.source(name="signing", max_table_nesting=1)
def signing_source(connection: SyncContext) -> Sequence[DltResource]:
    """The signing API as dlt resources, bound to one run's connection to one workspace
    (`connect`, which has asked `/me` already: a wrong key or URL fails before anything is
    built, and the caller knows the workspace whose state to open)."""
    changes = shipment_changes(connection)
    return (
        workspaces(connection),
        documents(connection),
        changes,
        changes | shipments(connection),
        changes | audit_events(connection),
        changes | shipment_fields(connection),
        contacts(connection),
        webhooks(connection),
    )


def _columns(table: str, **extra: dict[str, Any]) -> Any:
    """Column hints of a root table: every column of `columns.TABLES[table]` with its type
    (so columns still all null exist from the first load), `workspace_id` non-nullable, the
    merge tie-breaker `_fetch_seq`, `_deleted_at` on the rows of a record that can be deleted,
    then `extra`."""
    columns = column_hints(table)
    columns["workspace_id"] = {"data_type": "text", "nullable": False}
    columns["_fetch_seq"] = {"data_type": "bigint", "dedup_sort": "desc"}
    if table in DELETABLE_TABLES or any(table in c for c in CHILD_TABLES.values()):
        columns[DELETED_AT] = _DELETED_AT_HINT
    columns.update(extra)
    return {name: {**hints, "name": name} for name, hints in columns.items()}


# When the pipeline noticed that the record a row belongs to was deleted (null: live).
_DELETED_AT_HINT = {"data_type": "timestamp", "timezone": True, "nullable": True}


def _nested(table: str) -> Any:
    """Hints of a nested table (`parent__list`) of a record that can be deleted: every column
    of `columns.TABLES[table]`, and `_deleted_at`."""
    return {
        "columns": {**column_hints(table), DELETED_AT: {**_DELETED_AT_HINT, "name": DELETED_AT}}
    }


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
    state = list_state(context, "workspaces")
    row = workspace_row(context.me(), context.guard)
    digest = fingerprint(row)
    if state.get(settings.STATE_FINGERPRINT) != digest:
        yield context.counted("workspaces", context.stamp([row], "workspaces"))
        state[settings.STATE_FINGERPRINT] = digest


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
    state = list_state(context, "documents")
    pending: dict[str, Version] = state.setdefault(settings.STATE_PENDING_DETAILS, {})
    detail = partial(_document_detail, context)
    settled: dict[str, Version] = {}
    try:
        backlog = fetch_for_each(context, dict(pending), detail, pending, "documents", settled)
        yield from _counted(context, "documents", backlog)
        for page in list_pages(context, "documents", state):
            changed = not_yet_fetched(listed_versions(page), settled)
            details = fetch_for_each(context, changed, detail, pending, "documents")
            yield from _counted(context, "documents", details)
    except RunStopped:
        return


@dlt.resource(selected=False)
def shipment_changes(context: SyncContext) -> Iterator[dict[str, Any]]:
    """Pages of shipments changed since the cursor; feeds the three shipment tables.

    The first item is always a kick so that children left unfinished by a stopped run are
    fetched even when nothing changed since."""
    state = list_state(context, "shipments")
    yield {"kick": True, "shipments": []}
    try:
        for page in list_pages(context, "shipments", state):
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
        ws, guard, privacy = context.workspace_id, context.guard, context.privacy
        rows = [shape_shipment(s, ws, guard, privacy) for s in item["shipments"]]
        yield context.counted("shipments", rows)


def _children_of(
    context: SyncContext, table: str, item: dict[str, Any], fetch_one: Any
) -> Iterator[list[Record]]:
    """Rows of one child endpoint for the shipments of `item`, plus (on the kick) the backlog
    a stopped run left in this transformer's state (started again, on the kick, by a refresh
    of the shipments)."""
    state = list_state(context, "shipments", restarts=item["kick"])
    pending: dict[str, Version] = state.setdefault(settings.STATE_PENDING, {})
    # dlt interleaves this generator's calls: only the first (kick) item takes the backlog a
    # stopped run left, or two calls would fetch the same ids; what it fetched is not fetched
    # again for a later page that lists the same shipment unchanged.
    settled = context.settled_children.setdefault(table, {})
    if item["kick"]:
        ids = dict(pending)
    else:
        ids = not_yet_fetched(listed_versions(item["shipments"]), settled)
    try:
        fetched = fetch_for_each(context, ids, fetch_one, pending, "shipments", settled)
        yield from _counted(context, table, fetched)
    except RunStopped:
        return


def _events_of(context: SyncContext, listed: dict[str, Record], shipment_id: str) -> list[Record]:
    """One shipment's audit trail; `listed` are the shipments of this page, whose recipients
    say whose events an erasure removes (a shipment left pending by a stopped run is read
    again for that, only when the warehouse records erasures)."""
    erased = None
    if context.privacy.erased:
        shipment = listed.get(shipment_id) or _shipment(context, shipment_id)
        erased = ErasedPeople.of(shipment, context.privacy)
    path = item_path("shipments", shipment_id, "events")
    events, _, _ = context.client.get_data(path, {"limit": settings.EVENTS_LIMIT})
    if len(events) >= settings.EVENTS_LIMIT:
        context.client.stats.count_truncated_trail()
    ws, guard = context.workspace_id, context.guard
    rows = audit_event_rows(shipment_id, events, ws, guard, context.privacy, erased)
    return context.stamp(rows, "audit_events")


def _shipment(context: SyncContext, shipment_id: str) -> Record:
    shipment: Record
    shipment, _, _ = context.client.get_data(item_path("shipments", shipment_id), shape="record")
    return shipment


def _fields_of(context: SyncContext, shipment_id: str) -> list[Record]:
    path = item_path("shipments", shipment_id, "fields")
    _, body, _ = context.client.get_data(path, shape="entries")
    rows = field_rows(shipment_id, body, context.workspace_id, context.guard, context.privacy)
    return context.stamp(rows, "shipment_fields")


@dlt.transformer(
    write_disposition="merge", primary_key=WORKSPACE_AND_ID, columns=_columns("audit_events")
)
def audit_events(item: dict[str, Any], context: SyncContext) -> Iterator[list[Record]]:
    """The audit trail of each changed shipment, one row per event."""
    listed = {s["id"]: s for s in item["shipments"]}
    yield from _children_of(context, "audit_events", item, partial(_events_of, context, listed))


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


# The contacts table's hints, shared by the list (`contacts`) and the reads by id.
CONTACT_HINTS: dict[str, Any] = {
    "write_disposition": "merge",
    "primary_key": WORKSPACE_AND_ID,
    "columns": _columns("contacts"),
    "nested_hints": {
        "custom": _nested("contacts__custom"),
        "group_ids": _nested("contacts__group_ids"),
    },
}


@dlt.resource(**CONTACT_HINTS)
def contacts(context: SyncContext) -> Iterator[list[Record]]:
    """Contacts; custom properties as `contacts__custom` key/value rows."""
    state = list_state(context, "contacts")
    try:
        for page in list_pages(context, "contacts", state):
            ws, guard, privacy = context.workspace_id, context.guard, context.privacy
            rows = [shape_contact(c, ws, guard, privacy) for c in page]
            yield context.counted("contacts", [row for row in rows if row is not None])
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
    without the scope they need is warned about and the rest loads. They change rarely, so
    they are read on the count checks' cadence (`count_check_every_hours`)."""
    state = dlt.current.resource_state()
    if not check_due(context, state.get(settings.STATE_READ_AT)):
        return
    try:
        hooks, _, answered_at = context.client.get_data("/webhooks")
    except Forbidden as refused:
        scope = settings.SKIPPABLE_ON_403["/webhooks"]
        context.client.stats.warn(
            f"webhooks skipped: the key lacks the `{scope}` scope ({refused})"
        )
        return
    except RunStopped:
        return
    ws = context.workspace_id
    loaded: dict[str, str] = state.setdefault(settings.STATE_FINGERPRINTS, {})
    if "webhooks" in context.restart:  # refreshed: every one loaded again, the gone removed
        loaded = dict.fromkeys(loaded, "")
    current = webhook_rows(hooks, ws, context.guard)
    changed = [row for i, row in current.items() if loaded.get(i) != fingerprint(row)]
    gone = [{"id": i, "workspace_id": ws, "deleted": True} for i in loaded if i not in current]
    state[settings.STATE_FINGERPRINTS] = {i: fingerprint(row) for i, row in current.items()}
    state[settings.STATE_READ_AT] = to_iso(answered_at)
    if changed or gone:
        yield context.counted("webhooks", context.stamp(changed + gone, "webhooks"))
