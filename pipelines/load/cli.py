"""`signing-etl load`: parse the options, load the configured workspaces in turn or side by
side, say how each ended, build the models, and exit with the worst outcome's code."""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from typing import Annotated, NoReturn

import typer

from pipelines.configuration import (
    WorkspaceEntry,
    choose,
    configured_names,
    configured_workspaces,
)
from pipelines.console import output
from pipelines.console.commands import fail, warehouse_named
from pipelines.console.options import (
    AllowMassDeleteOption,
    FullRefreshOption,
    LoadDestination,
    MaxRequestsOption,
    ParallelOption,
    ReconcileOption,
    ReloadOption,
    ResourcesOption,
    SinceOption,
    WarehouseFile,
    WorkspacesOption,
)
from pipelines.errors import (
    EXPECTED_FAILURES,
    AlreadyRunning,
    ConfigError,
    WarehouseError,
    WarehousePathError,
    failure_reason,
)
from pipelines.load.display import CliWatcher, workspaces_summary
from pipelines.load.run import LoadOptions
from pipelines.load.workspaces import WorkspaceLoad, in_turns, load_workspaces
from pipelines.modeling.cli import build_models_or_fail
from pipelines.outcome import Outcome, is_signal, worst_exit_code
from pipelines.raw.run_records import RunRecord, journal_run
from pipelines.status.read import last_attempts
from pipelines.warehouse import DEFAULT_DESTINATION, DEFAULT_WAREHOUSE, Warehouse
from sources.signing import (
    ReloadWindow,
    SigningAPIError,
    chosen_resources,
    parse_iso,
    reloaded_resources,
)

EXIT_USAGE = 2


def load_command(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    workspace: WorkspacesOption = None,
    since: SinceOption = None,
    full_refresh: FullRefreshOption = False,
    resources: ResourcesOption = None,
    max_requests: MaxRequestsOption = None,
    destination: LoadDestination = DEFAULT_DESTINATION,
    no_models: Annotated[bool, typer.Option("--no-models", help="Skip the dbt models.")] = False,
    parallel: ParallelOption = 1,
    reconcile: ReconcileOption = False,
    allow_mass_delete: AllowMassDeleteOption = False,
    reload: ReloadOption = None,
) -> None:
    """Run one incremental sync of each configured workspace into the warehouse (then the
    models). Workspaces load one after another (or `--parallel N` at once where the
    destination takes concurrent writers), each paced by its own key.

    Exit 0: done. Exit 75: stopped early on purpose (daily limit or --max-requests); what was
    fetched is loaded and the next run continues. Other non-zero: failed (reason on stderr).
    With several workspaces, the worst of them; one workspace's failure or stop does not keep
    the others from loading.

    Repairs: `--resources contacts --full-refresh` reads one list again from its start (the
    other lists and their cursors stay); `--reload FROM..TO` reads again what changed in a
    window and merges it, leaving every cursor where it was. docs/loading.md says more.
    """
    options = _load_options(
        since, full_refresh, resources, max_requests, reconcile, allow_mass_delete, reload
    )
    warehouse = warehouse_named(duckdb, destination)
    if parallel > 1 and not warehouse.takes_concurrent_writers:
        raise fail(
            "DuckDB takes one writer, so workspaces load one after another: --parallel needs "
            "a destination that takes concurrent writers, such as --destination postgres"
        )
    entries = _workspaces_to_load(warehouse, workspace or [])
    several = len(entries) > 1
    started = datetime.now(UTC)
    loads: list[WorkspaceLoad] = []
    try:  # one run: the workspaces and their models are published together, once
        with warehouse.publishing():
            loads = load_workspaces(
                entries, warehouse, options, parallel=parallel, watcher=CliWatcher(several)
            )
            if several:
                output.set_run_id(None)  # the lines about all workspaces belong to no one run
                workspaces_summary(loads, len(entries))
            _build_models_after(warehouse, loads, no_models)
    except AlreadyRunning as busy:
        names = [entry.name for entry in entries]
        _journal_each(warehouse, names, started, Outcome.STOPPED, str(busy))
        output.warning(f"stopped: {busy}", exit_code=busy.exit_code)
        raise typer.Exit(busy.exit_code) from None
    except WarehouseError as error:  # a place no run can use, or a publish that failed
        if loads and not isinstance(error, WarehousePathError):  # ran, but is not published
            names = [entry.name for entry in entries]
            _journal_each(warehouse, names, started, Outcome.FAILED, failure_reason(error))
        raise fail(failure_reason(error)) from None
    if not several and loads[0].result is None:  # loaded nothing: its line is the end
        _leave(loads[0])
    code = worst_exit_code(load.code for load in loads)
    if not several and code:
        _leave(loads[0])
    if code:
        raise typer.Exit(code)


