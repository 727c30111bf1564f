"""`signing-etl`: the command line. It parses options, calls the scenario functions of the
pipeline and the sandbox, and turns their outcomes into output and exit codes; it holds no
logic of its own."""

from __future__ import annotations

import csv
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from dlt.pipeline.exceptions import PipelineStepFailed
from rich.progress import Progress as RichProgress
from rich.progress import ProgressColumn, SpinnerColumn, Task, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from pipelines import output
from pipelines import signing_pipeline as pipeline
from pipelines.demo import DEMO_WAREHOUSE, EXAMPLE_QUERIES, headline, run_demo
from pipelines.workspaces import (
    WorkspaceConfigError,
    WorkspaceEntry,
    WorkspaceLoad,
    choose,
    configured_workspaces,
    load_workspace,
    step_failure_reason,
    worst_exit_code,
)
from sources.signing import RunControl, RunStats, RunStopped, SigningAPIError, parse_iso

if TYPE_CHECKING:
    from pipelines.models import ModelsResult

# dbt (pipelines.models) and the sandbox are imported where they are used: together they cost
# seconds of start-up that `load --no-models` and `status` don't need.
PLANS = ("free", "starter", "pro", "business")

app = typer.Typer(
    help="Load an electronic signing service into an analytics warehouse.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = output.stdout_console()
err = output.stderr_console()

# `--destination` of the commands that read a warehouse (`load` has its own help).
WarehouseDestination = Annotated[
    str, typer.Option(help="The warehouse's dlt destination (duckdb, postgres, ...).")
]


@app.callback()
def main(
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            help="text (timestamped lines when not on a terminal) or json (one object a line).",
        ),
    ] = "text",
) -> None:
    """Load an electronic signing service into an analytics warehouse."""
    if log_format not in ("text", "json"):
        raise typer.BadParameter("--log-format must be text or json")
    output.configure("json" if log_format == "json" else "text")


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print a one-line reason on stderr and leave with `code`."""
    output.error(message)
    return typer.Exit(code)


@app.command()
def load(
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file.")] = (
        pipeline.DEFAULT_WAREHOUSE
    ),
    workspace: Annotated[
        list[str] | None,
        typer.Option(
            "--workspace",
            help="Load only this configured workspace ([sources.signing.workspaces.<name>]); "
            "repeat for several. Default: all of them.",
        ),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="First run only: start at this ISO time, not the beginning.")
    ] = None,
    full_refresh: Annotated[
        bool,
        typer.Option(
            "--full-refresh",
            help="Delete the chosen workspaces' rows and state and reload them; others stay.",
        ),
    ] = False,
    resources: Annotated[
        str | None,
        typer.Option(help=f"Comma-separated subset of: {', '.join(pipeline.RESOURCES)}."),
    ] = None,
    max_requests: Annotated[
        int | None,
        typer.Option(min=1, help="Stop cleanly after this many requests per workspace (exit 75)."),
    ] = None,
    destination: Annotated[
        str, typer.Option(help="Any dlt destination; its credentials come from dlt config.")
    ] = "duckdb",
    no_models: Annotated[bool, typer.Option("--no-models", help="Skip the dbt models.")] = False,
    parallel: Annotated[
        int,
        typer.Option(
            min=1,
            help="Workspaces loading at once, for destinations that take concurrent writers "
            "(postgres); DuckDB takes one writer.",
        ),
    ] = 1,
) -> None:
    """Run one incremental sync of each configured workspace into the warehouse (then the
    models). Workspaces load one after another (or `--parallel N` at once where the
    destination takes concurrent writers), each paced by its own key.

    Exit 0: done. Exit 75: stopped early on purpose (daily limit or --max-requests); what was
    fetched is loaded and the next run continues. Other non-zero: failed (reason on stderr).
    With several workspaces, the worst of them; one workspace's failure or stop does not keep
    the others from loading.
    """
    if since is not None:
        try:
            parse_iso(since)
        except ValueError:
            raise fail(f"--since {since!r} is not an ISO 8601 time (e.g. 2026-01-01)") from None
    try:
        entries = choose(configured_workspaces(), workspace or [])
    except WorkspaceConfigError as error:
        raise fail(str(error)) from None
    if parallel > 1 and destination == "duckdb":
        raise fail(
            "DuckDB takes one writer, so workspaces load one after another: --parallel needs "
            "a destination that takes concurrent writers, such as --destination postgres"
        )
    chosen = [r.strip() for r in resources.split(",") if r.strip()] if resources else None
    several = len(entries) > 1
    options: dict[str, Any] = {
        "since": since,
        "full_refresh": full_refresh,
        "resources": chosen,
        "max_requests": max_requests,
        "destination": destination,
    }
    if parallel > 1 and several:
        outcomes = _load_side_by_side(entries, duckdb, min(parallel, len(entries)), options)
    else:
        outcomes = _load_one_after_another(entries, duckdb, several, options)
    if several:
        output.set_run_id(None)  # the lines about all workspaces belong to no one run
        _summary_of_workspaces(outcomes, len(entries))
    if not no_models and any(o.result for o in outcomes):
        _build_models(duckdb, destination=destination)  # after a stop too: marts of what is whole
    code = worst_exit_code(o.code for o in outcomes)
    if not several and code == 1:
        raise fail(f"{outcomes[0].reason}; what was fetched is loaded, the next run continues")
    if not several and code:
        output.warning(f"stopped early: {outcomes[0].reason}", exit_code=code)
    if code:
        raise typer.Exit(code)


def _load_one_after_another(
    entries: list[WorkspaceEntry], warehouse: Path, several: bool, options: dict[str, Any]
) -> list[WorkspaceLoad]:
    """Each workspace in turn. A single workspace that loaded nothing ends the command with
    its one line, as before workspaces were several; a signal or an unusable warehouse leaves
    the rest for the next run."""
    outcomes: list[WorkspaceLoad] = []
    for entry in entries:
        outcome = _load_workspace(entry, warehouse, several, RunControl(), **options)
        outcomes.append(outcome)
        if not several and outcome.result is None:
            if outcome.code == 1:
                raise fail(str(outcome.reason))
            output.warning(f"stopped early: {outcome.reason}", exit_code=outcome.code)
            raise typer.Exit(outcome.code)
        if outcome.code > 128 or outcome.fatal:
            break
    return outcomes


def _load_side_by_side(
    entries: list[WorkspaceEntry], warehouse: Path, width: int, options: dict[str, Any]
) -> list[WorkspaceLoad]:
    """Up to `width` workspaces at once, each in a thread with its own pipeline, key and
    pacer. SIGINT/SIGTERM stop every one of them cleanly (signals reach only this thread);
    workspaces not started by then wait for the next run."""
    controls = {entry.name: RunControl() for entry in entries}
    group = _ControlGroup(list(controls.values()))

    def one(entry: WorkspaceEntry) -> WorkspaceLoad | None:
        if group.stopped:
            return None
        return _load_workspace(entry, warehouse, True, controls[entry.name], **options)

    with pipeline.stop_on_signals(group), ThreadPoolExecutor(width) as pool:
        results = list(pool.map(one, entries))
    return [outcome for outcome in results if outcome is not None]


class _ControlGroup:
    """Several runs stopped as one, by a signal."""

    def __init__(self, controls: list[RunControl]) -> None:
        self._controls = controls
        self.stopped = False

    def stop(self, reason: RunStopped) -> None:
        self.stopped = True
        for control in self._controls:
            control.stop(reason)


def _load_workspace(
    entry: WorkspaceEntry, warehouse: Path, several: bool, control: RunControl, **options: Any
) -> WorkspaceLoad:
    """One workspace's load (`load_workspace`) with its progress line; with several
    workspaces, one line as it ends, else the summary table."""
    output.set_run_id(control.run_id)
    if several:
        output.info(f"workspace {entry.name}: loading from {entry.base_url}")
    with Progress(control.stats):
        outcome = load_workspace(entry, warehouse, control, **options)
    if outcome.result is not None:
        _summary(outcome.result, outcome.seconds, several)
    if several:
        _say_outcome(outcome)
    return outcome


def _say_outcome(outcome: WorkspaceLoad) -> None:
    """One line per workspace as it ends, at the level its outcome deserves."""
    name = outcome.entry.name
    costs = f", {_costs(outcome.result.stats, outcome.seconds)}" if outcome.result else ""
    if outcome.code == 0:
        output.info(f"workspace {name}: completed{costs}")
    elif outcome.code == 1:
        output.error(f"workspace {name}: failed: {outcome.reason}{costs}")
    else:
        output.warning(
            f"workspace {name}: stopped early: {outcome.reason}{costs}", exit_code=outcome.code
        )


def _summary_of_workspaces(outcomes: list[WorkspaceLoad], total: int) -> None:
    """Rows loaded per table and workspace, then one line with each workspace's outcome (and
    those a signal kept from starting)."""
    loaded = {o.entry.name: o.result.rows for o in outcomes if o.result is not None}
    if loaded and not output.is_json():
        table = Table("table", *loaded, title="Load summary")
        names = sorted({table for rows in loaded.values() for table in rows})
        for name in names or ["(nothing changed)"]:
            table.add_row(name, *(f"{rows.get(name, 0):,}" for rows in loaded.values()))
        out.print(table)
    words = {0: "completed", 1: "failed"}
    parts = [f"{o.entry.name} {words.get(o.code, 'stopped')}" for o in outcomes]
    if len(outcomes) < total:
        parts.append(f"{total - len(outcomes)} not started")
    output.info(f"Workspaces: {', '.join(parts)}")


@app.command()
def models(
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file.")] = (
        pipeline.DEFAULT_WAREHOUSE
    ),
    select: Annotated[str | None, typer.Option(help="dbt selection, e.g. marts.")] = None,
    destination: WarehouseDestination = "duckdb",
) -> None:
    """Rebuild the dbt models (staging views, marts tables) on the loaded raw data."""
    _build_models(duckdb, select, destination)


def _build_models(
    warehouse: Path, select: str | None = None, destination: str = "duckdb"
) -> ModelsResult:
    """Run dbt on the destination's warehouse (its dbt target follows the destination); a
    failure is one line on stderr and exit 1, and the raw data stays as loaded."""
    from pipelines.models import ModelsError, build_models, check_warehouse

    try:
        if destination == "duckdb":
            check_warehouse(warehouse)
        output.info("Building the models (dbt)…")
        result = build_models(warehouse, select=select, destination=destination)
    except ModelsError as error:
        raise fail(f"models: {error}") from None
    if not result.success:
        raise fail(f"models failed (raw data is loaded and kept): {result.summary}")
    output.info(result.summary)
    return result


@app.command()
def demo(
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file to (re)create.")] = (
        DEMO_WAREHOUSE
    ),
    shipments: Annotated[int, typer.Option(min=10, help="Shipments of history.")] = 3_000,
    weeks: Annotated[int, typer.Option(min=0, max=12, help="Simulated weeks.")] = 4,
) -> None:
    """Everything on a fresh machine, no key needed: sandbox, loads over simulated weeks,
    models, report; ends with the warehouse's path, the funnel and queries to try."""
    started = time.monotonic()
    try:
        run_demo(
            duckdb,
            shipments=shipments,
            weeks=weeks,
            say=output.info,
        )
    except (SigningAPIError, PipelineStepFailed, pipeline.AlreadyRunning) as error:
        raise fail(
            step_failure_reason(error) if isinstance(error, PipelineStepFailed) else str(error)
        ) from None
    _build_models(duckdb)
    out.print(f"\n[bold]Warehouse:[/] {duckdb.resolve()}")
    out.print(headline(duckdb))
    out.print(
        f'\nTry these with `uv run signing-etl sql --duckdb {duckdb} "<query>"` '
        "(or in the duckdb CLI):"
    )
    for query in EXAMPLE_QUERIES:
        out.print(f"  {query}", highlight=False)
    report_path = _write_report(duckdb)
    out.print(f"\nDemo finished in {time.monotonic() - started:.0f} s.")
    out.print(f"[bold]Report:[/] {report_path.resolve()}", highlight=False, soft_wrap=True)


