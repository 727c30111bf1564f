"""The records named by id, read one by one: what webhook deliveries named, loaded by the
webhook drains (`pipelines/webhooks/drain.py`).

`records_source` merges shipments (with their recipients, audit trail and filled-in fields) and
contacts into the same tables with the same keys as `signing_source`, through resources of
their own names (`settings.BY_ID_RESOURCES`): dlt keeps state per resource name, so the
incremental cursors, fingerprints and backlogs stay as they were. The shipment children are
`signing_source`'s own transformers under those names.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import dlt
from dlt.sources import DltResource

from . import (
    CONTACT_HINTS,
    audit_events,
    settings,
    shipment_fields,
    shipments,
)
from .children import fetch_for_each
from .context import SyncContext
from .errors import RunStopped, Unserved
from .paging import Record
from .rows import shape_contact
from .urls import item_path


@dlt.source(name="signing", max_table_nesting=1)
def records_source(
    connection: SyncContext, shipment_ids: Sequence[str] = (), contact_ids: Sequence[str] = ()
) -> Sequence[DltResource]:
    """Just the records named by id, read one by one: shipments with their recipients, audit
    trail and filled-in fields, and contacts. They merge into the same tables with the same
    keys as `signing_source`'s, through resources of their own names (`BY_ID_RESOURCES`), so
    the incremental cursors and backlogs stay as they were. A record gone (404) is skipped; one
    the service will not serve (a redirect, another answer no retry changes) is skipped and
    kept in `connection.unserved` with the reason. The webhook drain loads what deliveries
    named with it."""
    read = shipments_read_by_id(connection, list(dict.fromkeys(shipment_ids)))
    return (
        read,
        read | _by_id(shipments)(connection),
        read | _by_id(audit_events)(connection),
        read | _by_id(shipment_fields)(connection),
        contacts_by_id(connection, list(dict.fromkeys(contact_ids))),
    )


def _by_id(resource: DltResource) -> DltResource:
    """`resource` under its by-id name (state of its own), still writing its own table."""
    renamed = resource.with_name(settings.BY_ID_RESOURCES[resource.name])
    return renamed.apply_hints(table_name=resource.name)


def _read_one(context: SyncContext, kind: str, record_id: str) -> list[Record]:
    """One record by id (GET /{kind}/{id}), numbered in read order like a listed one; none
    when the service will not serve it (said in `context.unserved`), so one such record does
    not hold up the others."""
    try:
        record, _, _ = context.client.get_data(item_path(kind, record_id), shape="record")
    except Unserved as refused:
        context.unserved[(kind, record_id)] = str(refused)
        return []
    return context.stamp([dict(record)], kind)


@dlt.resource(selected=False, name=settings.SHIPMENTS_READ_BY_ID)
def shipments_read_by_id(context: SyncContext, ids: list[str]) -> Iterator[dict[str, Any]]:
    """The shipments named, read by id, in the shape `shipment_changes` feeds its three
    transformers (a kick first, for the children a stopped read left pending)."""
    yield {"kick": True, "shipments": []}
    read_one = partial(_read_one, context, "shipments")
    try:
        for records in fetch_for_each(context, ids, read_one, {}, "shipments"):
            yield {"kick": False, "shipments": records}
    except RunStopped:
        return


@dlt.resource(name=settings.BY_ID_RESOURCES["contacts"], table_name="contacts", **CONTACT_HINTS)
def contacts_by_id(context: SyncContext, ids: list[str]) -> Iterator[list[Record]]:
    """The contacts named, read by id (GET /contacts/{id})."""
    ws, guard, privacy = context.workspace_id, context.guard, context.privacy
    read_one = partial(_read_one, context, "contacts")
    try:
        for records in fetch_for_each(context, ids, read_one, {}, "contacts"):
            rows = [shape_contact(c, ws, guard, privacy) for c in records]
            yield context.counted("contacts", [row for row in rows if row is not None])
    except RunStopped:
        return
