"""What the CLI prints about a load: each workspace's load as it runs and ends and the summary
of a load, in the shape its reader needs (tables on stdout, one line per message on stderr,
JSON records under `--log-format json`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pipelines.configuration import WorkspaceEntry
from pipelines.console import output
from pipelines.console.output import PlainTable
from pipelines.console.progress import Progress
from pipelines.console.tables import out
from pipelines.load.run import LoadResult
from pipelines.load.workspaces import WorkspaceLoad
from pipelines.outcome import Outcome
from pipelines.webhooks.display import webhooks_line
from sources.signing import EVENTS_LIMIT, RunControl, RunStats, TableDeletions


class CliWatcher:
    """Each workspace's load as the CLI shows it: its run id on every line, a progress line
    while it runs; with several workspaces one line as each starts and ends, else the summary
    table."""

    def __init__(self, several: bool) -> None:
        self.several = several

    @contextlib.contextmanager
    def loading(self, entry: WorkspaceEntry, control: RunControl) -> Iterator[None]:
        output.set_run_id(control.run_id, entry.name)
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
    if loaded and not output.is_json() and not out.is_terminal:
        for name, rows in loaded.items():
            listed = ", ".join(f"{table} {count:,}" for table, count in sorted(rows.items()))
            output.info(f"workspace {name}: rows loaded: {listed or 'none (nothing changed)'}")
    elif loaded and not output.is_json():
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
            **stats.counters().as_dict(),
            seconds=round(seconds, 3),
            deletions={d.table: d.to_record() for d in result.deletions},
            workspace_id=result.workspace_id,
            workspace=result.workspace_name,
            missed_by_webhooks=result.missed_by_webhooks,
            brought_by_webhooks=result.brought_by_webhooks,
            schema_changes=result.schema_changes.to_record(),
        )
    elif not several and not out.is_terminal:
        # In a log, the summary is lines like the ones around it, each stamped.
        rows = ", ".join(f"{name} {count:,}" for name, count in sorted(result.rows.items()))
        output.info(f"rows loaded: {rows or 'none (nothing changed)'}")
        output.info(costs_line(stats, seconds))
        if result.deletions:
            output.info(deletions_line(result.deletions))
    elif not several:
        table = PlainTable("table", "rows loaded", title="Load summary")
        for name, count in sorted(result.rows.items()):
            table.add_row(name, f"{count:,}")
        if not result.rows:
            table.add_row("(nothing changed)", "0")
        out.print(table)
        out.print(costs_line(stats, seconds), highlight=False)
        if result.deletions:
            out.print(deletions_line(result.deletions), highlight=False)
    prefix = f"workspace {result.workspace_name}: " if several else ""
    if result.missed_by_webhooks is not None and not output.is_json():
        output.info(prefix + webhooks_line(result.missed_by_webhooks, result.brought_by_webhooks))
    if several and result.deletions and not output.is_json():
        output.info(prefix + deletions_line(result.deletions))
    if stats.truncated_trails:
        output.warning(
            f"{prefix}{stats.truncated_trails} audit trails were cut at the API's "
            f"{EVENTS_LIMIT} events (their oldest events are missing; flagged in the marts)"
        )
    for warning in stats.warnings:
        output.warning(prefix + warning)


def deletions_line(deletions: list[TableDeletions]) -> str:
    """What the run's checks for deleted records found and cost, per list, in one line."""
    parts = []
    for each in deletions:
        found = f"{len(each.found):,} gone, {len(each.marked):,} marked deleted"
        check = {None: "no check", "none": "no check due"}.get(each.check, f"{each.check} check")
        requests = f"{each.check_requests:,} request{'s' if each.check_requests != 1 else ''}"
        last = f"; last full check {each.full_check_at}" if each.full_check_at else ""
        again = f", {each.seen_again:,} listed again" if each.seen_again else ""
        parts.append(f"{each.table} {found}{again} ({check}, {requests}{last})")
    return "Deleted records: " + ", ".join(parts)