@app.command()
def report(
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file.")] = (
        pipeline.DEFAULT_WAREHOUSE
    ),
    out_dir: Annotated[
        Path, typer.Option("--out", help="Folder of the HTML report (created if missing).")
    ] = Path("reports"),
    workspace: Annotated[
        str | None,
        typer.Option(
            "--workspace",
            help="Report on one workspace: its configured name, its id, or its name at the "
            "service. Default: every workspace, each apart.",
        ),
    ] = None,
    destination: WarehouseDestination = "duckdb",
) -> None:
    """Run the funnel notebook on the warehouse's marts and write a self-contained HTML report."""
    path = _write_report(duckdb, out_dir, workspace, destination)
    out.print(path.resolve(), highlight=False, soft_wrap=True)


def _write_report(
    warehouse: Path,
    out_dir: Path | None = None,
    workspace: str | None = None,
    destination: str = "duckdb",
) -> Path:
    """Write the report (to `reports/` by default); a failure is one line on stderr, exit 1."""
    # Imported here: the notebook machinery takes half a second that other commands don't need.
    from pipelines.report import DEFAULT_REPORTS_DIR, ReportError, write_report

    output.info("Writing the report (runs notebooks/signing_funnel.ipynb)…")
    try:
        chosen = _configured_workspace_id(warehouse, workspace, destination) if workspace else None
        return write_report(warehouse, out_dir or DEFAULT_REPORTS_DIR, chosen, destination)
    except ReportError as error:
        raise fail(f"report: {error}") from None


