"""Reading a warehouse for `signing-etl status` and the freshness checks: per workspace its runs
(failed and stopped ones with their reasons), its last success, how recent its data is, its
cursors and their lag behind the service's clock, and its rows; read through the warehouse's
read-only reader (any destination), never writing."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pipelines.errors import WebhooksError
from pipelines.modeling.record import ModelBuild, journaled_builds, last_build
from pipelines.outcome import Outcome
from pipelines.raw.deletions import deleted_rows
from pipelines.raw.pipeline import StoredState, pipeline_name_for, stored_states
from pipelines.raw.privacy_records import PolicyRecord, read_erasures, read_policies
from pipelines.raw.retired import read_retired
from pipelines.raw.run_records import (
    RunRecord,
    configured_names,
    configured_workspaces,
    journaled_runs,
    read_runs,
)
from pipelines.warehouse import SqlClient, Warehouse, columns_by_table, loaded_workspaces
from pipelines.webhooks.inbox import Inbox, InboxStatus
from sources.signing import (
    EVENTS_LIMIT,
    SOURCE_TABLES,
    FullCheck,
    ResourceSyncStatus,
    describe_deletions,
    describe_sync,
    parse_iso,
)

RECENT_RUNS = 10  # runs `status` lists per workspace
PROBLEM_DAYS = 7  # failed and stopped runs `status` lists with their reasons
# Where each table keeps the service's time of a change: the newest is the data's "as of".
CHANGE_TIMES = (("documents", "updated_at"), ("contacts", "updated_at"), ("audit_events", "at"))


@dataclass
class WorkspaceStatus:
    """One workspace of a warehouse: its runs, the cursors of its state and its rows."""

    workspace_id: str  # empty for a configured workspace whose runs never reached `/me`
    name: str | None  # as the service names it (raw.workspaces)
    runs: list[RunRecord]  # newest first, failed and stopped ones too
    resources: list[ResourceSyncStatus] = field(default_factory=list)
    row_counts: dict[str, int] = field(default_factory=dict)
    truncated_trails: int = 0  # shipments whose loaded audit trail is the API's cap (500)
    privacy: PolicyRecord | None = None  # the privacy policy its rows are under
    newest_change: datetime | None = None  # the newest change loaded: the data is as of then
    # Per list: the last full check for deleted records (when, its requests, what it found),
    # and the records the warehouse holds marked deleted.
    deletion_checks: dict[str, FullCheck] = field(default_factory=dict)
    deleted_rows: dict[str, int] = field(default_factory=dict)
    # The webhook receiver's inbox for it (its last drain, what waits); None: no receiver.
    receiver: InboxStatus | None = None

    @property
    def configured_as(self) -> str | None:
        """The configuration entry (`--workspace` name) its last run used."""
        return configured_names(self.runs).get(self.workspace_id)

    @property
    def label(self) -> str:
        """The configured name, else the id (before any run recorded a name)."""
        return self.configured_as or self.workspace_id or "?"

    @property
    def last_run(self) -> RunRecord | None:
        """The run that ended last: what the workspace's state is now. With several workers,
        one that found the workspace busy ends at once, before the run holding it; that run's
        end, not the busy stop, is the workspace's last word."""
        return max(self.runs, key=_ended, default=None)

    @property
    def last_success(self) -> RunRecord | None:
        """The newest run that ran to its end."""
        return next((r for r in self.runs if r.outcome is Outcome.COMPLETED), None)

    @property
    def last_loaded(self) -> RunRecord | None:
        """The newest run that loaded what it could: completed, or stopped (the daily limit, a
        budget, a signal) with rows; what freshness is measured from."""
        return next((r for r in self.runs if _loaded(r)), None)

    def problems(self, now: datetime, days: int = PROBLEM_DAYS) -> list[RunRecord]:
        """Runs of the last `days` days that failed or stopped, newest first."""
        since = now - timedelta(days=days)
        return [
            r for r in self.runs if r.outcome is not Outcome.COMPLETED and r.started_at >= since
        ]

    def age(self, now: datetime) -> timedelta | None:
        """How long ago the last run that loaded ended (None: never)."""
        last = self.last_loaded
        return now - (last.finished_at or last.started_at) if last else None

    @property
    def cursor_lag(self) -> timedelta | None:
        """How far the oldest cursor is behind the service's clock at the last answer."""
        cursors = [parse_iso(r.cursor) for r in self.resources if r.cursor]
        clock = next((r.service_time for r in self.runs if r.service_time), None)
        return clock - min(cursors) if cursors and clock else None

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

    @property
    def last_schema_change(self) -> RunRecord | None:
        """The newest run that found the service's shape changed (or held a column back)."""
        return next((r for r in self.runs if r.schema_changes), None)


