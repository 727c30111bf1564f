"""`signing-etl status` as its readers need it: the operator's view per workspace (last success,
data as of, cursor lag, requests and 429s against the service's limits, recent failures and
stops with their reasons) as tables for people, as one JSON document for a monitor, and as a
freshness check whose exit code cron can alert on."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipelines.console import output
from pipelines.console.output import PlainTable
from pipelines.modeling.record import ModelBuild
from pipelines.raw.run_records import RunRecord
from pipelines.raw.schema_changes import SchemaChanges, held_back_line
from pipelines.status.health import DEFAULT_MAX_AGE, Health, duration, healths
from pipelines.status.read import RECENT_RUNS, Status, WorkspaceStatus
from pipelines.webhooks.display import webhooks_line
from pipelines.webhooks.inbox import InboxStatus
from sources.signing import EVENTS_LIMIT

out = output.stdout_console(lines=False)  # one line per print


def print_status(found: Status, warehouse: Path, now: datetime | None = None) -> None:
    """The last run, then per workspace who it is and how fresh, its recent runs with the
    reasons of failures and stops, its cursors and its rows."""
    now = now or datetime.now(UTC)
    if found.running_line:
        out.print(f"Now: {found.running_line}; what follows is the last published state")
    run = found.last_run
    out.print(f"Last run: {run_line(run)}" if run else "Last run: none recorded")
    out.print(output.printable(f"Models: {models_line(found.models)}"))
    workspaces = found.workspaces
    _print_operator_view(workspaces, now)
    _print_recent_runs(workspaces, now)
    _print_cursors(workspaces)
    _print_rows(workspaces, warehouse)
    _print_deletion_checks(workspaces)
    for workspace in workspaces:
        if workspace.truncated_trails:
            whose = f"{workspace.label}: audit" if len(workspaces) > 1 else "Audit"
            out.print(
                f"{whose} trails cut at the API's {EVENTS_LIMIT} events: "
                f"{workspace.truncated_trails:,} shipments (flagged in marts.fct_shipments)"
            )
        reconciled = workspace.webhooks_reconciled
        if reconciled is not None:
            whose = f"{workspace.label}: last" if len(workspaces) > 1 else "Last"
            out.print(f"{whose} load: {webhooks_line(*reconciled)}")
        if workspace.receiver is not None:
            whose = f"{workspace.label}: webhook" if len(workspaces) > 1 else "Webhook"
            out.print(output.printable(f"{whose} receiver: {receiver_line(workspace.receiver)}"))
    _print_schema_changes(workspaces)
    _print_privacy(found)


def _print_schema_changes(workspaces: list[WorkspaceStatus]) -> None:
    """What the newest run that found the service's shape changed found, per workspace."""
    for workspace in workspaces:
        run = workspace.last_schema_change
        if run is None:
            continue
        whose = f" of {workspace.label}" if len(workspaces) > 1 else ""
        out.print(
            output.printable(f"Schema changes{whose} (run {run.run_id}, {_when(_ended(run))}):")
        )
        for line in SchemaChanges.from_record(run.schema_changes).lines():
            out.print(output.printable(f"  {line}"))


def models_line(build: ModelBuild | None) -> str:
    """The last model build in one line: when, whether it built, the tests that warned."""
    if build is None:
        return "never built"
    when = _when(build.finished_at)
    if not build.success:
        return f"the last build failed ({when}): {build.first_error or 'see the dbt log'}"
    warned = (
        f"; {len(build.warned)} tests warned: {', '.join(build.warned)}" if build.warned else ""
    )
    return f"built {when}: {build.models_built} models, {build.tests_passed} tests passed{warned}"


def _print_privacy(found: Status) -> None:
    """The privacy policy each workspace's rows are under, and the erasures recorded."""
    several = len(found.workspaces) > 1
    for workspace in found.workspaces:
        policy = workspace.privacy.describe() if workspace.privacy else "keep (not recorded yet)"
        owner = f" of {workspace.label}" if several else ""
        out.print(output.printable(f"Privacy policy{owner}: {policy}"))
    if found.erasures:
        out.print(f"Erasures recorded: {found.erasures:,}")


def _print_operator_view(workspaces: list[WorkspaceStatus], now: datetime) -> None:
    who = PlainTable(
        "workspace",
        "id",
        "name at the service",
        "last run",
        "last success",
        "data as of",
        "cursor lag",
        "requests (429s), last run",
        title="Workspaces",
    )
    for workspace in workspaces:
        last, success = workspace.last_run, workspace.last_success
        who.add_row(
            workspace.label,
            workspace.workspace_id,
            workspace.name or "",
            f"{_when(last.started_at)}, {last.outcome}" if last else "none",
            f"{_when(success.finished_at or success.started_at)}" if success else "never",
            _when(workspace.newest_change) if workspace.newest_change else "",
            duration(workspace.cursor_lag),
            _requests(last),
        )
    out.print(who)