def _configured_workspace_id(warehouse: Path, workspace: str, destination: str) -> str:
    """The workspace id a configured name (`--workspace` of `load`) was last loaded as, or
    `workspace` as given (an id or the service's name, which the report resolves)."""
    try:
        found = pipeline.status(warehouse, destination)
    except Exception:  # the report names what is wrong with the warehouse
        return workspace
    named = [w.workspace_id for w in found.workspaces if w.configured_as == workspace]
    return named[0] if len(named) == 1 else workspace


@app.command()
def status(
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file.")] = (
        pipeline.DEFAULT_WAREHOUSE
    ),
    destination: WarehouseDestination = "duckdb",
) -> None:
    """Show the last run, the cursors and the row counts of a warehouse."""
    try:
        found = pipeline.status(duckdb, destination)
    except FileNotFoundError as error:
        raise fail(str(error)) from None
    except Exception as error:  # a locked or foreign file: say so in one line
        raise fail(f"cannot read {duckdb}: {error}") from None
    run = found.last_run
    if run:
        out.print(f"Last run: {_run_line(run)}", highlight=False)
    else:
        out.print("Last run: none recorded")
    several = len(found.workspaces) > 1
    if len(found.runs) > 1:
        columns = ["started", *(["workspace"] if several else []), "outcome", "requests", "429s"]
        runs = Table(*columns, title="Recent runs")
        for earlier in found.runs:
            runs.add_row(
                f"{earlier['started_at']:%Y-%m-%d %H:%M:%S}",
                *([_run_workspace(earlier)] if several else []),
                _outcome(earlier),
                f"{earlier['requests']:,}",
                str(earlier["throttled"]),
            )
        out.print(runs)
    if several:
        _print_workspaces(found.workspaces)
    else:
        for workspace in found.workspaces:
            _print_workspace(workspace, duckdb)


