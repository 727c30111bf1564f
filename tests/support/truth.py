"""The sandbox's own records and the warehouse's raw tables, put in one comparable form.

The expected side is computed here from the sandbox's store (not through the pipeline or the
API responses), so a test that compares the two checks the whole path: HTTP, paging, dlt
normalisation, merge, types.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from sandbox import RECORD_KINDS, Contact, Document, Shipment, Store

from .warehouse import raw_tables

Rows = set[tuple[Any, ...]]


def ms_to_iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def ts_to_iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds")


def expected(store: Store) -> dict[str, Rows]:
    """Every raw table's rows as the sandbox serves them, under the store's lock: live records
    only (what the application deleted is in `deleted_rows`)."""
    with store.lock:
        return _rows(
            store,
            list(store.documents.by_id.values()),
            list(store.contacts.by_id.values()),
            list(store.shipments.by_id.values()),
            live=True,
        )


def deleted_rows(store: Store) -> dict[str, Rows]:
    """Every raw table's rows that belong to records the application deleted (and has not
    restored), in `expected`'s form and as they were when deleted: what a warehouse that keeps
    deleted rows, marked, holds beyond `expected`. `workspaces` and `webhooks` are empty."""
    with store.lock:
        return _rows(
            store,
            list(store.deleted.documents.values()),
            list(store.deleted.contacts.values()),
            list(store.deleted.shipments.values()),
            live=False,
        )


def deleted_ids(store: Store) -> dict[str, set[str]]:
    """The ids the application deleted and has not restored, per raw table of a top-level
    record (`documents`, `contacts`, `shipments`): what a complete id pass finds gone."""
    with store.lock:
        return {kind: store.deleted_ids(kind) for kind in RECORD_KINDS}


def _rows(
    store: Store,
    documents: list[Document],
    contacts: list[Contact],
    shipments: list[Shipment],
    *,
    live: bool,
) -> dict[str, Rows]:
    """Every raw table's rows of these records; the workspace and its webhooks only if `live`."""
    workspace = store.workspace.id
    tables: dict[str, Rows] = {
        "workspaces": {(workspace, store.workspace.name, store.workspace.plan)} if live else set(),
        "documents": {
            (d.id, d.name, d.status, ms_to_iso(d.updated_at), workspace) for d in documents
        },
        "documents__fields": {
            (d.id, f.id, f.type, f.label, f.external_id) for d in documents for f in d.fields
        },
        "shipments": {
            (
                s.id,
                s.status,
                s.activity_status,
                s.document_id,
                ms_to_iso(s.created_at),
                ms_to_iso(s.archived_at),
                ms_to_iso(s.revoked_at),
                workspace,
            )
            for s in shipments
        },
        "shipments__recipients": {
            (
                s.id,
                r.id,
                r.position,
                r.status,
                r.delivery_status,
                ms_to_iso(r.sent_at),
                ms_to_iso(r.signed_at),
                r.view_count,
                workspace,
            )
            for s in shipments
            for r in s.recipients
        },
        "contacts": {
            (c.id, c.email, c.company, ms_to_iso(c.updated_at), workspace) for c in contacts
        },
        "contacts__custom": {(c.id, k, v) for c in contacts for k, v in c.custom.items()},
        "audit_events": {
            (e["id"], s.id, e["type"], e["at"].replace("Z", "+00:00"), e["recipient_id"])
            for s in shipments
            for e in s.audit_events()
        },
        "shipment_fields": {
            (
                body["shipment_id"],
                entry["recipient_id"],
                f["field_id"],
                f["type"],
                _value_text(f["value"]),
            )
            for s in shipments
            for body in [s.filled_fields()]
            for entry in body["data"]
            for f in entry["fields"]
        },
        "webhooks": (
            {(h.id, h.event, h.target_url, h.is_active) for h in store.webhooks.values()}
            if live
            else set()
        ),
    }
    return tables