def _loaded(run: RunRecord) -> bool:
    return run.outcome is Outcome.COMPLETED or (
        run.outcome is Outcome.STOPPED and sum(run.rows.values()) > 0
    )


@dataclass(frozen=True)
class RunningLoad:
    """A run holding the warehouse's lock: what its lock file says of it."""

    pid: int | None
    since: str | None
    what: str = "load"  # or what a brief hold names itself: "webhook drain"

    @classmethod
    def parse(cls, held: str) -> RunningLoad:
        pid, since = re.search(r"pid (\d+)", held), re.search(r"since (\S+)", held)
        brief = re.match(r"brief hold: ([^,]+),", held)
        return cls(
            int(pid[1]) if pid else None, since[1] if since else None, brief[1] if brief else "load"
        )


@dataclass
class Status:
    """What `signing-etl status` shows: the warehouse's runs and each workspace."""

    warehouse: Path
    runs: list[RunRecord]  # newest first, of every workspace
    workspaces: list[WorkspaceStatus]
    erasures: int = 0  # people erased with `signing-etl forget`
    running: RunningLoad | None = None  # a run holding the warehouse while it was read
    models: ModelBuild | None = None  # the newest model build (None: never built)

    @property
    def running_line(self) -> str | None:
        """`a load is running since T (pid N)`, when one is."""
        held = self.running
        return f"a {held.what} is running since {held.since} (pid {held.pid})" if held else None

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

    def by_configured_name(self) -> dict[str, WorkspaceStatus]:
        """The workspace each configured name stands for (the one its newest run loaded)."""
        by_id = {w.workspace_id: w for w in self.workspaces}
        named = configured_workspaces(self.runs).items()
        return {name: by_id[id_] for name, id_ in named if name and id_ in by_id}


def read_status(warehouse: Warehouse | Path) -> Status:
    """Every workspace's runs, cursors and rows, read without writing."""
    place = Warehouse.of(warehouse)
    held = place.running()  # asked first: a run that ends meanwhile has published already
    with place.reader() as client:
        found = _status_through(client, place.path, journaled_runs(place), journaled_builds(place))
    found.running = RunningLoad.parse(held) if held else None
    _attach_receivers(place, found.workspaces)
    return found


def _attach_receivers(warehouse: Warehouse, workspaces: list[WorkspaceStatus]) -> None:
    """Each workspace's part of the webhook receiver's inbox, by its configured name (the
    receiver's path): the drains' outcomes are kept there, beside the warehouse. An inbox
    that cannot be read leaves `status` as it is (`webhooks status` names the problem)."""
    try:
        inbox = Inbox.existing(warehouse.webhooks_dir_of_record())
        if inbox is None:
            return
        try:
            by_name = inbox.status()
        finally:
            inbox.close()
    except (WebhooksError, sqlite3.Error):
        return
    for workspace in workspaces:
        workspace.receiver = by_name.get(workspace.configured_as or "")


def recorded_runs(warehouse: Warehouse) -> list[RunRecord]:
    """Every recorded run, newest first; none for a warehouse that cannot be read (yet)."""
    try:
        with warehouse.reader() as client:
            return read_runs(client, columns_by_table(client))
    except Exception:  # no warehouse yet, or one whose problem the command itself names
        return []