def _label(workspace: pipeline.WorkspaceStatus) -> str:
    """The configured name of a workspace, or its id before any run recorded a name."""
    return workspace.configured_as or workspace.workspace_id


def _print_workspaces(workspaces: list[pipeline.WorkspaceStatus]) -> None:
    """Several workspaces side by side: who they are, their cursors, their rows."""
    who = Table("workspace", "id", "name at the service", "last run", title="Workspaces")
    for workspace in workspaces:
        last = workspace.last_run
        who.add_row(
            _label(workspace),
            workspace.workspace_id,
            workspace.name or "",
            f"{last['started_at']:%Y-%m-%d %H:%M:%S}, {_outcome(last)}" if last else "none",
        )
    out.print(who)
    lists = list(dict.fromkeys(name for w in workspaces for name in w.cursors))
    cursors = Table("workspace", *lists, title="Cursors (next run reads changes since)")
    for workspace in workspaces:
        cells = [
            workspace.cursors.get(name, "")
            + (" (interrupted)" if name in workspace.interrupted else "")
            for name in lists
        ]
        cursors.add_row(_label(workspace), *cells)
    out.print(cursors)
    counts = Table("table", *(_label(w) for w in workspaces), title="raw.* rows per workspace")
    tables = list(dict.fromkeys(t for w in workspaces for t in w.row_counts))
    for table in tables:
        counts.add_row(table, *(f"{w.row_counts.get(table, 0):,}" for w in workspaces))
    out.print(counts)
    for workspace in workspaces:
        if workspace.truncated_trails:
            out.print(
                f"{_label(workspace)}: audit trails cut at the API's 500 events: "
                f"{workspace.truncated_trails:,} shipments (flagged in marts.fct_shipments)"
            )