def _print_recent_runs(workspaces: list[WorkspaceStatus], now: datetime) -> None:
    runs = [(w, r) for w in workspaces for r in w.runs[:RECENT_RUNS]]
    if not runs:
        return
    table = PlainTable("started", "workspace", "outcome", "requests", "429s", title="Recent runs")
    for workspace, run in sorted(runs, key=lambda pair: pair[1].started_at, reverse=True)[:20]:
        table.add_row(
            _when(run.started_at),
            workspace.label,
            _outcome(run),
            f"{run.counters.requests:,}",
            f"{run.counters.throttled:,}",
        )
    out.print(table)


def _print_cursors(workspaces: list[WorkspaceStatus]) -> None:
    lists = list(dict.fromkeys(name for w in workspaces for name in w.cursors))
    if not lists:
        return
    cursors = PlainTable(
        "list", *(w.label for w in workspaces), title="Cursors (next run reads changes since)"
    )
    for name in lists:
        cursors.add_row(
            name,
            *(
                w.cursors.get(name, "") + ("  (pass interrupted)" if name in w.interrupted else "")
                for w in workspaces
            ),
        )
    out.print(cursors)


def _print_rows(workspaces: list[WorkspaceStatus], warehouse: Path) -> None:
    title = "raw.* rows per workspace" if len(workspaces) > 1 else f"raw.* in {warehouse}"
    counts = PlainTable("table", *(w.label for w in workspaces), title=title)
    tables = list(dict.fromkeys(t for w in workspaces for t in w.row_counts))
    for table in tables:
        counts.add_row(table, *(f"{w.row_counts.get(table, 0):,}" for w in workspaces))
    out.print(counts)


def _print_deletion_checks(workspaces: list[WorkspaceStatus]) -> None:
    """Per workspace and list: the last full check for deleted records (when, its requests,
    what it found) and the rows the warehouse holds marked deleted."""
    if not any(w.deletion_checks or w.deleted_rows for w in workspaces):
        return
    headers = ["list", "last full check", "its requests", "found gone", "marked in raw"]
    table = PlainTable("workspace", *headers, title="Deleted records")
    for workspace in workspaces:
        lists = list(dict.fromkeys([*workspace.deletion_checks, *workspace.deleted_rows]))
        for name in lists:
            check = workspace.deletion_checks.get(name)
            checked = bool(check and check.at)
            table.add_row(
                workspace.label,
                name,
                (check.at if check else None) or "never",
                f"{check.requests:,}" if check and checked else "",
                f"{check.found:,}" if check and checked else "",
                f"{workspace.deleted_rows.get(name, 0):,}",
            )
    out.print(table)


def _outcome(run: RunRecord) -> str:
    """`completed`, or `stopped (reason)` / `failed (reason)`."""
    return str(run.outcome) + (f" ({run.stop_reason})" if run.stop_reason else "")


def run_line(run: RunRecord) -> str:
    """One run in a line: who, when, how it ended and what it cost."""
    who = f"{run.workspace_name or run.workspace_id or '?'}, "
    cost = run.counters
    return (
        f"{who}{run.started_at:%Y-%m-%d %H:%M:%S %Z}, {_outcome(run)}, {cost.requests:,} "
        f"requests, {cost.throttled:,} 429s, {cost.waited_seconds:.1f} s waited for limits"
    )


def _requests(run: RunRecord | None) -> str:
    if run is None:
        return ""
    limits = ", ".join(f"{limit:,} per {scope}" for scope, limit in sorted(run.limits.items()))
    shown = f"{run.counters.requests:,} ({run.counters.throttled:,})"
    return f"{shown}; limits {limits}" if limits else shown


def _when(moment: datetime | None) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if moment else ""


# ---------------------------------------------------------------------- for monitors


def status_document(
    found: Status, now: datetime | None = None, max_age: timedelta = DEFAULT_MAX_AGE
) -> dict[str, Any]:
    """`status --format json`: every workspace's operator view, as a monitor reads it, with
    its health (`ok`, `stale`, `health`, `why`: what `--check` would say of it)."""
    now = now or datetime.now(UTC)
    health = healths(found, max_age, (), now)
    return {
        "warehouse": str(found.warehouse),
        "generated_at": now.isoformat(),
        "models": _models_document(found.models),
        "workspaces": [
            {
                **_workspace_document(w, now),
                "health": str(health[w.label].health),
                "ok": health[w.label].health is Health.OK,
                "stale": health[w.label].health is Health.STALE,
                "why": health[w.label].why or None,
            }
            for w in found.workspaces
        ],
        "erasures": found.erasures,
        "running": (
            {"pid": found.running.pid, "since": found.running.since, "what": found.running.what}
            if found.running
            else None
        ),
    }


