"""The dlt pipeline of the signing source: one function per scenario, called by the CLI.

A run takes an exclusive lock beside the warehouse (overlapping runs would fight over the same
state), loads what the source fetched even when it stopped early, and records its outcome in
`raw._signing_runs` for `signing-etl status`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import dlt
import duckdb
from dlt.common.configuration import configspec, resolve_configuration
from dlt.common.destination import TLoaderFileFormat
from dlt.common.pipeline import ExtractInfo, LoadInfo
from dlt.destinations.impl.duckdb.configuration import DuckDbCredentials

from pipelines.run_records import RUNS_TABLE, record_incomplete_shipments, record_run
from pipelines.workspace_state import (
    LEGACY_PIPELINE_NAME,
    StoredState,
    adopt_legacy_state,
    columns_by_table,
    forget_workspace,
    pipeline_name_for,
    stored_states,
)
from sources.signing import (
    EVENTS_LIMIT,
    Interrupted,
    ResourceSyncStatus,
    RunControl,
    RunStats,
    RunStopped,
    describe_sync,
    incomplete_shipments,
    signing_source,
)

DATASET = "raw"
DEFAULT_WAREHOUSE = Path("warehouse/signing.duckdb")
RECENT_RUNS = 5  # runs `signing-etl status` lists
SOURCE_TABLES = (
    "workspaces",
    "documents",
    "documents__fields",
    "documents__placeholders",
    "documents__blocks",
    "shipments",
    "shipments__recipients",
    "contacts",
    "contacts__custom",
    "contacts__group_ids",
    "audit_events",
    "shipment_fields",
    "webhooks",
)
RESOURCES = (
    "workspaces",
    "documents",
    "shipments",
    "audit_events",
    "shipment_fields",
    "contacts",
    "webhooks",
)


class Stoppable(Protocol):
    """What a signal stops: one run's `RunControl`, or several runs at once."""

    def stop(self, reason: RunStopped) -> object: ...


class AlreadyRunning(RuntimeError):
    """Another run holds the warehouse's lock."""


@dataclass
class LoadResult:
    """What one run did, for the summary and the exit code."""

    started_at: datetime
    finished_at: datetime
    stats: RunStats
    rows: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None
    step_seconds: dict[str, float] = field(default_factory=dict)
    exit_code: int = 0
    workspace_id: str | None = None
    workspace_name: str | None = None  # the configured entry (`--workspace`)
    load_info: LoadInfo | None = None  # dlt's account of the load (jobs, failures)

    @property
    def seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()


def pipelines_dir_for(warehouse: Path) -> Path:
    """dlt's working folder lives beside its warehouse, so two warehouses never share state."""
    return warehouse.parent / f".{warehouse.stem}.dlt"


def make_pipeline(
    warehouse: Path,
    workspace_id: str,
    destination: str = "duckdb",
    pipelines_dir: Path | None = None,
) -> dlt.Pipeline:
    """The pipeline of one workspace (`pipeline_name_for`): DuckDB at `warehouse` by default,
    any dlt destination by name; every workspace's pipeline writes the one dataset `raw`."""
    target: Any = destination
    if destination == "duckdb":
        warehouse.parent.mkdir(parents=True, exist_ok=True)
        target = duckdb_destination(warehouse)
    pipeline = dlt.pipeline(
        pipeline_name=pipeline_name_for(workspace_id),
        pipelines_dir=str(pipelines_dir or pipelines_dir_for(warehouse)),
        destination=target,
        dataset_name=DATASET,
    )
    # dlt's own handlers would abort normalize and load on a signal; `stop_on_signals` lets
    # them finish instead, so that what was fetched is kept.
    pipeline.config.runtime.intercept_signals = False
    return pipeline


# DuckDB's memory for a load; without it DuckDB may take 80% of the machine. A user's own
# `[destination.duckdb.credentials] global_config` (or its environment variable) wins.
DUCKDB_MEMORY_LIMIT = "512MB"