def _run_workspace(run: dict[str, Any]) -> str:
    return str(run.get("workspace_name") or run.get("workspace_id") or "?")


def _print_workspace(workspace: pipeline.WorkspaceStatus, warehouse: Path) -> None:
    """The one workspace's cursors and rows, as before workspaces were several."""
    cursors = Table("list", "next run reads changes since", title="Cursors")
    for name, since in workspace.cursors.items():
        interrupted = "  (pass interrupted)" if name in workspace.interrupted else ""
        cursors.add_row(name, since + interrupted)
    out.print(cursors)
    if workspace.truncated_trails:
        out.print(
            f"Audit trails cut at the API's 500 events: {workspace.truncated_trails:,} shipments "
            "(flagged in marts.fct_shipments)"
        )
    counts = Table("table", "rows", title=f"raw.* in {warehouse}")
    for table, count in workspace.row_counts.items():
        counts.add_row(table, f"{count:,}")
    out.print(counts)


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run, read-only.")],
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file.")] = (
        pipeline.DEFAULT_WAREHOUSE
    ),
    output_format: Annotated[
        str, typer.Option("--format", help="table (for people), csv or json (one object a row).")
    ] = "table",
    limit: Annotated[int, typer.Option(min=1, help="Rows printed at most.")] = 1000,
    destination: WarehouseDestination = "duckdb",
) -> None:
    """Run a read-only SQL query on the warehouse and print the result."""
    if output_format not in ("table", "csv", "json"):
        raise fail("--format must be table, csv or json")
    try:
        names, rows = pipeline.read_only_query(duckdb, query, limit + 1, destination)
    except FileNotFoundError as error:
        raise fail(str(error)) from None
    except Exception as error:  # the database's own message, in one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise fail(first) from None
    cut = len(rows) > limit
    _print_rows(names, rows[:limit], output_format)
    if cut:
        output.warning(f"the result has more than {limit:,} rows; the first {limit:,} are shown")


