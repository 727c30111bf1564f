"""`signing-etl`: the command line. It parses options, calls the scenario functions of the
pipeline and the sandbox, and turns their outcomes into output and exit codes; it holds no
logic of its own."""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from dlt.pipeline.exceptions import PipelineStepFailed
from rich.text import Text

from pipelines import output, sandbox_command
from pipelines.cli_common import build_models_or_fail, fail, warehouse_named
from pipelines.cli_options import (
    AllowMassDeleteOption,
    CheckOption,
    FullRefreshOption,
    LoadDestination,
    MaxAgeOption,
    MaxRequestsOption,
    ParallelOption,
    ReconcileOption,
    ResourcesOption,
    SinceOption,
    StatusFormat,
    WarehouseDestination,
    WarehouseFile,
    WorkspacesOption,
)
from pipelines.demo import DEMO_WAREHOUSE, EXAMPLE_QUERIES, headline, run_demo
from pipelines.errors import SigningEtlError, failure_reason
from pipelines.forget_command import forget
from pipelines.outcome import Outcome, is_signal, worst_exit_code
from pipelines.output import printable
from pipelines.reading import last_attempts
from pipelines.reading import status as read_warehouse_status
from pipelines.signing_pipeline import LoadOptions
from pipelines.status_view import print_document, print_status, stale_workspaces
from pipelines.views import CliWatcher, out, print_rows, workspaces_summary
from pipelines.warehouse import DEFAULT_DESTINATION, DEFAULT_WAREHOUSE, Warehouse
from pipelines.webhooks.cli import webhooks_app
from pipelines.workspace_loads import WorkspaceLoad, in_turns, load_workspaces
from pipelines.workspaces import WorkspaceEntry, choose, configured_workspaces
from sources.signing import SigningAPIError, chosen_resources, parse_iso

# dbt (pipelines.models) and the sandbox are imported where they are used: together they cost
# seconds of start-up that `load --no-models` and `status` don't need.

app = typer.Typer(
    help="Load an electronic signing service into an analytics warehouse.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help shows `[sources.signing.workspaces.<name>]` as written
)
app.add_typer(webhooks_app, name="webhooks")


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


