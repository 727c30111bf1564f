"""What the CLI prints about loads and warehouses: each workspace's load as it runs and ends,
the summary of a load, `status`, and query results, in the shape its reader needs (tables on
stdout, one line per message on stderr, JSON records under `--log-format json`)."""

from __future__ import annotations

import contextlib
import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipelines import output
from pipelines.outcome import Outcome
from pipelines.output import PlainTable
from pipelines.progress import Progress
from pipelines.reading import Status, WorkspaceStatus
from pipelines.run_records import RunRecord
from pipelines.signing_pipeline import LoadResult
from pipelines.workspace_loads import WorkspaceLoad
from pipelines.workspaces import WorkspaceEntry
from sources.signing import EVENTS_LIMIT, RunControl, RunStats

out = output.stdout_console()


class CliWatcher:
    """Each workspace's load as the CLI shows it: its run id on every line, a progress line
    while it runs; with several workspaces one line as each starts and ends, else the summary
    table."""

    def __init__(self, several: bool) -> None:
        self.several = several

    @contextlib.contextmanager
    def loading(self, entry: WorkspaceEntry, control: RunControl) -> Iterator[None]:
        output.set_run_id(control.run_id)
        if self.several:
            output.info(f"workspace {entry.name}: loading from {entry.base_url}")
        with Progress(control.stats):
            yield

    def ended(self, load: WorkspaceLoad) -> None:
        if load.result is not None:
            load_summary(load.result, load.seconds, self.several)
        if self.several:
            _say_outcome(load)


def _say_outcome(load: WorkspaceLoad) -> None:
    """One line per workspace as it ends, at the level its outcome deserves."""
    name = load.entry.name
    costs = f", {costs_line(load.result.stats, load.seconds)}" if load.result else ""
    if load.outcome is Outcome.COMPLETED:
        output.info(f"workspace {name}: completed{costs}")
    elif load.outcome is Outcome.FAILED:
        output.error(f"workspace {name}: failed: {load.reason}{costs}")
    else:
        line = f"workspace {name}: stopped early: {load.reason}{costs}"
        output.warning(line, exit_code=load.code)


def workspaces_summary(loads: list[WorkspaceLoad], total: int) -> None:
    """Rows loaded per table and workspace, then one line with each workspace's outcome (and
    those a signal kept from starting)."""
    loaded = {load.entry.name: load.result.rows for load in loads if load.result is not None}
    if loaded and not output.is_json():
        table = PlainTable("table", *loaded, title="Load summary")
        names = sorted({table for rows in loaded.values() for table in rows})
        for name in names or ["(nothing changed)"]:
            table.add_row(name, *(f"{rows.get(name, 0):,}" for rows in loaded.values()))
        out.print(table)
    parts = [f"{load.entry.name} {load.outcome}" for load in loads]
    if len(loads) < total:
        parts.append(f"{total - len(loads)} not started")
    output.info(f"Workspaces: {', '.join(parts)}")


def costs_line(stats: RunStats, seconds: float) -> str:
    return (
        f"{stats.requests:,} requests, {stats.throttled} answered 429, {stats.retries} "
        f"retried, {stats.failed_attempts} got no answer, {stats.waited_seconds:.1f} s "
        f"waited for limits, {stats.request_seconds:.1f} s with requests on the wire, "
        f"{seconds:.1f} s in all"
    )


def load_summary(result: LoadResult, seconds: float, several: bool = False) -> None:
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
            missed_by_webhooks=result.missed_by_webhooks,
            brought_by_webhooks=result.brought_by_webhooks,
        )
    elif not several:
        table = PlainTable("table", "rows loaded", title="Load summary")
        for name, count in sorted(result.rows.items()):
            table.add_row(name, f"{count:,}")
        if not result.rows:
            table.add_row("(nothing changed)", "0")
        out.print(table)
        out.print(costs_line(stats, seconds), highlight=False)
    prefix = f"workspace {result.workspace_name}: " if several else ""
    if result.missed_by_webhooks is not None and not output.is_json():
        output.info(prefix + webhooks_line(result.missed_by_webhooks, result.brought_by_webhooks))
    if stats.truncated_trails:
        output.warning(
            f"{prefix}{stats.truncated_trails} audit trails were cut at the API's "
            f"{EVENTS_LIMIT} events (their oldest events are missing; flagged in the marts)"
        )
    for warning in stats.warnings:
        output.warning(prefix + warning)


def webhooks_line(missed: int, brought: int | None) -> str:
    """What a load found of the webhooks' work: the changes they missed, which it loaded."""
    return (
        f"webhooks: {missed:,} changed shipments and contacts had been missed by them (loaded "
        f"now), {brought or 0:,} had come by webhook"
    )


# ---------------------------------------------------------------------- status


