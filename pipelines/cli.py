"""`signing-etl`: the command line. It parses options, calls the scenario functions of the
pipeline and the sandbox, and turns their outcomes into output and exit codes; it holds no
logic of its own."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Annotated

import typer
from dlt.common.configuration.exceptions import ConfigFieldMissingException
from dlt.pipeline.exceptions import PipelineStepFailed
from rich.console import Console
from rich.progress import Progress as RichProgress
from rich.progress import ProgressColumn, SpinnerColumn, Task, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from pipelines import signing_pipeline as pipeline
from pipelines.demo import DEMO_WAREHOUSE, EXAMPLE_QUERIES, headline, run_demo
from pipelines.models import ModelsResult, build_models
from sandbox import PLAN_REQUESTS_PER_MINUTE, SandboxConfig, Store, bind, serve_forever
from sources.signing import RunStats, SigningAPIError, parse_iso

EX_TEMPFAIL = 75  # stopped early on purpose; the next run continues (sysexits.h)

app = typer.Typer(
    help="Load an electronic signing service into an analytics warehouse.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


@app.callback()
def main() -> None:
    """Load an electronic signing service into an analytics warehouse."""


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print a one-line reason on stderr and leave with `code`."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def load(
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file.")] = (
        pipeline.DEFAULT_WAREHOUSE
    ),
    since: Annotated[
        str | None, typer.Option(help="First run only: start at this ISO time, not the beginning.")
    ] = None,
    full_refresh: Annotated[
        bool, typer.Option("--full-refresh", help="Drop the raw tables and state; reload all.")
    ] = False,
    resources: Annotated[
        str | None,
        typer.Option(help=f"Comma-separated subset of: {', '.join(pipeline.RESOURCES)}."),
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option(min=1, help="Stop cleanly after this many requests (exit 75).")
    ] = None,
    destination: Annotated[
        str, typer.Option(help="Any dlt destination; its credentials come from dlt config.")
    ] = "duckdb",
    no_models: Annotated[bool, typer.Option("--no-models", help="Skip the dbt models.")] = False,
) -> None:
    """Run one incremental sync into the warehouse (then the models).

    Exit 0: done. Exit 75: stopped early on purpose (daily limit or --max-requests); what was
    fetched is loaded and the next run continues. Other non-zero: failed (reason on stderr).
    """
    if since is not None:
        try:
            parse_iso(since)
        except ValueError:
            raise fail(f"--since {since!r} is not an ISO 8601 time (e.g. 2026-01-01)") from None
    chosen = [r.strip() for r in resources.split(",") if r.strip()] if resources else None
    stats = RunStats()
    started = time.monotonic()
    with Progress(stats):
        try:
            result = pipeline.load_incremental(
                duckdb,
                since=since,
                full_refresh=full_refresh,
                resources=chosen,
                max_requests=max_requests,
                destination=destination,
                stats=stats,
            )
        except pipeline.AlreadyRunning as error:
            raise fail(str(error)) from None
        except ConfigFieldMissingException as error:
            raise fail(_missing_config(error)) from None
        except PipelineStepFailed as error:
            raise fail(_reason(error)) from None
        except (SigningAPIError, ValueError) as error:
            raise fail(str(error)) from None
    _summary(result, time.monotonic() - started)
    if not no_models and destination == "duckdb":
        _build_models(duckdb)  # also after an early stop: the marts show what is loaded
    if result.stopped:
        err.print(f"[yellow]stopped early:[/] {result.stopped}", highlight=False, soft_wrap=True)
        raise typer.Exit(EX_TEMPFAIL)


@app.command()
def models(
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file.")] = (
        pipeline.DEFAULT_WAREHOUSE
    ),
    select: Annotated[str | None, typer.Option(help="dbt selection, e.g. marts.")] = None,
) -> None:
    """Rebuild the dbt models (staging views, marts tables) on the loaded raw data."""
    _build_models(duckdb, select)


def _build_models(warehouse: Path, select: str | None = None) -> ModelsResult:
    """Run dbt; a failure is one line on stderr and exit 1, and the raw data stays as loaded."""
    if not warehouse.exists():
        raise fail(f"no warehouse at {warehouse}; run `signing-etl load` first")
    err.print("Building the models (dbt)…", highlight=False)
    result = build_models(warehouse, select=select)
    if not result.success:
        raise fail(f"models failed (raw data is loaded and kept): {result.summary}")
    out.print(result.summary, highlight=False)
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
            say=lambda text: err.print(text, highlight=False),
        )
    except (SigningAPIError, PipelineStepFailed, pipeline.AlreadyRunning) as error:
        raise fail(
            _reason(error) if isinstance(error, PipelineStepFailed) else str(error)
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
) -> None:
    """Run the funnel notebook on the warehouse's marts and write a self-contained HTML report."""
    out.print(_write_report(duckdb, out_dir).resolve(), highlight=False, soft_wrap=True)


def _write_report(warehouse: Path, out_dir: Path | None = None) -> Path:
    """Write the report (to `reports/` by default); a failure is one line on stderr, exit 1."""
    # Imported here: the notebook machinery takes half a second that other commands don't need.
    from pipelines.report import DEFAULT_REPORTS_DIR, ReportError, write_report

    err.print("Writing the report (runs notebooks/signing_funnel.ipynb)…", highlight=False)
    try:
        return write_report(warehouse, out_dir or DEFAULT_REPORTS_DIR)
    except ReportError as error:
        raise fail(f"report: {error}") from None