def _load_options(
    since: str | None,
    full_refresh: bool,
    resources: str | None,
    max_requests: int | None,
    reconcile: bool,
    allow_mass_delete: bool,
    reload: str | None,
) -> LoadOptions:
    """The command line's options as a load takes them, or a one-line usage error (exit 2):
    an unknown resource, a reload window it cannot take, a `--since` that is no time."""
    chosen = tuple(r.strip() for r in resources.split(",") if r.strip()) if resources else None
    if chosen:
        try:
            chosen_resources(chosen)
        except SigningAPIError as error:
            raise fail(str(error), EXIT_USAGE) from None
    window = _reload_window(reload, chosen, since, full_refresh, reconcile)
    if since is not None:
        try:
            parse_iso(since)
        except ValueError:
            raise fail(
                f"--since {since!r} is not an ISO 8601 time (e.g. 2026-01-01)", EXIT_USAGE
            ) from None
    return LoadOptions(
        since, full_refresh, chosen, max_requests, reconcile, allow_mass_delete, window
    )


def _reload_window(
    text: str | None,
    resources: tuple[str, ...] | None,
    since: str | None,
    full_refresh: bool,
    reconcile: bool,
) -> ReloadWindow | None:
    """The window of `--reload`, or a one-line usage error (exit 2): a window that is not
    FROM..TO, options a reload cannot take, or resources none of which it reads."""
    if text is None:
        return None
    given = {"--since": since is not None, "--full-refresh": full_refresh, "--reconcile": reconcile}
    clashing = [name for name, is_given in given.items() if is_given]
    if clashing:
        raise fail(f"--reload cannot be combined with {', '.join(clashing)}", EXIT_USAGE)
    try:
        reloaded_resources(resources)
        return ReloadWindow.parse(text)
    except SigningAPIError as error:
        raise fail(str(error), EXIT_USAGE) from None


def _journal_each(
    warehouse: Warehouse,
    names: list[str],
    started: datetime,
    outcome: Outcome,
    reason: str,
) -> None:
    """Each workspace's run as it ended for all of them, in the journal beside the warehouse
    (`status` reads it): stopped because another run held the warehouse, or failed because
    what it loaded could not be published (a full disk), or failed because the configuration
    names it but no run can start from it."""
    for name in names:
        with contextlib.suppress(OSError):  # a disk too full even for a line
            journal_run(
                warehouse,
                RunRecord(
                    run_id=uuid.uuid4().hex[:12],
                    workspace_id=None,
                    workspace_name=name,
                    started_at=started,
                    finished_at=datetime.now(UTC),
                    outcome=outcome,
                    stop_reason=reason,
                ),
            )


def _build_models_after(warehouse: Warehouse, loads: list[WorkspaceLoad], no_models: bool) -> None:
    """The models, after any load that loaded something (a stop on purpose too: marts of what
    is whole), but not after a signal."""
    if no_models:
        return
    if any(is_signal(load.code) for load in loads):
        output.warning("the models are not built after a signal; the next run builds them")
    elif any(load.result for load in loads):
        build_models_or_fail(warehouse)


def _workspaces_to_load(warehouse: Warehouse, named: list[str]) -> list[WorkspaceEntry]:
    """The configured workspaces asked for, in turn when all are (the one whose last run
    began longest ago first); an unknown workspace is one line, before any request."""
    try:
        configured = _configured(warehouse)
        entries = choose(configured, named)
    except EXPECTED_FAILURES as error:
        raise fail(failure_reason(error)) from None
    if not named and len(entries) > 1:
        return in_turns(entries, last_attempts(warehouse))
    return entries


def _configured(warehouse: Warehouse) -> list[WorkspaceEntry]:
    """The configured workspaces. A configuration no run can start from (an entry without its
    key, a bad base URL) fails the run, and on a warehouse loaded before, each workspace the
    configuration names gets a failed run with that reason in the journal, so `status` and
    `--check` say why the scheduled loads stopped instead of waiting for the data to age."""
    try:
        return configured_workspaces()
    except ConfigError as error:
        names = configured_names()
        if names and warehouse.loaded_before():
            now = datetime.now(UTC)
            _journal_each(warehouse, names, now, Outcome.FAILED, failure_reason(error))
        raise


def _leave(load: WorkspaceLoad) -> NoReturn:
    """End a single workspace's load: a failure's one line, or a stop's warning and its code."""
    if load.outcome is Outcome.FAILED:
        raise fail(load.failure_line)
    output.warning(f"stopped early: {load.reason}", exit_code=load.code)
    raise typer.Exit(load.code)