QUERIES = {
    "workspaces": "select id, name, plan from raw.workspaces",
    "documents": "select id, name, status, updated_at, workspace_id from raw.documents",
    "documents__fields": """
        select d.id, f.id, f.type, f.label, f.external_id
        from raw.documents__fields f join raw.documents d on f._dlt_parent_id = d._dlt_id""",
    "shipments": """
        select id, status, activity_status, document_id, created_at, archived_at, revoked_at,
               workspace_id
        from raw.shipments""",
    "shipments__recipients": """
        select s.id, r.id, r.position, r.status, r.delivery_status, r.sent_at, r.signed_at,
               r.view_count, r.workspace_id
        from raw.shipments__recipients r join raw.shipments s on r._dlt_parent_id = s._dlt_id""",
    "contacts": "select id, email, company, updated_at, workspace_id from raw.contacts",
    "contacts__custom": """
        select c.id, k.key, k.value
        from raw.contacts__custom k join raw.contacts c on k._dlt_parent_id = c._dlt_id""",
    "audit_events": 'select id, shipment_id, type, "at", recipient_id from raw.audit_events',
    "shipment_fields": """
        select shipment_id, recipient_id, field_id, type, value from raw.shipment_fields""",
    "webhooks": "select id, event, target_url, is_active from raw.webhooks",
}


# The column of each query above that names the row's workspace.
WORKSPACE_OF = {
    "workspaces": "id",
    "documents": "workspace_id",
    "documents__fields": "d.workspace_id",
    "shipments": "workspace_id",
    "shipments__recipients": "s.workspace_id",
    "contacts": "workspace_id",
    "contacts__custom": "c.workspace_id",
    "audit_events": "workspace_id",
    "shipment_fields": "workspace_id",
    "webhooks": "workspace_id",
}


# The column of each query above that says whether the row belongs to a deleted record (its own
# `_deleted_at`: nested and child rows carry it too); tables without one hold no such rows.
DELETED_OF = {
    "documents": "_deleted_at",
    "documents__fields": "f._deleted_at",
    "shipments": "_deleted_at",
    "shipments__recipients": "r._deleted_at",
    "contacts": "_deleted_at",
    "contacts__custom": "k._deleted_at",
    "audit_events": "_deleted_at",
    "shipment_fields": "_deleted_at",
}


def actual(
    warehouse: Path, workspace_id: str | None = None, *, deleted: bool | None = None
) -> dict[str, Rows]:
    """The same rows read back from the warehouse (tables that do not exist are empty); only
    `workspace_id`'s rows when one is given; with `deleted`, only the rows marked deleted
    (True) or only the others (False)."""
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return _read_tables(
            raw_tables(connection),
            lambda query, params: connection.execute(query, params).fetchall(),
            "?",
            workspace_id,
            deleted,
        )


def actual_in_postgres(
    connection: Any, workspace_id: str | None = None, *, deleted: bool | None = None
) -> dict[str, Rows]:
    """`actual` of a Postgres warehouse: the same QUERIES through a psycopg2 connection (the
    dataset `raw` is a schema there too), read in one transaction and rolled back."""
    try:
        with connection.cursor() as cursor:

            def fetch(query: str, params: list[str]) -> list[Any]:
                cursor.execute(query, params)
                return list(cursor.fetchall())

            existing = fetch(
                "select table_name from information_schema.tables where table_schema = 'raw'", []
            )
            found = {name for (name,) in existing}
            return _read_tables(found, fetch, "%s", workspace_id, deleted)
    finally:
        connection.rollback()