@app.command()
def load(
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
    warehouse = warehouse_named(duckdb, destination)
    if parallel > 1 and not warehouse.takes_concurrent_writers:
        raise fail(
            "DuckDB takes one writer, so workspaces load one after another: --parallel needs "
            "a destination that takes concurrent writers, such as --destination postgres"
        )
    chosen = tuple(r.strip() for r in resources.split(",") if r.strip()) if resources else None
    entries = _workspaces_to_load(warehouse, workspace or [], chosen)
    options = LoadOptions(since, full_refresh, chosen, max_requests, reconcile, allow_mass_delete)
    several = len(entries) > 1
    loads = load_workspaces(
        entries, warehouse, options, parallel=parallel, watcher=CliWatcher(several)
    )
    if several:
        output.set_run_id(None)  # the lines about all workspaces belong to no one run
        workspaces_summary(loads, len(entries))
    elif loads[0].result is None:  # one workspace that loaded nothing: its line is the end
        _leave(loads[0])
    signalled = any(is_signal(load.code) for load in loads)
    if signalled and not no_models:
        output.warning("the models are not built after a signal; the next run builds them")
    elif not no_models and any(load.result for load in loads):
        build_models_or_fail(warehouse)  # after a stop on purpose too: marts of what is whole
    code = worst_exit_code(load.code for load in loads)
    if not several and code:
        _leave(loads[0])
    if code:
        raise typer.Exit(code)


def _workspaces_to_load(
    warehouse: Warehouse, named: list[str], resources: tuple[str, ...] | None
) -> list[WorkspaceEntry]:
    """The configured workspaces asked for, in turn when all are (the one whose last run
    began longest ago first); an unknown resource or workspace is one line, before any
    request."""
    try:
        if resources:
            chosen_resources(resources)
        entries = choose(configured_workspaces(), named)
    except (SigningEtlError, SigningAPIError) as error:
        raise fail(str(error)) from None
    if not named and len(entries) > 1:
        return in_turns(entries, last_attempts(warehouse))
    return entries


def _leave(load: WorkspaceLoad) -> NoReturn:
    """End a single workspace's load: a failure's one line, or a stop's warning and its code."""
    if load.outcome is Outcome.FAILED:
        raise fail(load.failure_line)
    output.warning(f"stopped early: {load.reason}", exit_code=load.code)
    raise typer.Exit(load.code)


@app.command()
def models(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    select: Annotated[str | None, typer.Option(help="dbt selection, e.g. marts.")] = None,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
) -> None:
    """Rebuild the dbt models (staging views, marts tables) on the loaded raw data."""
    build_models_or_fail(warehouse_named(duckdb, destination), select)


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
    warehouse = warehouse_named(duckdb)
    try:
        run_demo(warehouse, shipments=shipments, weeks=weeks, say=output.info)
    except (SigningEtlError, SigningAPIError, PipelineStepFailed) as error:
        raise fail(failure_reason(error)) from None
    build_models_or_fail(warehouse)
    out.print(Text.assemble("\n", ("Warehouse:", "bold"), f" {printable(str(warehouse.path))}"))
    out.print(headline(warehouse))
    out.print(
        f'\nTry these with `uv run signing-etl sql --duckdb {duckdb} "<query>"` '
        "(or in the duckdb CLI):"
    )
    for query in EXAMPLE_QUERIES:
        out.print(f"  {query}", highlight=False)
    report_path = _write_report(warehouse)
    out.print(f"\nDemo finished in {time.monotonic() - started:.0f} s.")
    out.print(
        Text.assemble(("Report:", "bold"), f" {printable(str(report_path.resolve()))}"),
        soft_wrap=True,
    )


@app.command()
def report(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
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
    destination: WarehouseDestination = DEFAULT_DESTINATION,
) -> None:
    """Run the funnel notebook on the warehouse's marts and write a self-contained HTML report."""
    path = _write_report(warehouse_named(duckdb, destination), out_dir, workspace)
    out.print(path.resolve(), highlight=False, soft_wrap=True)


def _write_report(
    warehouse: Warehouse, out_dir: Path | None = None, workspace: str | None = None
) -> Path:
    """Write the report (to `reports/` by default); a failure is one line on stderr, exit 1."""
    # Imported here: the notebook machinery takes half a second that other commands don't need.
    from pipelines.report import DEFAULT_REPORTS_DIR, write_report

    output.info("Writing the report (runs notebooks/signing_funnel.ipynb)…")
    try:
        chosen = _configured_workspace_id(warehouse, workspace) if workspace else None
        return write_report(warehouse, out_dir or DEFAULT_REPORTS_DIR, chosen)
    except SigningEtlError as error:
        raise fail(f"report: {error}") from None


def _configured_workspace_id(warehouse: Warehouse, workspace: str) -> str:
    """The workspace id a configured name (`--workspace` of `load`) was last loaded as, or
    `workspace` as given (an id or the service's name, which the report resolves)."""
    try:
        found = read_warehouse_status(warehouse)
    except Exception:  # the report names what is wrong with the warehouse
        return workspace
    named = [w.workspace_id for w in found.workspaces if w.configured_as == workspace]
    return named[0] if len(named) == 1 else workspace


@app.command()
def status(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
    output_format: StatusFormat = "table",
    check: CheckOption = False,
    max_age_hours: MaxAgeOption = 26.0,
) -> None:
    """Show each workspace of a warehouse as its operator needs it: last run and last success,
    how recent its data is, its cursors' lag, requests and 429s against the service's limits,
    failed and stopped runs of the last days with their reasons, cursors and rows. `--check`
    exits 1 naming the workspaces not loaded within `--max-age-hours`."""
    if output_format not in ("table", "json"):
        raise fail("--format must be table or json")
    warehouse = warehouse_named(duckdb, destination)
    try:
        found = read_warehouse_status(warehouse)
    except SigningEtlError as error:
        raise fail(str(error)) from None
    except Exception as error:  # a locked or foreign file: say so in one line
        raise fail(f"cannot read {duckdb}: {printable(str(error))}") from None
    if check:
        stale = stale_workspaces(found, timedelta(hours=max_age_hours), _configured_names())
        for line in stale:
            output.error(line)
        raise typer.Exit(1 if stale else 0)
    if output_format == "json":
        print_document(found)
    else:
        print_status(found, duckdb)


def _configured_names() -> list[str]:
    """The configured workspaces' names, or none when the configuration is incomplete (a
    check of the warehouse alone still runs)."""
    try:
        return [entry.name for entry in configured_workspaces()]
    except SigningEtlError:
        return []


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run, read-only.")],
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    output_format: Annotated[
        str, typer.Option("--format", help="table (for people), csv or json (one object a row).")
    ] = "table",
    limit: Annotated[int, typer.Option(min=1, help="Rows printed at most.")] = 1000,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
) -> None:
    """Run a read-only SQL query on the warehouse and print the result."""
    if output_format not in ("table", "csv", "json"):
        raise fail("--format must be table, csv or json")
    try:
        names, rows = warehouse_named(duckdb, destination).read_only_query(query, limit + 1)
    except SigningEtlError as error:
        raise fail(str(error)) from None
    except Exception as error:  # the database's own message, in one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise fail(first) from None
    cut = len(rows) > limit
    print_rows(names, rows[:limit], output_format)
    if cut:
        output.warning(f"the result has more than {limit:,} rows; the first {limit:,} are shown")


app.command("sandbox")(sandbox_command.sandbox)
app.command("sandbox-advance")(sandbox_command.sandbox_advance)


def run() -> None:
    """The console script `signing-etl`: `app`, with usage errors (an unknown option, a value
    of the wrong kind) said in the log format asked for, one line each, like every other
    message: a JSON log stays JSON, a cron log stays stamped."""
    words = sys.argv[1:]
    asked = next((words[i + 1] for i, word in enumerate(words[:-1]) if word == "--log-format"), "")
    asked = next((w.split("=", 1)[1] for w in words if w.startswith("--log-format=")), asked)
    output.configure("json" if asked == "json" else "text")
    try:
        code = app(args=words or ["--help"], standalone_mode=False)
    except typer.Exit as stop:
        code = stop.exit_code
    except typer.TyperException as error:  # a usage error: click's own, one line
        output.error(f"{printable(error.format_message())} (see --help)")
        code = error.exit_code
    except typer.Abort:
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


app.command()(forget)

if __name__ == "__main__":
    run()