@app.command()
def status(
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file.")] = (
        pipeline.DEFAULT_WAREHOUSE
    ),
) -> None:
    """Show the last run, the cursors and the row counts of a warehouse."""
    try:
        found = pipeline.status(duckdb)
    except FileNotFoundError as error:
        raise fail(str(error)) from None
    except Exception as error:  # a locked or foreign file: say so in one line
        raise fail(f"cannot read {duckdb}: {error}") from None
    run = found.last_run
    if run:
        outcome = run["outcome"] + (f" ({run['stop_reason']})" if run.get("stop_reason") else "")
        out.print(
            f"Last run: {run['started_at']:%Y-%m-%d %H:%M:%S %Z}, {outcome}, "
            f"{run['requests']} requests, {run['throttled']} 429s, "
            f"{run['waited_seconds']:.1f} s waited for limits"
        )
    else:
        out.print("Last run: none recorded")
    cursors = Table("list", "next run reads changes since", title="Cursors")
    for name, since in found.cursors.items():
        cursors.add_row(name, since + ("  (pass interrupted)" if name in found.interrupted else ""))
    out.print(cursors)
    counts = Table("table", "rows", title=f"raw.* in {duckdb}")
    for table, count in found.row_counts.items():
        counts.add_row(table, f"{count:,}")
    out.print(counts)


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run, read-only.")],
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file.")] = (
        pipeline.DEFAULT_WAREHOUSE
    ),
) -> None:
    """Run a read-only SQL query on the warehouse and print the result as a table."""
    import duckdb as duck

    if not duckdb.exists():
        raise fail(f"no warehouse at {duckdb}")
    try:
        with duck.connect(str(duckdb), read_only=True) as connection:
            cursor = connection.execute(query)
            names = [d[0] for d in cursor.description or []]
            rows = cursor.fetchmany(1000)
    except duck.Error as error:
        raise fail(str(error).splitlines()[0]) from None
    table = Table(*names)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    out.print(table)


def _summary(result: pipeline.LoadResult, seconds: float) -> None:
    stats = result.stats
    table = Table("table", "rows loaded", title="Load summary")
    for name, count in sorted(result.rows.items()):
        table.add_row(name, f"{count:,}")
    if not result.rows:
        table.add_row("(nothing changed)", "0")
    out.print(table)
    out.print(
        f"{stats.requests:,} requests, {stats.throttled} answered 429, {stats.retries} "
        f"retried, {stats.waited_seconds:.1f} s waited for limits, {seconds:.1f} s in all"
    )


def _missing_config(error: ConfigFieldMissingException) -> str:
    fields = ", ".join(error.fields)
    return (
        f"missing configuration: {fields}; set SOURCES__SIGNING__API_KEY and "
        "SOURCES__SIGNING__BASE_URL (or .dlt/secrets.toml, .dlt/config.toml)"
    )


def _reason(error: PipelineStepFailed) -> str:
    """The innermost known cause of a failed dlt step, in one line."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, SigningAPIError | ConfigFieldMissingException):
            if isinstance(cause, ConfigFieldMissingException):
                return _missing_config(cause)
            return str(cause)
        cause = cause.__cause__ or cause.__context__ or getattr(cause, "exception", None)
    first_line = str(error.exception).splitlines()[0] if str(error.exception) else ""
    return f"the {error.step} step failed: {type(error.exception).__name__}: {first_line}"


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
        if err.is_terminal:
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
            self._thread = threading.Thread(target=self._log_lines, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._live is not None:
            self._live.stop()
        if self._thread is not None:
            self._thread.join()

    def _log_lines(self) -> None:
        while not self._done.wait(15.0):
            elapsed = time.monotonic() - self._started
            sys.stderr.write(f"{elapsed:5.0f} s  {_counts_line(self._stats)}\n")
            sys.stderr.flush()


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
        str, typer.Option(help=f"Plan whose limits apply: {', '.join(PLAN_REQUESTS_PER_MINUTE)}.")
    ] = "pro",
    order: Annotated[str, typer.Option(help="List order: asc or desc by updated_at.")] = "asc",
    start: Annotated[
        str | None, typer.Option(help="Sandbox clock start, ISO date (default: today, 00:00 UTC).")
    ] = None,
    no_limits: Annotated[
        bool, typer.Option("--no-limits", help="Answer every request: no rate or daily limits.")
    ] = False,
) -> None:
    """Serve the local sandbox of the signing API v1 until Ctrl-C."""
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
    err.print(f"Generating {shipments:,} shipments (seed {seed})…", highlight=False)
    store = Store(config)
    base_url = f"http://127.0.0.1:{port}/v1"
    print(f"Sandbox of the signing API v1 at {base_url}")
    print(f"API key: {store.main_key.secret}")
    print("Point the pipeline at it with:")
    print(f"  export SOURCES__SIGNING__BASE_URL={base_url}")
    print(f"  export SOURCES__SIGNING__API_KEY={store.main_key.secret}")
    print(f"OpenAPI document: http://127.0.0.1:{port}/openapi.json; admin: /_sandbox/state")
    sys.stdout.flush()
    err.print("Ctrl-C stops it.")
    serve_forever(store, sock)


if __name__ == "__main__":
    app()