def last_attempts(warehouse: Warehouse) -> dict[str, datetime]:
    """When each configured workspace's last run began, by its configured name; none for a
    warehouse that cannot be read yet."""
    began: dict[str, datetime] = {}
    for run in recorded_runs(warehouse):
        if run.workspace_name and run.workspace_name not in began:
            began[run.workspace_name] = run.started_at
    return began


def _status_through(
    client: SqlClient, warehouse: Path, journaled: list[RunRecord], builds: list[ModelBuild]
) -> Status:
    """`status` through any backend's SQL client, with the runs and model builds only the
    journal holds."""
    columns = columns_by_table(client)
    recorded = read_runs(client, columns) + journaled
    runs = _attributed(sorted(recorded, key=lambda run: run.started_at, reverse=True))
    counts = _counts_by_workspace(client, columns)
    newest = _newest_changes(client, columns)
    names_by_id: dict[str, str | None] = {w.id: w.name for w in loaded_workspaces(client)}
    for run in runs:
        names_by_id.setdefault(run.workspace_id or "", None)
    states = stored_states(client)
    truncated = _truncated_trails(client, columns)
    marked = deleted_rows(client, columns)
    policies = read_policies(client)
    workspaces = [
        WorkspaceStatus(
            workspace_id=workspace_id,
            name=name,
            runs=[r for r in runs if (r.workspace_id or "") == workspace_id],
            resources=describe_sync(_state_of(states, workspace_id)),
            row_counts=counts.get(workspace_id, {}),
            truncated_trails=truncated.get(workspace_id, 0),
            privacy=policies.get(workspace_id),
            newest_change=newest.get(workspace_id),
            deletion_checks=describe_deletions(_state_of(states, workspace_id)),
            deleted_rows=marked.get(workspace_id, {}),
        )
        for workspace_id, name in sorted(names_by_id.items(), key=lambda i: (i[1] or "", i[0]))
    ]
    retired = read_retired(client, columns)
    current = [w for w in workspaces if not _retired(w, retired)]
    models = last_build(client, columns, builds)
    return Status(warehouse, runs, current, len(read_erasures(client)), models=models)


def _retired(workspace: WorkspaceStatus, retired: dict[str, datetime]) -> bool:
    """Retired with `status --retire`, and not run since."""
    when = retired.get(workspace.workspace_id)
    last = workspace.last_run
    return when is not None and (last is None or last.started_at <= when)


def _attributed(runs: list[RunRecord]) -> list[RunRecord]:
    """Runs that ended before `/me` answered carry only their configured name: they belong to
    the workspace that name loaded last (a refused key is its workspace's failure)."""
    ids = configured_workspaces(runs)
    return [r if r.workspace_id else _with_id(r, ids.get(r.workspace_name or "")) for r in runs]


def _with_id(run: RunRecord, workspace_id: str | None) -> RunRecord:
    return replace(run, workspace_id=workspace_id) if workspace_id else run


def _state_of(states: dict[str, StoredState], workspace_id: str) -> dict[str, Any]:
    stored = states.get(pipeline_name_for(workspace_id)) if workspace_id else None
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


def _newest_changes(client: SqlClient, columns: dict[str, set[str]]) -> dict[str, datetime]:
    """Per workspace: the service's time of the newest change loaded (a document or contact
    updated, an audit event)."""
    newest: dict[str, datetime] = {}
    for table, column in CHANGE_TIMES:
        if column not in columns.get(table, set()):
            continue
        qualified = client.make_qualified_table_name(table)
        rows = client.execute_sql(
            f'select workspace_id, max("{column}") from {qualified} group by workspace_id'
        )
        for workspace_id, moment in rows or []:
            if isinstance(moment, datetime):
                key = str(workspace_id)
                newest[key] = max(moment, newest.get(key, moment))
    return newest


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


def _ended(run: RunRecord) -> datetime:
    return run.finished_at or run.started_at