# Records fetched from which a DuckDB load is written as parquet rather than INSERT statements.
PARQUET_FROM_RECORDS = 1_000


@dataclass
class LoadFileFormat:
    """The load files of a DuckDB run, chosen once its extract has told how much it fetched.

    INSERT statements (dlt's default for DuckDB) make DuckDB's memory grow with the size of a
    load: 1.9 GiB at 2,000 shipments, outside its memory limit. Parquet keeps the load step
    flat and fast, but writing it imports pyarrow and pandas, about 0.8 s of every run. So a
    run that fetched fewer than `PARQUET_FROM_RECORDS` records, a nightly run with little or
    nothing new, writes INSERT statements, and a larger one parquet. Parquet is also the
    answer before anything was fetched (packages an interrupted run left).

    dlt asks this per table while it normalizes (`loader_file_format_selector`)."""

    parquet: bool = True

    def choose_for(self, records: int) -> None:
        self.parquet = records >= PARQUET_FROM_RECORDS

    def __call__(
        self,
        preferred: TLoaderFileFormat,
        supported: Sequence[TLoaderFileFormat],
        /,
        *,
        table_schema: Any,
    ) -> tuple[TLoaderFileFormat, Sequence[TLoaderFileFormat]]:
        return ("parquet" if self.parquet else "insert_values"), supported


@configspec(init=False)
class WarehouseCredentials(DuckDbCredentials):
    """DuckDB's credentials, shown as their path. dlt shows credentials as a SQLAlchemy URL,
    and so imports SQLAlchemy (0.3 s) in every run for one line of a load's info."""

    def __str__(self) -> str:
        return str(self.database)


def duckdb_destination(warehouse: Path) -> Any:
    """DuckDB at `warehouse`, its load files chosen by size (`LoadFileFormat`).

    The credentials are resolved here, so that the user's `[destination.duckdb.credentials]`
    (or their environment variables) still apply: its `global_config` replaces the default
    memory limit, `DUCKDB_MEMORY_LIMIT`. The file is always `warehouse`."""
    credentials = WarehouseCredentials(global_config={"memory_limit": DUCKDB_MEMORY_LIMIT})
    credentials.database = str(warehouse)
    credentials = resolve_configuration(credentials, sections=("destination", "duckdb"))
    credentials.database = str(warehouse)
    return dlt.destinations.duckdb(credentials, loader_file_format_selector=LoadFileFormat())