def _print_rows(names: list[str], rows: list[tuple[Any, ...]], output_format: str) -> None:
    """Rows as a table, as CSV (with a header), or as JSON lines, on stdout."""
    if output_format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([("" if v is None else v) for v in row] for row in rows)
    elif output_format == "json":
        for row in rows:
            sys.stdout.write(json.dumps(dict(zip(names, row, strict=True)), default=str) + "\n")
    else:
        table = Table(*names)
        for row in rows:
            table.add_row(*("" if v is None else str(v) for v in row))
        out.print(table)


def _outcome(run: dict[str, Any]) -> str:
    """`completed`, or `stopped (reason)` / `failed (reason)`."""
    reason = run.get("stop_reason")
    return str(run["outcome"]) + (f" ({reason})" if reason else "")


def _run_line(run: dict[str, Any]) -> str:
    waited = run.get("waited_seconds") or 0.0
    return (
        f"{run['started_at']:%Y-%m-%d %H:%M:%S %Z}, {_outcome(run)}, {run['requests']} "
        f"requests, {run['throttled']} 429s, {waited:.1f} s waited for limits"
    )


def _costs(stats: RunStats, seconds: float) -> str:
    return (
        f"{stats.requests:,} requests, {stats.throttled} answered 429, {stats.retries} "
        f"retried, {stats.failed_attempts} got no answer, {stats.waited_seconds:.1f} s "
        f"waited for limits, {stats.request_seconds:.1f} s with requests on the wire, "
        f"{seconds:.1f} s in all"
    )


def _summary(result: pipeline.LoadResult, seconds: float, several: bool = False) -> None:
    """Rows per table and what the run cost: a table on stdout (with several workspaces, one
    table for all at the end instead), or one JSON record per workspace."""
    stats = result.stats
    if output.is_json():
        output.info(
            "load summary",
            rows=dict(result.rows),
            requests=stats.requests,
            throttled=stats.throttled,
            retries=stats.retries,
            failed_attempts=stats.failed_attempts,
            waited_seconds=round(stats.waited_seconds, 3),
            request_seconds=round(stats.request_seconds, 3),
            seconds=round(seconds, 3),
            truncated_trails=stats.truncated_trails,
            workspace_id=result.workspace_id,
            workspace=result.workspace_name,
        )
    elif not several:
        table = Table("table", "rows loaded", title="Load summary")
        for name, count in sorted(result.rows.items()):
            table.add_row(name, f"{count:,}")
        if not result.rows:
            table.add_row("(nothing changed)", "0")
        out.print(table)
        out.print(_costs(stats, seconds), highlight=False)
    prefix = f"workspace {result.workspace_name}: " if several else ""
    if stats.truncated_trails:
        output.warning(
            f"{prefix}{stats.truncated_trails} audit trails were cut at the API's 500 events "
            "(their oldest events are missing; flagged in the marts)"
        )
    for warning in stats.warnings:
        output.warning(prefix + warning)


class _StatsColumn(ProgressColumn):
    """The run's counters, read at each refresh."""

    def __init__(self, stats: RunStats) -> None:
        super().__init__()
        self._stats = stats

    def render(self, task: Task) -> Text:
        return Text(_counts_line(self._stats), overflow="ellipsis", no_wrap=True)


def _counts_line(stats: RunStats) -> str:
    rows = ", ".join(f"{t} {n:,}" for t, n in sorted(stats.rows.items())) or "starting"
    return f"{stats.requests:,} requests, {stats.throttled} 429s | {rows}"


