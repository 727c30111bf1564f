"""One run of the dlt pipeline of the signing source: what a load is asked to do, the run in
dlt's steps with signals turned into a clean stop, and what it did.

A run holds the warehouse as a writer (`Warehouse.writer`: a DuckDB file's lock), loads what
the source fetched even when it stopped early, and records its outcome in `raw._signing_runs`
for `signing-etl status`.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dlt
from dlt.common.pipeline import LoadInfo

from pipelines.errors import (
    EXPECTED_FAILURES,
    AlreadyRunning,
    WarehouseError,
    WarehousePathError,
    exit_code_of,
    failure_reason,
)
from pipelines.load.signals import stop_on_signals
from pipelines.outcome import EXIT_DONE, EXIT_FAILED, Outcome, worst_exit_code
from pipelines.privacy.change import PrivacyPlan, apply_privacy, prepare_privacy
from pipelines.raw.deletions import PipelineRecords, mark_deletions
from pipelines.raw.pipeline import (
    LEGACY_PIPELINE_NAME,
    adopt_legacy_state,
    forget_workspace,
    make_pipeline,
)
from pipelines.raw.run_records import (
    RunRecord,
    journal_run,
    record_incomplete_shipments,
    record_run,
)
from pipelines.raw.schema_changes import SchemaChanges
from pipelines.raw.steps import LoadSteps
from pipelines.warehouse import DEFAULT_WAREHOUSE, Warehouse
from pipelines.webhooks.ledger import Reconciliation
from sources.signing import (
    ReloadWindow,
    RunControl,
    RunStats,
    SigningConfiguration,
    SyncContext,
    TableDeletions,
    chosen_resources,
    configured_source,
    connect,
    describe_sync,
    incomplete_shipments,
    reloaded_resources,
    signing_source,
)


@dataclass(frozen=True)
class LoadOptions:
    """What a load is asked to do, as `signing-etl load` and the Dagster assets ask it."""

    since: str | None = None  # first run only: start there instead of the whole history
    # With `resources`: those lists read again from the start, their rows merged over (no
    # other list moves); without: this workspace's rows and state deleted, then a full load.
    full_refresh: bool = False
    resources: tuple[str, ...] | None = None  # a subset of the source's resources
    max_requests: int | None = None  # stop cleanly after this many requests (exit 75)
    reconcile: bool = False  # a full pass over every list's ids for deleted records
    allow_mass_delete: bool = False  # mark what a full pass found gone, whatever its share
    reload: ReloadWindow | None = None  # re-read the lists' changes in a window, no cursor moved

    @property
    def refreshes_workspace(self) -> bool:
        """Whether this workspace's rows and state are deleted before its load (a full
        refresh of the whole workspace; one of some lists merges over their rows instead)."""
        return self.full_refresh and not self.resources

    @property
    def whole(self) -> bool:
        """Whether the run loads every list from its cursor (what the webhooks'
        reconciliation counts)."""
        return not self.resources and self.reload is None


@dataclass
class LoadResult:
    """What one run did, for the summary and the exit code."""

    started_at: datetime
    finished_at: datetime
    stats: RunStats
    rows: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None  # why it stopped early (None: it ran to its end)
    step_seconds: dict[str, float] = field(default_factory=dict)
    exit_code: int = EXIT_DONE
    workspace_id: str | None = None
    workspace_name: str | None = None  # the configured entry (`--workspace`)
    load_info: LoadInfo | None = None  # dlt's account of the load (jobs, failures)
    deletions: list[TableDeletions] = field(default_factory=list)  # per list checked
    marked: dict[str, int] = field(default_factory=dict)  # records marked deleted per table
    # Changed shipments and contacts the webhooks had missed / brought (None: webhooks off).
    missed_by_webhooks: int | None = None
    brought_by_webhooks: int | None = None
    schema_changes: SchemaChanges = field(default_factory=SchemaChanges)

    @property
    def seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def outcome(self) -> Outcome:
        return Outcome.from_exit_code(self.exit_code)

    def record(self, run_id: str) -> RunRecord:
        """The run's record for `raw._signing_runs`."""
        stats = self.stats
        return RunRecord(
            run_id=run_id,
            workspace_id=self.workspace_id,
            workspace_name=self.workspace_name,
            started_at=self.started_at,
            finished_at=self.finished_at,
            outcome=self.outcome,
            stop_reason=self.stopped,
            counters=stats.counters(),
            deletions={d.table: d.to_record() for d in self.deletions},
            rows=dict(self.rows),
            requests_by_endpoint=dict(stats.by_endpoint),
            warnings=list(stats.warnings),
            service_time=stats.service_time,
            limits=dict(stats.limits),
            daily_remaining=stats.daily_remaining,
            missed_by_webhooks=self.missed_by_webhooks,
            brought_by_webhooks=self.brought_by_webhooks,
            schema_changes=self.schema_changes.to_record(),
        )