@contextlib.contextmanager
def exclusive(warehouse: Path, what: str | None = None) -> Iterator[None]:
    """Hold a run lock beside the warehouse (`.<file>.lock`, or `.<what>.lock`), or fail at
    once if another run has it. A run that wrote nothing (a refused key, a wrong URL) takes
    its lock file and new folder away again."""
    folder = warehouse.parent
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    lock_path = folder / f".{what or warehouse.name}.lock"
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            where = what or warehouse
            raise AlreadyRunning(
                f"another load is running on {where} ({holder}); try again when it ends"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            if what or (not warehouse.exists() and not pipelines_dir_for(warehouse).exists()):
                lock_path.unlink(missing_ok=True)
                for made in created:  # innermost first
                    with contextlib.suppress(OSError):
                        made.rmdir()
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_incremental(
    warehouse: Path = DEFAULT_WAREHOUSE,
    *,
    since: str | None = None,
    full_refresh: bool = False,
    resources: Sequence[str] | None = None,
    max_requests: int | None = None,
    destination: str = "duckdb",
    control: RunControl | None = None,
    workspace_name: str | None = None,
    **source_options: Any,
) -> LoadResult:
    """One incremental sync: fetch what changed since the last run, merge it into `raw`.

    Every stop keeps what was fetched: a stop on purpose (daily limit, request budget, an
    over-long Retry-After), SIGINT or SIGTERM, a service that stopped answering, a key refused
    mid-run. What was fetched is loaded, the state is saved, the next run continues, and
    `LoadResult.stopped` and `exit_code` say why. A wrong key or URL fails before anything is
    written.

    The state belongs to the workspace the key's `/me` names, so the source is asked first and
    the workspace's own pipeline is used (`workspace_state`). `full_refresh` deletes only this
    workspace's rows and state. `workspace_name` is the configured entry, kept in the run record.

    DuckDB takes one writer, so a DuckDB load holds the file's lock for its whole run. Other
    destinations take concurrent writers: a load there holds only its workspace's lock, and
    its state comes from the destination every time (dlt's working folder is temporary), so
    loads from several machines or of several workspaces at once never mix their state.
    """
    control = control or RunControl()
    started = datetime.now(UTC)
    local = destination == "duckdb"
    try:
        with contextlib.ExitStack() as held:
            if local:
                check_folder(warehouse.parent)
                held.enter_context(exclusive(warehouse))
                held.enter_context(open_warehouse(warehouse))
            source = signing_source(
                since=since, max_requests=max_requests, control=control, **source_options
            )
            workspace_id = str(control.workspace_id)
            pipelines_dir = pipelines_dir_for(warehouse)
            if not local:
                held.enter_context(exclusive(warehouse, f"{destination}.{workspace_id}"))
                pipelines_dir = Path(held.enter_context(tempfile.TemporaryDirectory()))
            pipeline = make_pipeline(warehouse, workspace_id, destination, pipelines_dir)
            if adopt_legacy_state(pipeline):
                shutil.rmtree(pipelines_dir / LEGACY_PIPELINE_NAME, True)
            if full_refresh:
                forget_workspace(pipeline, workspace_id)
                pipeline.drop()  # the local copy of its state goes too
                pipeline = make_pipeline(warehouse, workspace_id, destination, pipelines_dir)
            if resources:
                source = source.with_resources(*_checked_resources(resources))
            if since and not full_refresh:
                pipeline.sync_destination()
                if describe_sync(pipeline.state):
                    control.stats.warn(
                        "--since is ignored: this workspace already has cursors "
                        "(--full-refresh starts again from --since)"
                    )
            return _run(pipeline, source, control, started, workspace_name)
    finally:
        control.finish()


def _run(
    pipeline: dlt.Pipeline,
    source: Any,
    control: RunControl,
    started: datetime,
    workspace_name: str | None,
) -> LoadResult:
    """Run the pipeline with signals turned into a clean stop, then record the run."""
    stats = control.stats
    try:
        with stop_on_signals(control):
            steps = _Steps()
            info = steps.run(pipeline, source, control.stats)
    except Exception as error:
        why = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        failed = LoadResult(
            started,
            datetime.now(UTC),
            stats,
            stopped=why,
            exit_code=1,
            workspace_id=control.workspace_id,
            workspace_name=workspace_name,
        )
        with contextlib.suppress(Exception):  # the warehouse itself may be what failed
            record_run(pipeline, _run_record(failed, "failed", control))
        raise
    reason = control.reason
    result = LoadResult(
        started,
        datetime.now(UTC),
        stats,
        steps.rows,
        stats.stop_reason,
        steps.seconds,
        reason.exit_code if reason else 0,
        control.workspace_id,
        workspace_name,
        info,
    )
    if control.workspace_id:
        record_incomplete_shipments(
            pipeline, control.workspace_id, incomplete_shipments(pipeline.state)
        )
    outcome = "completed" if reason is None else "stopped" if reason.exit_code != 1 else "failed"
    record_run(pipeline, _run_record(result, outcome, control))
    return result


# One lock per destination for the load step of workspaces loading side by side in this
# process: two first loads creating the same tables at once collide in the database's catalog
# (Postgres: duplicate key in pg_type). Fetching, the long part, stays side by side.
_LOAD_STEP_LOCKS: dict[str, threading.Lock] = defaultdict(threading.Lock)


@dataclass
class _Steps:
    """`pipeline.run` as its steps, for every destination: the state from the destination,
    what an interrupted run left, extract, the load files chosen by what was fetched
    (`LoadFileFormat`), normalize, and load under its destination's lock."""

    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def run(self, pipeline: dlt.Pipeline, source: Any, stats: RunStats) -> LoadInfo:
        pipeline.sync_destination()  # as `pipeline.run` does: the newer of the two states
        if pipeline.has_pending_data:
            # An earlier run stopped between fetching and loading (killed, the disk full):
            # what it fetched goes in first. `pipeline.run` would stop there; this run goes on.
            stats.warn("loaded what an interrupted run had fetched before this run's own")
            if pipeline.list_extracted_load_packages():
                pipeline.normalize()
            with _LOAD_STEP_LOCKS[pipeline.destination.destination_name]:
                pipeline.load()
        extracted = self._timed("extract", pipeline.extract, source)
        file_format = pipeline.destination.caps_params.get("loader_file_format_selector")
        if isinstance(file_format, LoadFileFormat):
            file_format.choose_for(_records_in(extracted))
        normalized = self._timed("normalize", pipeline.normalize)
        self.rows = {
            table: n
            for table, n in (normalized.row_counts if normalized else {}).items()
            if not table.startswith("_dlt")
        }
        with _LOAD_STEP_LOCKS[pipeline.destination.destination_name]:
            info: LoadInfo = self._timed("load", pipeline.load)
        return info

    def _timed(self, step: str, call: Any, *args: Any) -> Any:
        began = time.monotonic()
        try:
            return call(*args)
        finally:
            self.seconds[step] = time.monotonic() - began


def _records_in(extracted: ExtractInfo) -> int:
    """Records an extract wrote (nested ones still inside their parents), `_dlt` tables aside."""
    return sum(
        table_metrics.items_count
        for metrics in extracted.metrics.values()
        for step in metrics
        for table, table_metrics in step["table_metrics"].items()
        if not table.startswith("_dlt")
    )


def _run_record(result: LoadResult, outcome: str, control: RunControl) -> dict[str, Any]:
    stats = result.stats
    return {
        "run_id": control.run_id,
        "workspace_id": control.workspace_id,
        "workspace_name": result.workspace_name,
        "started_at": result.started_at,
        "finished_at": result.finished_at,
        "outcome": outcome,
        "stop_reason": result.stopped,
        "requests": stats.requests,
        "failed_attempts": stats.failed_attempts,
        "throttled": stats.throttled,
        "retries": stats.retries,
        "waited_seconds": round(stats.waited_seconds, 3),
        "request_seconds": round(stats.request_seconds, 3),
        "truncated_trails": stats.truncated_trails,
        "rows": dict(result.rows),
        "requests_by_endpoint": dict(stats.by_endpoint),
        "warnings": list(stats.warnings),
    }


@contextlib.contextmanager
def stop_on_signals(control: Stoppable) -> Iterator[None]:
    """SIGINT and SIGTERM stop the run cleanly (what was fetched is loaded); a second one of
    the same kind acts as usual and ends the process at once. Only in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handle(number: int, frame: object) -> None:
        signal.signal(number, previous[number] or signal.SIG_DFL)
        name = signal.Signals(number).name
        # Stopping takes locks a worker may hold; a thread of its own keeps this handler safe.
        reason = Interrupted(f"stopped by {name}; the next run continues", number)
        threading.Thread(target=control.stop, args=(reason,), daemon=True).start()

    for kind in (signal.SIGINT, signal.SIGTERM):
        previous[kind] = signal.signal(kind, handle)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class WarehouseError(Exception):
    """The warehouse cannot be written: the message is one line with a hint."""


def check_folder(folder: Path) -> None:
    """Fail in one line, before anything is written, when the warehouse's folder (or, while it
    does not exist, the nearest folder above it) cannot be written in."""
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise WarehouseError(
            f"cannot write in {existing} ({error.strerror}); choose a writable folder with --duckdb"
        ) from None


@contextlib.contextmanager
def open_warehouse(warehouse: Path) -> Iterator[None]:
    """Hold an existing warehouse open for a run, or fail in one line when DuckDB cannot open it.

    While one connection is open, every other one this process opens to the file (dlt opens
    about seven in a run) shares its database instead of reading and checkpointing the file
    again: 40 ms each otherwise. A new warehouse is not created here, so that a run that
    writes nothing leaves nothing behind."""
    if not warehouse.exists():
        yield
        return
    try:
        held = duckdb.connect(str(warehouse))
    except duckdb.Error as error:
        first = str(error).splitlines()[0]
        raise WarehouseError(
            f"{warehouse} is not a usable DuckDB file ({first}); move it away or choose "
            "another --duckdb"
        ) from None
    try:
        yield
    finally:
        held.close()


# Shipments and their children come from one list pass: loading one without the others would
# move the list's cursor past changes whose children were never fetched.
SHIPMENT_RESOURCES = ("shipments", "audit_events", "shipment_fields")


def _checked_resources(resources: Sequence[str]) -> list[str]:
    """The chosen resources (a shipment resource brings the other two along), or a one-line
    error naming the unknown ones."""
    unknown = sorted(set(resources) - set(RESOURCES))
    if unknown:
        raise ValueError(
            f"unknown resources {', '.join(unknown)}; choose from {', '.join(RESOURCES)}"
        )
    chosen = list(dict.fromkeys(resources))
    if set(chosen) & set(SHIPMENT_RESOURCES):
        chosen += [name for name in SHIPMENT_RESOURCES if name not in chosen]
    return chosen


@dataclass
class WorkspaceStatus:
    """One workspace of a warehouse: its runs, the cursors of its state and its rows."""

    workspace_id: str
    name: str | None  # as the service names it (raw.workspaces)
    runs: list[dict[str, Any]]  # newest first, failed and stopped ones too
    resources: list[ResourceSyncStatus]
    row_counts: dict[str, int]
    truncated_trails: int = 0  # shipments whose loaded audit trail is the API's cap (500)

    @property
    def configured_as(self) -> str | None:
        """The configuration entry (`--workspace` name) its last run used."""
        return next((r.get("workspace_name") for r in self.runs if r.get("workspace_name")), None)

    @property
    def last_run(self) -> dict[str, Any] | None:
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


@dataclass
class Status:
    """What `signing-etl status` shows: the warehouse's recent runs and each workspace."""

    warehouse: Path
    runs: list[dict[str, Any]]  # newest first, of every workspace
    workspaces: list[WorkspaceStatus]

    @property
    def last_run(self) -> dict[str, Any] | None:
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


