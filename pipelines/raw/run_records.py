"""What a run leaves in the warehouse beside the data: a record of every run (failed and stopped
ones too) for `signing-etl status`, and the shipments whose children are still pending, which
the models hold back. Both are written with plain SQL through the pipeline's own connection, so
recording costs no second pipeline run.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import dlt
import orjson

from pipelines.outcome import Outcome
from pipelines.warehouse import (
    LoadedWorkspace,
    SqlClient,
    Warehouse,
    ensure_table,
    insert_rows,
    transaction,
)
from sources.signing import RunCounters

RUNS_TABLE = "_signing_runs"
INCOMPLETE_SHIPMENTS_TABLE = "_signing_incomplete_shipments"

# The SQL type of a counter's column, by its Python type (`RunCounters`' annotations).
_COUNTER_TYPES = {"int": "bigint", "float": "double precision"}
COUNTERS = tuple(each.name for each in dataclasses.fields(RunCounters))
# Column -> SQL type of the run record; these types read alike in DuckDB and Postgres.
RUN_COLUMNS: dict[str, str] = {
    "run_id": "varchar",
    "workspace_id": "varchar",
    "workspace_name": "varchar",
    "started_at": "timestamp with time zone",
    "finished_at": "timestamp with time zone",
    "outcome": "varchar",
    "stop_reason": "varchar",
    **{each.name: _COUNTER_TYPES[str(each.type)] for each in dataclasses.fields(RunCounters)},
    "deletions": "varchar",
    "rows": "varchar",
    "requests_by_endpoint": "varchar",
    "warnings": "varchar",
    "service_time": "timestamp with time zone",
    "limits": "varchar",
    "daily_remaining": "bigint",
    "missed_by_webhooks": "bigint",
    "brought_by_webhooks": "bigint",
    "schema_changes": "varchar",
}
_JSON_COLUMNS = (
    "rows",
    "requests_by_endpoint",
    "warnings",
    "limits",
    "deletions",
    "schema_changes",
)
_NULLABLE = ("workspace_id", "finished_at", "workspace_name", "service_time", "daily_remaining")


@dataclass(frozen=True)
class RunRecord:
    """One run of one workspace, as `raw._signing_runs` keeps it."""

    run_id: str
    workspace_id: str | None
    started_at: datetime
    outcome: Outcome
    finished_at: datetime | None = None
    workspace_name: str | None = None  # the configured entry (`--workspace`) it ran as
    stop_reason: str | None = None
    counters: RunCounters = field(default_factory=RunCounters)  # a column each
    # Per list checked for deleted records: the check (`count`, `full`, `incomplete`), its
    # requests, the last full check's time, records found gone and marked, whether refused.
    deletions: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    requests_by_endpoint: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    service_time: datetime | None = None  # the service's clock at its last answer
    limits: dict[str, int] = field(default_factory=dict)  # X-RateLimit-Limit by scope
    daily_remaining: int | None = None  # the daily allowance left at the last answer
    # Changes the load found that the webhooks had missed / had brought (None: webhooks off).
    missed_by_webhooks: int | None = None
    brought_by_webhooks: int | None = None
    # How the service's shape changed (`SchemaChanges.to_record`: its non-empty parts).
    schema_changes: dict[str, Any] = field(default_factory=dict)

    def to_row(self) -> dict[str, Any]:
        """Column values for SQL: the outcome as its name, dicts and lists as JSON text."""
        row = dataclasses.asdict(self)
        row.pop("counters")
        row.update(self.counters.as_dict())
        row["outcome"] = str(self.outcome)
        for name in _JSON_COLUMNS:
            row[name] = orjson.dumps(row[name], option=orjson.OPT_SORT_KEYS).decode()
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunRecord:
        """A record as read back; columns an earlier version did not write take defaults."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {name: value for name, value in row.items() if name in known}
        for name in _JSON_COLUMNS:
            if isinstance(values.get(name), str):
                values[name] = orjson.loads(values[name])
        for name, value in list(values.items()):
            if value is None and name not in _NULLABLE:
                values.pop(name)  # a column an earlier version left empty: the default
        counted = {name: row[name] for name in COUNTERS if row.get(name) is not None}
        values["counters"] = RunCounters(**counted)
        values["outcome"] = Outcome(str(row.get("outcome") or Outcome.FAILED))
        values["run_id"] = str(row.get("run_id") or "")
        return cls(**values)


def record_run(client: Any, record: RunRecord) -> None:
    """Append one run's record to `raw._signing_runs` through a dlt SQL client of the
    dataset (the run's pipeline's, or the warehouse's when the run ended before it had one),
    creating or widening the table.

    Tables written by earlier versions were loaded by dlt and carry its `_dlt_load_id` and
    `_dlt_id` columns (not null); rows added here fill them with the run's id."""
    values = record.to_row()
    table = ensure_table(client, RUNS_TABLE, RUN_COLUMNS)
    if "_dlt_id" in table.columns:
        values["_dlt_load_id"] = record.run_id
        values["_dlt_id"] = uuid.uuid4().hex
    transaction(  # the run's own row: on record too when the run lost its lock
        client,
        "recording the run",
        lambda: insert_rows(client, table.name, list(values), [list(values.values())]),
        fenced=False,
    )


