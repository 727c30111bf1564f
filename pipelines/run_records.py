"""What a run leaves in the warehouse beside the data: a record of every run (failed and stopped
ones too) for `signing-etl status`, and the shipments whose children are still pending, which
the models hold back. Both are written with plain SQL through the pipeline's own connection, so
recording costs no second pipeline run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import dlt
import orjson

RUNS_TABLE = "_signing_runs"
INCOMPLETE_SHIPMENTS_TABLE = "_signing_incomplete_shipments"

# Column -> SQL type of the run record; these types read alike in DuckDB and Postgres.
RUN_COLUMNS: dict[str, str] = {
    "run_id": "varchar",
    "workspace_id": "varchar",
    "workspace_name": "varchar",
    "started_at": "timestamp with time zone",
    "finished_at": "timestamp with time zone",
    "outcome": "varchar",
    "stop_reason": "varchar",
    "requests": "bigint",
    "failed_attempts": "bigint",
    "throttled": "bigint",
    "retries": "bigint",
    "waited_seconds": "double precision",
    "request_seconds": "double precision",
    "truncated_trails": "bigint",
    "rows": "varchar",
    "requests_by_endpoint": "varchar",
    "warnings": "varchar",
}


def record_run(pipeline: dlt.Pipeline, record: Mapping[str, Any]) -> None:
    """Append one run's record to `raw._signing_runs`, creating or widening the table.

    Tables written by earlier versions were loaded by dlt and carry its `_dlt_load_id` and
    `_dlt_id` columns (not null); rows added here fill them with the run's id."""
    values = {name: _sql_value(record.get(name)) for name in RUN_COLUMNS}
    with pipeline.sql_client() as client:
        table = client.make_qualified_table_name(RUNS_TABLE)
        client.execute_sql(f"create schema if not exists {client.fully_qualified_dataset_name()}")
        columns = ", ".join(f"{name} {kind}" for name, kind in RUN_COLUMNS.items())
        client.execute_sql(f"create table if not exists {table} ({columns})")
        existing = _columns_of(client, RUNS_TABLE)
        for name, kind in RUN_COLUMNS.items():
            if name not in existing:
                client.execute_sql(f"alter table {table} add column {name} {kind}")
        if "_dlt_id" in existing:
            values["_dlt_load_id"] = str(record.get("run_id"))
            values["_dlt_id"] = uuid.uuid4().hex
        names = ", ".join(values)
        marks = ", ".join(["%s"] * len(values))
        client.execute_sql(f"insert into {table} ({names}) values ({marks})", *values.values())


def record_incomplete_shipments(
    pipeline: dlt.Pipeline, workspace_id: str, shipment_ids: Iterable[str]
) -> None:
    """Replace the workspace's list of shipments whose children are not all loaded yet."""
    ids = sorted(set(shipment_ids))
    with pipeline.sql_client() as client:
        table = client.make_qualified_table_name(INCOMPLETE_SHIPMENTS_TABLE)
        client.execute_sql(f"create schema if not exists {client.fully_qualified_dataset_name()}")
        client.execute_sql(
            f"create table if not exists {table} (workspace_id varchar, shipment_id varchar)"
        )
        client.execute_sql(f"delete from {table} where workspace_id = %s", workspace_id)
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]
            marks = ", ".join(["(%s, %s)"] * len(chunk))
            pairs = [value for shipment in chunk for value in (workspace_id, shipment)]
            client.execute_sql(
                f"insert into {table} (workspace_id, shipment_id) values {marks}", *pairs
            )


def _columns_of(client: Any, table: str) -> set[str]:
    rows = client.execute_sql(
        "select column_name from information_schema.columns "
        "where table_schema = %s and table_name = %s",
        client.dataset_name,
        table,
    )
    return {str(row[0]) for row in rows or []}


def _sql_value(value: Any) -> Any:
    """Dicts and lists as JSON text; everything else as it is."""
    if isinstance(value, dict | list):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    if isinstance(value, datetime | str | int | float) or value is None:
        return value
    return str(value)