def status(warehouse: Path = DEFAULT_WAREHOUSE, destination: str = "duckdb") -> Status:
    """The recent runs, and per workspace its cursors and row counts, read without writing."""
    with warehouse_client(warehouse, destination) as client:
        return read_status(client, warehouse)


@contextlib.contextmanager
def warehouse_client(warehouse: Path, destination: str = "duckdb") -> Iterator[Any]:
    """A SQL client of the warehouse's `raw` dataset for reading: a read-only DuckDB
    connection (the file may be open elsewhere), or dlt's SQL client of any other destination,
    configured as a load is (e.g. `DESTINATION__POSTGRES__CREDENTIALS`)."""
    if destination == "duckdb":
        if not warehouse.exists():
            raise FileNotFoundError(f"no warehouse at {warehouse}; run `signing-etl load` first")
        with duckdb.connect(str(warehouse), read_only=True) as connection:
            yield ReadOnlyDuckDB(connection, DATASET)
        return
    with tempfile.TemporaryDirectory() as folder:
        reader = dlt.pipeline(
            pipeline_name="signing_reader",
            pipelines_dir=folder,
            destination=destination,
            dataset_name=DATASET,
        )
        with reader.sql_client() as client:
            if not client.has_dataset():
                raise FileNotFoundError(
                    f"no dataset {DATASET} in the {destination} destination; "
                    f"run `signing-etl load --destination {destination}` first"
                )
            yield client