def _read_tables(
    existing: set[str],
    fetch: Callable[[str, list[str]], Iterable[Sequence[Any]]],
    placeholder: str,
    workspace_id: str | None,
    deleted: bool | None = None,
) -> dict[str, Rows]:
    """Every table of QUERIES through `fetch(query, parameters)`, which takes `placeholder`
    for a parameter; only `workspace_id`'s rows when one is given; only the rows marked
    deleted, or only the others, when `deleted` says so."""
    tables: dict[str, Rows] = {}
    for table, query in QUERIES.items():
        if table not in existing or (deleted and table not in DELETED_OF):
            tables[table] = set()
            continue
        conditions: list[str] = []
        params: list[str] = []
        if workspace_id is not None:
            conditions.append(f"{WORKSPACE_OF[table]} = {placeholder}")
            params.append(workspace_id)
        if deleted is not None and table in DELETED_OF:
            conditions.append(f"{DELETED_OF[table]} is {'not ' if deleted else ''}null")
        if conditions:
            query = f"{query} where {' and '.join(conditions)}"
        tables[table] = {_normalise(table, tuple(row)) for row in fetch(query, params)}
    return tables


def _value_text(value: Any) -> str | None:
    """The documented warehouse form of a filled-in value: text verbatim, objects as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _normalise(table: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
    values = [ts_to_iso(v) if isinstance(v, datetime) else v for v in row]
    if table == "shipment_fields" and values[-1] and values[-1].startswith("{"):
        values[-1] = _value_text(json.loads(values[-1]))  # compare objects, not spacing
    return tuple(values)


def differences(
    warehouse: Path, store: Store, *, by_workspace: bool = False
) -> dict[str, dict[str, Any]]:
    """Per table, up to five rows missing from the warehouse, five it has in excess, and the
    counts of both; empty when the warehouse equals the sandbox. With `by_workspace`, only the
    rows of the store's workspace are compared (a warehouse shared by several)."""
    return compare(expected(store), actual(warehouse, store.workspace.id if by_workspace else None))


def postgres_differences(
    connection: Any, store: Store, *, by_workspace: bool = False
) -> dict[str, dict[str, Any]]:
    """`differences` of a Postgres warehouse, read through a psycopg2 connection."""
    workspace_id = store.workspace.id if by_workspace else None
    return compare(expected(store), actual_in_postgres(connection, workspace_id))


def compare(want: dict[str, Rows], got: dict[str, Rows]) -> dict[str, dict[str, Any]]:
    """Per table, up to five rows of `want` missing from `got`, five in excess, and the counts
    of both; empty when the two are equal."""
    report: dict[str, dict[str, Any]] = {}
    for table in want:
        missing, extra = want[table] - got[table], got[table] - want[table]
        if missing or extra:
            report[table] = {
                "missing": sorted(missing, key=str)[:5],
                "extra": sorted(extra, key=str)[:5],
                "counts": [len(missing), len(extra)],
            }
    return report


def duplicate_keys(warehouse: Path) -> dict[str, int]:
    """Primary keys (ids within a workspace) that occur more than once, per table (must always
    be empty)."""
    keys = {
        "workspaces": "workspace_id, id",
        "documents": "workspace_id, id",
        "shipments": "workspace_id, id",
        "contacts": "workspace_id, id",
        "audit_events": "workspace_id, id",
        "webhooks": "workspace_id, id",
        "shipment_fields": "workspace_id, shipment_id, recipient_id, field_id",
    }
    found = {}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        for table, key in keys.items():
            try:
                count = connection.execute(
                    f"select count(*) from (select {key} from raw.{table} group by all "
                    "having count(*) > 1)"
                ).fetchone()
            except duckdb.CatalogException:
                continue
            if count and count[0]:
                found[table] = count[0]
    return found


def earliest(values: list[int | None]) -> int | None:
    """The earliest of some epoch-millisecond times that may be missing."""
    present = [v for v in values if v is not None]
    return min(present) if present else None


def week_of(ms: int) -> date:
    """The Monday (UTC) of the week an epoch-millisecond time falls in, as the marts' weeks."""
    day = datetime.fromtimestamp(ms / 1000, UTC).date()
    return day - timedelta(days=day.weekday())


def ms_of(value: datetime | None) -> int | None:
    """A warehouse timestamp as epoch milliseconds, to compare with the sandbox's own."""
    return None if value is None else round(value.timestamp() * 1000)