class Progress:
    """Counts while a run works: a live rich.progress line on a terminal; elsewhere (cron
    logs) one plain line every 15 s."""

    def __init__(self, stats: RunStats) -> None:
        self._stats = stats
        self._done = threading.Event()
        self._live: RichProgress | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        main = threading.current_thread() is threading.main_thread()
        if err.is_terminal and not output.is_json() and main:
            self._live = RichProgress(
                SpinnerColumn(),
                TimeElapsedColumn(),
                _StatsColumn(self._stats),
                console=err,
                transient=True,
            )
            self._live.add_task("load", total=None)
            self._live.start()
        else:
            run_id = output.current_run_id()  # the lines belong to this thread's run
            self._thread = threading.Thread(target=self._log_lines, args=(run_id,), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._live is not None:
            self._live.stop()
        if self._thread is not None:
            self._thread.join()

    def _log_lines(self, run_id: str | None) -> None:
        output.set_run_id(run_id)
        while not self._done.wait(15.0):
            elapsed = time.monotonic() - self._started
            output.info(f"{elapsed:5.0f} s  {_counts_line(self._stats)}")


def _parse_start(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(parse_iso(value).timestamp() * 1000)  # naive means UTC
    except ValueError:
        raise typer.BadParameter("use an ISO 8601 date, e.g. 2026-01-01") from None


@app.command()
def sandbox(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0 picks a free one).")] = 8787,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic data.")] = 42,
    shipments: Annotated[int, typer.Option(min=0, help="Shipments of history.")] = 5_000,
    plan: Annotated[
        str, typer.Option(help=f"Plan whose limits apply: {', '.join(PLANS)}.")
    ] = "pro",
    order: Annotated[str, typer.Option(help="List order: asc or desc by updated_at.")] = "asc",
    start: Annotated[
        str | None, typer.Option(help="Sandbox clock start, ISO date (default: today, 00:00 UTC).")
    ] = None,
    no_limits: Annotated[
        bool, typer.Option("--no-limits", help="Answer every request: no rate or daily limits.")
    ] = False,
    workspaces: Annotated[
        int,
        typer.Option(
            min=1, max=20, help="Workspaces served, each with its own key and data; ids collide."
        ),
    ] = 1,
) -> None:
    """Serve the local sandbox of the signing API v1 until Ctrl-C."""
    from sandbox import PLAN_REQUESTS_PER_MINUTE, SandboxConfig, Store, bind, serve_forever

    if plan not in PLAN_REQUESTS_PER_MINUTE:
        raise typer.BadParameter(f"plan must be one of {', '.join(PLAN_REQUESTS_PER_MINUTE)}")
    if order not in ("asc", "desc"):
        raise typer.BadParameter("order must be asc or desc")
    config = SandboxConfig(
        seed=seed,
        shipments=shipments,
        plan=plan,
        order=order,  # type: ignore[arg-type]
        limits_enabled=not no_limits,
    )
    start_ms = _parse_start(start)
    if start_ms is not None:
        config.start_ms = start_ms
    try:
        sock = bind("127.0.0.1", port)
    except OSError as error:
        raise fail(f"cannot listen on 127.0.0.1:{port}: {error.strerror}") from None
    port = sock.getsockname()[1]
    output.info(f"Generating {shipments:,} shipments (seed {seed}) per workspace…")
    stores = [Store(c, position=n) for n, c in enumerate(config.workspaces(workspaces))]
    store = stores[0]
    base_url = f"http://127.0.0.1:{port}/v1"
    print(f"Sandbox of the signing API v1 at {base_url}")
    if len(stores) == 1:
        print(f"API key: {store.main_key.secret}")
        print("Point the pipeline at it with:")
        print(f"  export SOURCES__SIGNING__BASE_URL={base_url}")
        print(f"  export SOURCES__SIGNING__API_KEY={store.main_key.secret}")
    else:
        print(f"{len(stores)} workspaces; load them all with this in .dlt/secrets.toml:")
        print(f'  [sources.signing]\n  base_url = "{base_url}"')
        for n, each in enumerate(stores, start=1):
            print(f"  [sources.signing.workspaces.w{n}]  # {each.workspace.id}")
            print(f'  api_key = "{each.main_key.secret}"')
    print(f"OpenAPI document: http://127.0.0.1:{port}/openapi.json; admin: /_sandbox/state")
    sys.stdout.flush()
    output.info("Ctrl-C stops it.")
    serve_forever(stores, sock)


if __name__ == "__main__":
    app()