def read_only_query(
    warehouse: Path, query: str, most: int, destination: str = "duckdb"
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The column names and at most `most` rows of one query, run where nothing can be
    written: a read-only DuckDB connection, or a read-only transaction of the destination."""
    with warehouse_client(warehouse, destination) as client:
        if isinstance(client, ReadOnlyDuckDB):
            cursor = client.connection.execute(query)
            names = [d[0] for d in cursor.description or []]
            return names, cursor.fetchmany(most)
        native = client.native_connection
        with native.cursor() as cursor:
            # For the session, not one transaction: dlt's connection may be in autocommit.
            cursor.execute("set session characteristics as transaction read only")
            cursor.execute(query)
            names = [d[0] for d in cursor.description or []]
            rows = [tuple(row) for row in cursor.fetchmany(most)] if cursor.description else []
        native.rollback()
        return names, rows


def read_status(client: Any, warehouse: Path) -> Status:
    """`status` through a dlt-style SQL client (`execute_sql` with `%s` parameters,
    `make_qualified_table_name`, `dataset_name`), so any destination can be read."""
    columns = columns_by_table(client)
    runs: list[dict[str, Any]] = []
    if RUNS_TABLE in columns:
        runs_table = client.make_qualified_table_name(RUNS_TABLE)
        names = sorted(columns[RUNS_TABLE])
        rows = client.execute_sql(
            f"select {', '.join(names)} from {runs_table} order by started_at desc"
        )
        runs = [dict(zip(names, row, strict=True)) for row in rows or []]
    counts = _counts_by_workspace(client, columns)
    names_by_id: dict[str, str | None] = {}
    if "workspaces" in columns:
        table = client.make_qualified_table_name("workspaces")
        for workspace_id, name in client.execute_sql(f"select id, name from {table}") or []:
            names_by_id[str(workspace_id)] = name
    for run in runs:
        if run.get("workspace_id"):
            names_by_id.setdefault(str(run["workspace_id"]), None)
    states = stored_states(client)
    truncated = _truncated_trails(client, columns)
    workspaces = [
        WorkspaceStatus(
            workspace_id,
            name,
            [r for r in runs if r.get("workspace_id") == workspace_id][:RECENT_RUNS],
            describe_sync(_state_of(states, workspace_id)),
            counts.get(workspace_id, {}),
            truncated.get(workspace_id, 0),
        )
        for workspace_id, name in sorted(names_by_id.items(), key=lambda i: (i[1] or "", i[0]))
    ]
    return Status(warehouse, runs[:RECENT_RUNS], workspaces)


class ReadOnlyDuckDB:
    """The few calls of dlt's SQL client that `read_status` uses, on a read-only DuckDB
    connection (dlt's own client opens the file for writing)."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, dataset_name: str) -> None:
        self.connection = connection
        self.dataset_name = dataset_name

    def make_qualified_table_name(self, table: str) -> str:
        return f'"{self.dataset_name}"."{table}"'

    def execute_sql(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return self.connection.execute(sql.replace("%s", "?"), list(args)).fetchall()


def _state_of(states: dict[str, StoredState], workspace_id: str) -> dict[str, Any]:
    stored = states.get(pipeline_name_for(workspace_id))
    return stored.state if stored else {}


def _counts_by_workspace(client: Any, columns: dict[str, set[str]]) -> dict[str, dict[str, int]]:
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


def _truncated_trails(client: Any, columns: dict[str, set[str]]) -> dict[str, int]:
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