def print_status(found: Status, warehouse: Path) -> None:
    """The last run, the recent ones, and each workspace's cursors and rows."""
    run = found.last_run
    out.print(f"Last run: {run_line(run)}" if run else "Last run: none recorded", highlight=False)
    several = len(found.workspaces) > 1
    if len(found.runs) > 1:
        columns = ["started", *(["workspace"] if several else []), "outcome", "requests", "429s"]
        runs = PlainTable(*columns, title="Recent runs")
        for earlier in found.runs:
            runs.add_row(
                f"{earlier.started_at:%Y-%m-%d %H:%M:%S}",
                *([_run_workspace(earlier)] if several else []),
                _outcome(earlier),
                f"{earlier.requests:,}",
                str(earlier.throttled),
            )
        out.print(runs)
    if several:
        _print_workspaces(found.workspaces)
    else:
        for workspace in found.workspaces:
            _print_workspace(workspace, warehouse)
    for workspace in found.workspaces:
        reconciled = workspace.webhooks_reconciled
        if reconciled is not None:
            who = f"{_label(workspace)}: " if several else ""
            out.print(f"{who}last load: {webhooks_line(*reconciled)}", highlight=False)


def _label(workspace: WorkspaceStatus) -> str:
    """The configured name of a workspace, or its id before any run recorded a name."""
    return workspace.configured_as or workspace.workspace_id


def _print_workspaces(workspaces: list[WorkspaceStatus]) -> None:
    """Several workspaces side by side: who they are, their cursors, their rows."""
    who = PlainTable("workspace", "id", "name at the service", "last run", title="Workspaces")
    for workspace in workspaces:
        last = workspace.last_run
        who.add_row(
            _label(workspace),
            workspace.workspace_id,
            workspace.name or "",
            f"{last.started_at:%Y-%m-%d %H:%M:%S}, {_outcome(last)}" if last else "none",
        )
    out.print(who)
    lists = list(dict.fromkeys(name for w in workspaces for name in w.cursors))
    cursors = PlainTable("workspace", *lists, title="Cursors (next run reads changes since)")
    for workspace in workspaces:
        cells = [
            workspace.cursors.get(name, "")
            + (" (interrupted)" if name in workspace.interrupted else "")
            for name in lists
        ]
        cursors.add_row(_label(workspace), *cells)
    out.print(cursors)
    counts = PlainTable("table", *(_label(w) for w in workspaces), title="raw.* rows per workspace")
    tables = list(dict.fromkeys(t for w in workspaces for t in w.row_counts))
    for table in tables:
        counts.add_row(table, *(f"{w.row_counts.get(table, 0):,}" for w in workspaces))
    out.print(counts)
    for workspace in workspaces:
        if workspace.truncated_trails:
            out.print(
                f"{_label(workspace)}: audit trails cut at the API's {EVENTS_LIMIT} events: "
                f"{workspace.truncated_trails:,} shipments (flagged in marts.fct_shipments)"
            )


def _run_workspace(run: RunRecord) -> str:
    return str(run.workspace_name or run.workspace_id or "?")


def _print_workspace(workspace: WorkspaceStatus, warehouse: Path) -> None:
    """The one workspace's cursors and rows, as before workspaces were several."""
    cursors = PlainTable("list", "next run reads changes since", title="Cursors")
    for name, since in workspace.cursors.items():
        interrupted = "  (pass interrupted)" if name in workspace.interrupted else ""
        cursors.add_row(name, since + interrupted)
    out.print(cursors)
    if workspace.truncated_trails:
        out.print(
            f"Audit trails cut at the API's {EVENTS_LIMIT} events: "
            f"{workspace.truncated_trails:,} shipments (flagged in marts.fct_shipments)"
        )
    counts = PlainTable("table", "rows", title=f"raw.* in {warehouse}")
    for table, count in workspace.row_counts.items():
        counts.add_row(table, f"{count:,}")
    out.print(counts)


def _outcome(run: RunRecord) -> str:
    """`completed`, or `stopped (reason)` / `failed (reason)`."""
    return str(run.outcome) + (f" ({run.stop_reason})" if run.stop_reason else "")


def run_line(run: RunRecord) -> str:
    return (
        f"{run.started_at:%Y-%m-%d %H:%M:%S %Z}, {_outcome(run)}, {run.requests} "
        f"requests, {run.throttled} 429s, {run.waited_seconds:.1f} s waited for limits"
    )


# ---------------------------------------------------------------------- query results


def print_rows(names: list[str], rows: list[tuple[Any, ...]], output_format: str) -> None:
    """Rows as a table, as CSV (with a header), or as JSON lines, on stdout."""
    if output_format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([("" if v is None else v) for v in row] for row in rows)
    elif output_format == "json":
        for row in rows:
            sys.stdout.write(json.dumps(dict(zip(names, row, strict=True)), default=str) + "\n")
    else:
        table = PlainTable(*names)
        for row in rows:
            table.add_row(*row)
        out.print(table)