def load_incremental(
    warehouse: Warehouse | Path = DEFAULT_WAREHOUSE,
    options: LoadOptions | None = None,
    *,
    control: RunControl | None = None,
    workspace_name: str | None = None,
    settings: SigningConfiguration | Callable[[], SigningConfiguration] | None = None,
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
    `settings` are the source's (`api_key`, `base_url`, pacing), or what resolves them when
    the run connects (a configured workspace's, whose bad setting is then a recorded failure
    of its run); None reads them from dlt's configuration then.
    """
    run = _Run(
        Warehouse.of(warehouse), options or LoadOptions(), control or RunControl(), workspace_name
    )
    failed: BaseException | None = None
    try:
        # A failed run's record is published too, under the run's hold: inside the CLI's hold
        # of several workspaces this one is part of it; Dagster's partitions and every other
        # caller are held and published here.
        with run.warehouse.publishing():
            try:
                with contextlib.ExitStack() as held:
                    return run.load(settings, held)
            except EXPECTED_FAILURES as error:
                run.record_failure(error)
                failed = error
        raise failed
    except Exception as error:  # the hold refused (busy), a publish that failed, a bug
        if error is not failed:
            run.record_failure(error)
        raise
    finally:
        run.control.finish()


class _Run:
    """One run as it goes: the warehouse it loads, what it was asked, its control, the
    configured name it runs as, and what it learns on the way (the workspace `/me` names, its
    pipeline). The one place its result is made and its record written, whether it ran to its
    end or ended early: whatever ended it (a refused key, a database error, a full disk, a
    bug), the run is recorded where `status` reads."""

    def __init__(
        self, warehouse: Warehouse, options: LoadOptions, control: RunControl, name: str | None
    ) -> None:
        self.warehouse = warehouse
        self.options = options
        self.control = control
        self.workspace_name = name
        self.workspace_id: str | None = None
        self.pipeline: dlt.Pipeline | None = None
        self.started = datetime.now(UTC)
        self.recorded = False

    def load(
        self,
        settings: SigningConfiguration | Callable[[], SigningConfiguration] | None,
        held: contextlib.ExitStack,
    ) -> LoadResult:
        """Hold the warehouse, connect, and load through the workspace's pipeline; what it
        holds is released by `held`."""
        options = self.options
        held.enter_context(self.warehouse.writer())
        held.enter_context(stop_on_signals(self.control))
        if not isinstance(settings, SigningConfiguration):  # resolved now, inside the run
            settings = (settings or configured_source)()
        connection = connect(
            settings,
            since=options.reload.since if options.reload else options.since,
            max_requests=options.max_requests,
            reconcile=options.reconcile,
            allow_mass_delete=options.allow_mass_delete,
            control=self.control,
        )
        workspace_id = self.workspace_id = connection.workspace_id
        folder = held.enter_context(self.warehouse.workspace_session(workspace_id))
        plan = prepare_privacy(
            self.warehouse, connection.privacy, workspace_id, options.refreshes_workspace
        )
        pipeline = self.pipeline = self._pipeline(workspace_id, folder)
        source = self._source(connection, pipeline, plan)
        ledger = (  # a whole load counts what the webhooks missed, when they are on
            Reconciliation.of_poll(self.warehouse, connection, self.started)
            if options.whole
            else None
        )
        if ledger is not None:
            held.callback(ledger.close)
            # The cursors the warehouse holds, also where the local folder is new (each run on a
            # shared database has one of its own; `forget` and a replaced file clear it).
            pipeline.sync_destination()
            ledger.watch(source, _lists_with_cursors(pipeline))
        return self._run(connection, pipeline, source, ledger)

    def _pipeline(self, workspace_id: str, folder: Path) -> dlt.Pipeline:
        """The workspace's pipeline, with the state of an earlier version handed over to it,
        and its rows and state gone when it is to be loaded afresh."""
        pipeline = make_pipeline(self.warehouse, workspace_id, folder)
        if adopt_legacy_state(pipeline):
            shutil.rmtree(folder / LEGACY_PIPELINE_NAME, True)
        if self.options.refreshes_workspace:
            forget_workspace(pipeline, workspace_id)
            pipeline.drop()  # the local copy of its state goes too
            pipeline = make_pipeline(self.warehouse, workspace_id, folder)
        return pipeline

    def _source(self, connection: SyncContext, pipeline: dlt.Pipeline, plan: PrivacyPlan) -> Any:
        """The source bound to the connection, under the privacy policy the warehouse's rows
        are now under and with the warehouse's records for the deletions' checks, with the
        resources asked for; `since` warned about when the workspace already has cursors (it
        applies to a first run only)."""
        stats = self.control.stats
        apply_privacy(self.warehouse, plan, stats)  # the rows' policy itself: `LoadSteps`
        connection.deletions.warehouse = PipelineRecords(pipeline, connection.workspace_id)
        options = self.options
        chosen = chosen_resources(options.resources) if options.resources else None
        if options.reload is not None:
            chosen = reloaded_resources(chosen)
            connection.window = options.reload
        elif options.full_refresh and chosen:
            connection.restart = frozenset(chosen)
        source = signing_source(connection)
        if chosen:
            source = source.with_resources(*chosen)
        if options.since and not options.full_refresh:
            pipeline.sync_destination()
            if describe_sync(pipeline.state):
                stats.warn(
                    "--since is ignored: this workspace already has cursors "
                    "(--full-refresh starts again from --since)"
                )
        return source

    def _run(
        self,
        connection: SyncContext,
        pipeline: dlt.Pipeline,
        source: Any,
        ledger: Reconciliation | None,
    ) -> LoadResult:
        """Run the pipeline with signals turned into a clean stop, mark what it found deleted,
        then record the run and what `ledger` counted of the webhooks' work."""
        workspace_id, deletions = connection.workspace_id, connection.deletions
        steps = LoadSteps()
        info = steps.run(pipeline, connection, source, self.control.stats)
        reason = self.control.reason
        decided = deletions.decide()
        mode = deletions.settings.mode
        marked = mark_deletions(pipeline, workspace_id, decided, mode, datetime.now(UTC))
        refused = "; ".join(d.refused for d in decided if d.refused)
        codes = [reason.exit_code if reason else EXIT_DONE, EXIT_FAILED if refused else EXIT_DONE]
        stopped = "; ".join(filter(None, [refused, self.control.stats.stop_reason])) or None
        result = self.result(worst_exit_code(codes), stopped, steps, info, decided, marked)
        # What the webhooks missed and brought, then their inbox settled. A full refresh or a
        # first load reads every record, not only the changes, so it counts nothing as missed.
        if ledger is not None:
            if not self.options.full_refresh and ledger.counting:
                result.missed_by_webhooks, result.brought_by_webhooks = ledger.counts()
            ledger.settle(result.exit_code == EXIT_DONE, info.loads_ids if info else [])
        record_incomplete_shipments(pipeline, workspace_id, incomplete_shipments(pipeline.state))
        self.record(pipeline, result)
        return result

    def result(
        self,
        exit_code: int,
        stopped: str | None,
        steps: LoadSteps | None = None,
        info: LoadInfo | None = None,
        deletions: list[TableDeletions] | None = None,
        marked: dict[str, int] | None = None,
    ) -> LoadResult:
        """What the run did, as it ends now (the one place a `LoadResult` is made)."""
        return LoadResult(
            started_at=self.started,
            finished_at=datetime.now(UTC),
            stats=self.control.stats,
            rows=steps.rows if steps else {},
            stopped=stopped,
            step_seconds=steps.seconds if steps else {},
            exit_code=exit_code,
            workspace_id=self.workspace_id,
            workspace_name=self.workspace_name,
            load_info=info,
            deletions=deletions or [],
            marked=marked or {},
            schema_changes=steps.schema_changes if steps else SchemaChanges(),
        )

    def record(self, through: dlt.Pipeline | Warehouse, result: LoadResult) -> None:
        """`result` in `raw._signing_runs`, through the pipeline's connection or the
        warehouse's; once written, nothing that happens after records the run again."""
        with through.sql_client() as client:
            record_run(client, result.record(self.control.run_id))
        self.recorded = True

    def record_failure(self, error: BaseException) -> None:
        """Record the run as ended by `error`, unless it is recorded already: in the warehouse
        where it can take the record, else in the journal beside it (a warehouse that is
        itself what failed, a full disk, a database gone), where `status` reads it too; a
        DuckDB warehouse never loaded keeps nothing of a first run that failed."""
        if self.recorded:
            return
        ended = self.result(exit_code_of(error), failure_reason(error))
        if isinstance(error, AlreadyRunning) and self.warehouse.is_file:
            # The file was another run's, so it cannot take the record: journaled. A shared
            # database takes it, where every worker's `status` reads it.
            journal_run(self.warehouse, ended.record(self.control.run_id))
            return
        through: dlt.Pipeline | Warehouse | None = self.pipeline
        unusable = isinstance(error, WarehouseError) and not error.warehouse_usable
        if through is None and not unusable:
            with contextlib.suppress(Exception):  # a warehouse that cannot even be asked
                through = self.warehouse if self.warehouse.loaded_before() else None
        if through is not None:
            with contextlib.suppress(Exception):  # the warehouse itself may be what failed
                self.record(through, ended)
        first_file = self.warehouse.is_file and not self.warehouse.loaded_before()
        if not self.recorded and not first_file and not isinstance(error, WarehousePathError):
            # A full disk, a dead database, a file DuckDB cannot open: journaled. A path that
            # is no place for a warehouse, and a first DuckDB run that failed, leave nothing.
            with contextlib.suppress(OSError):  # the disk may be too full for that as well
                journal_run(self.warehouse, ended.record(self.control.run_id))


def _lists_with_cursors(pipeline: dlt.Pipeline) -> set[str]:
    """The lists this workspace's last runs left a cursor for: a run reads only their changes."""
    return {status.name for status in describe_sync(pipeline.state) if status.cursor}