def _workspace_document(workspace: WorkspaceStatus, now: datetime) -> dict[str, Any]:
    age, lag = workspace.age(now), workspace.cursor_lag
    return {
        "workspace": workspace.configured_as,
        "workspace_id": workspace.workspace_id or None,
        "name_at_service": workspace.name,
        "last_run": _run_document(workspace.last_run),
        "last_success": _run_document(workspace.last_success),
        "last_loaded_at": _iso(_ended(workspace.last_loaded)),
        "hours_since_loaded": round(age.total_seconds() / 3600, 3) if age else None,
        "data_as_of": _iso(workspace.newest_change),
        "cursor_lag_seconds": round(lag.total_seconds(), 3) if lag else None,
        "cursors": workspace.cursors,
        "interrupted": workspace.interrupted,
        "problems": [_run_document(run) for run in workspace.problems(now)],
        "rows": workspace.row_counts,
        "truncated_trails": workspace.truncated_trails,
        "deleted_rows": workspace.deleted_rows,
        "last_full_checks": {
            name: {"at": check.at, "requests": check.requests, "found": check.found}
            for name, check in workspace.deletion_checks.items()
        },
        "webhooks": _webhooks_document(workspace.webhooks_reconciled),
        "receiver": _receiver_document(workspace.receiver),
        "privacy_policy": workspace.privacy.describe() if workspace.privacy else None,
        "schema_changes": _schema_changes_document(workspace.last_schema_change),
    }


def _schema_changes_document(run: RunRecord | None) -> dict[str, Any] | None:
    """The newest run's changes to the service's shape, each held-back column with the
    setting that releases it (None: no change recorded)."""
    if run is None:
        return None
    changes = SchemaChanges.from_record(run.schema_changes)
    return {
        "run_id": run.run_id,
        "at": _iso(_ended(run)),
        **changes.to_record(),
        "held_back": [{"column": c, "release": held_back_line(c)} for c in changes.held_back],
    }


def _models_document(build: ModelBuild | None) -> dict[str, Any] | None:
    """The last model build, as a monitor reads it (None: never built)."""
    if build is None:
        return None
    return {
        "finished_at": _iso(build.finished_at),
        "success": build.success,
        "models_built": build.models_built,
        "models_errored": build.models_errored,
        "tests_passed": build.tests_passed,
        "tests_warned": build.tests_warned,
        "tests_errored": build.tests_errored,
        "errored": build.errored,
        "warned": build.warned,
        "first_error": build.first_error,
    }


def receiver_line(receiver: InboxStatus) -> str:
    """The webhook receiver's last drain of a workspace (why, when it did not complete) and
    the deliveries waiting, in one line."""
    drained = receiver.last_drain
    if drained is None:
        last = "no drain yet"
    else:
        last = (
            f"last drain {drained.outcome} ({drained.finished_at[:19]}Z, "
            f"{drained.deliveries:,} deliveries loaded)"
        )
        if drained.reason and drained.outcome != "completed":
            last += f": {drained.reason}"
    return f"{last}; {receiver.waiting:,} deliveries waiting"


def _receiver_document(receiver: InboxStatus | None) -> dict[str, Any] | None:
    """The receiver's side (None: no receiver ever kept a delivery for the workspace)."""
    if receiver is None:
        return None
    return {
        "last_drain": asdict(receiver.last_drain) if receiver.last_drain else None,
        "waiting": receiver.waiting,
        "oldest_waiting": receiver.oldest_waiting,
        "set_aside": receiver.set_aside,
        "loaded": receiver.loaded,
    }


def _webhooks_document(reconciled: tuple[int, int | None] | None) -> dict[str, Any] | None:
    """What the last load found of the webhooks' work (None: webhooks off)."""
    return None if reconciled is None else {"missed": reconciled[0], "brought": reconciled[1]}


def _run_document(run: RunRecord | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {
        "run_id": run.run_id,
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "outcome": str(run.outcome),
        "reason": run.stop_reason,
        **run.counters.as_dict(),
        "limits": run.limits,
        "daily_remaining": run.daily_remaining,
        "rows": run.rows,
    }


def _ended(run: RunRecord | None) -> datetime | None:
    return (run.finished_at or run.started_at) if run else None


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat() if moment else None


def print_document(found: Status, max_age: timedelta = DEFAULT_MAX_AGE) -> None:
    document = status_document(found, max_age=max_age)
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
