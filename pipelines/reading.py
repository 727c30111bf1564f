"""Reading a warehouse for `signing-etl status`: the recent runs, and per workspace its cursors
and rows, read through the warehouse's read-only reader (any destination), never writing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.run_records import RunRecord, read_runs
from pipelines.warehouse import SqlClient, Warehouse, columns_by_table, loaded_workspaces
from pipelines.workspace_state import StoredState, pipeline_name_for, stored_states
from sources.signing import EVENTS_LIMIT, SOURCE_TABLES, ResourceSyncStatus, describe_sync

RECENT_RUNS = 5  # runs `signing-etl status` lists


@dataclass
class WorkspaceStatus:
    """One workspace of a warehouse: its runs, the cursors of its state and its rows."""

    workspace_id: str
    name: str | None  # as the service names it (raw.workspaces)
    runs: list[RunRecord]  # newest first, failed and stopped ones too
    resources: list[ResourceSyncStatus]
    row_counts: dict[str, int]
    truncated_trails: int = 0  # shipments whose loaded audit trail is the API's cap (500)

    @property
    def configured_as(self) -> str | None:
        """The configuration entry (`--workspace` name) its last run used."""
        return next((r.workspace_name for r in self.runs if r.workspace_name), None)

    @property
    def last_run(self) -> RunRecord | None:
        return self.runs[0] if self.runs else None

    @property
    def cursors(self) -> dict[str, str]:
        """Per list: the time the next run reads changes from."""
        return {
            r.name: r.cursor or "(first pass not finished)"
            for r in self.resources
            if r.cursor or r.interrupted
        }

    @property
    def interrupted(self) -> list[str]:
        """The lists whose last pass a stop cut short."""
        return [r.name for r in self.resources if r.interrupted]

    @property
    def webhooks_reconciled(self) -> tuple[int, int | None] | None:
        """(changes the webhooks had missed, changes they had brought) as the last load that
        counted them found; None when webhooks are off for this workspace."""
        counted = next((r for r in self.runs if r.missed_by_webhooks is not None), None)
        if counted is None or counted.missed_by_webhooks is None:
            return None
        return counted.missed_by_webhooks, counted.brought_by_webhooks


@dataclass
class Status:
    """What `signing-etl status` shows: the warehouse's recent runs and each workspace."""

    warehouse: Path
    runs: list[RunRecord]  # newest first, of every workspace
    workspaces: list[WorkspaceStatus]

    @property
    def last_run(self) -> RunRecord | None:
        return self.runs[0] if self.runs else None

    @property
    def row_counts(self) -> dict[str, int]:
        """Rows per raw table, all workspaces together."""
        total: dict[str, int] = {}
        for workspace in self.workspaces:
            for table, count in workspace.row_counts.items():
                total[table] = total.get(table, 0) + count
        return total

    @property
    def truncated_trails(self) -> int:
        return sum(w.truncated_trails for w in self.workspaces)

    @property
    def only(self) -> WorkspaceStatus:
        """The one workspace of a single-workspace warehouse."""
        if len(self.workspaces) != 1:
            raise ValueError(f"{len(self.workspaces)} workspaces: choose one of .workspaces")
        return self.workspaces[0]

    @property
    def cursors(self) -> dict[str, str]:
        """The cursors of the only workspace (see `only`)."""
        return self.only.cursors

    @property
    def interrupted(self) -> list[str]:
        """The interrupted lists of the only workspace (see `only`)."""
        return self.only.interrupted


def status(warehouse: Warehouse | Path) -> Status:
    """The recent runs, and per workspace its cursors and row counts, read without writing."""
    place = Warehouse.of(warehouse)
    with place.reader() as client:
        return read_status(client, place.path)


def read_status(client: SqlClient, warehouse: Path) -> Status:
    """`status` through any backend's SQL client."""
    columns = columns_by_table(client)
    runs = read_runs(client, columns)
    counts = _counts_by_workspace(client, columns)
    names_by_id: dict[str, str | None] = {w.id: w.name for w in loaded_workspaces(client)}
    for run in runs:
        if run.workspace_id:
            names_by_id.setdefault(run.workspace_id, None)
    states = stored_states(client)
    truncated = _truncated_trails(client, columns)
    workspaces = [
        WorkspaceStatus(
            workspace_id=workspace_id,
            name=name,
            runs=[r for r in runs if r.workspace_id == workspace_id][:RECENT_RUNS],
            resources=describe_sync(_state_of(states, workspace_id)),
            row_counts=counts.get(workspace_id, {}),
            truncated_trails=truncated.get(workspace_id, 0),
        )
        for workspace_id, name in sorted(names_by_id.items(), key=lambda i: (i[1] or "", i[0]))
    ]
    return Status(warehouse, runs[:RECENT_RUNS], workspaces)


def _state_of(states: dict[str, StoredState], workspace_id: str) -> dict[str, Any]:
    stored = states.get(pipeline_name_for(workspace_id))
    return stored.state if stored else {}


def _counts_by_workspace(
    client: SqlClient, columns: dict[str, set[str]]
) -> dict[str, dict[str, int]]:
    """Rows per workspace and raw table; nested tables without `workspace_id` are counted
    through their root row."""
    counts: dict[str, dict[str, int]] = {}
    for table in SOURCE_TABLES:
        if table not in columns:
            continue
        qualified = client.make_qualified_table_name(table)
        if "workspace_id" in columns[table]:
            query = f"select workspace_id, count(*) from {qualified} group by workspace_id"
        else:
            root = client.make_qualified_table_name(table.split("__")[0])
            query = (
                f"select r.workspace_id, count(*) from {qualified} n join {root} r "
                "on n._dlt_root_id = r._dlt_id group by r.workspace_id"
            )
        for workspace_id, count in client.execute_sql(query) or []:
            counts.setdefault(str(workspace_id), {})[table] = int(count)
    return counts


def _truncated_trails(client: SqlClient, columns: dict[str, set[str]]) -> dict[str, int]:
    """Per workspace: shipments whose loaded audit trail is as long as the API's cap."""
    if "audit_events" not in columns:
        return {}
    table = client.make_qualified_table_name("audit_events")
    rows = client.execute_sql(
        f"select workspace_id, count(*) from (select workspace_id from {table} "
        "group by workspace_id, shipment_id having count(*) >= %s) cut group by workspace_id",
        EVENTS_LIMIT,
    )
    return {str(workspace_id): int(count) for workspace_id, count in rows or []}