def configured_names(runs: Iterable[RunRecord]) -> dict[str, str]:
    """The configured name (`--workspace` of `load`) of each workspace, by its id: the name of
    its newest run that has one (`runs` newest first, as `read_runs` gives them). Runs that
    ended before `/me` answered, and were not attributed, count under ""."""
    names: dict[str, str] = {}
    for run in runs:
        if run.workspace_name:
            names.setdefault(run.workspace_id or "", run.workspace_name)
    return names


def configured_workspaces(runs: Iterable[RunRecord]) -> dict[str, str]:
    """The workspace id each configured name stands for: the one its newest run that reached
    `/me` loaded (a name whose key now opens another workspace stands for that one). Runs
    without a name (`load_incremental` called without one) count under ""."""
    ids: dict[str, str] = {}
    for run in runs:
        if run.workspace_id:
            ids.setdefault(run.workspace_name or "", run.workspace_id)
    return ids


def read_runs(client: SqlClient, columns: Mapping[str, set[str]]) -> list[RunRecord]:
    """Every recorded run, newest first (none before the first run)."""
    if RUNS_TABLE not in columns:
        return []
    table = client.make_qualified_table_name(RUNS_TABLE)
    names = sorted(columns[RUNS_TABLE] & set(RUN_COLUMNS))
    rows = client.execute_sql(f"select {', '.join(names)} from {table} order by started_at desc")
    return [RunRecord.from_row(dict(zip(names, row, strict=True))) for row in rows or []]


def record_incomplete_shipments(
    pipeline: dlt.Pipeline, workspace_id: str, shipment_ids: Iterable[str]
) -> None:
    """Replace the workspace's list of shipments whose children are not all loaded yet."""
    ids = sorted(set(shipment_ids))
    with pipeline.sql_client() as client:
        table = ensure_table(
            client,
            INCOMPLETE_SHIPMENTS_TABLE,
            {"workspace_id": "varchar", "shipment_id": "varchar"},
        ).name
        rows = [(workspace_id, shipment) for shipment in ids]

        def replace() -> None:
            client.execute_sql(f"delete from {table} where workspace_id = %s", workspace_id)
            insert_rows(client, table, ("workspace_id", "shipment_id"), rows, batch=1000)

        transaction(client, "recording the held-back shipments", replace)


# ---------------------------------------------------------------- runs the warehouse never took

_TIMES = ("started_at", "finished_at", "service_time")


RUNS_JOURNAL = "unrecorded_runs.jsonl"


def journal_run(warehouse: Warehouse, record: RunRecord) -> None:
    """Keep the record of a run that could not write the warehouse (another run held it, its
    disk or database failed, what it loaded could not be published) in the journal beside
    it, where `status` reads it with the recorded runs."""
    warehouse.journal(RUNS_JOURNAL, record.to_row())


def journaled_runs(warehouse: Warehouse) -> list[RunRecord]:
    """The runs in the journal beside the warehouse (a line that cannot be read is skipped)."""
    runs = []
    for row in warehouse.journaled(RUNS_JOURNAL):
        try:
            for name in _TIMES:
                row[name] = datetime.fromisoformat(row[name]) if row.get(name) else None
            runs.append(RunRecord.from_row(row))
        except (orjson.JSONDecodeError, TypeError, ValueError):
            continue
    return runs


def workspaces_named(
    known: Iterable[LoadedWorkspace], text: str, configured: Mapping[str, str]
) -> list[LoadedWorkspace]:
    """The workspaces a user's `--workspace` names: by id, by the name `load` ran it under
    (`configured`, by id) or by the service's name; each exactly first, then ignoring case and
    surrounding spaces (the first way that names any)."""
    every = list(known)
    by_way: list[list[tuple[LoadedWorkspace, str | None]]] = [
        [(w, w.id) for w in every],
        [(w, configured.get(w.id)) for w in every],
        [(w, w.name) for w in every],
    ]
    for exact in (True, False):
        for pairs in by_way:
            found = [w for w, name in pairs if _same(name, text, exact)]
            if found:
                return found
    return []


def _same(name: str | None, text: str, exact: bool) -> bool:
    if exact:
        return name == text
    return (name or "").strip().casefold() == text.strip().casefold()


def described_workspace(workspace: LoadedWorkspace, configured: Mapping[str, str]) -> str:
    """`name (id)`, with the name `load` ran it under (`configured`, by id) when it has one."""
    name = configured.get(workspace.id)
    return f"{workspace} as {name!r}" if name else str(workspace)
