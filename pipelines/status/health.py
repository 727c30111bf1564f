"""A workspace's health, defined once: what `status --check` exits on, what `--format json`
says per workspace (`ok`, `stale`, `health`, `why`), and what an alert tells when it changes.

In order: nothing loaded within the allowed age (or never) is `stale`; a last run that failed
or stopped before loading anything (another run held the warehouse, say), or a last model
build that failed (the marts of every workspace then lag the raw data), is `failed`; else
`ok`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pipelines.outcome import Outcome
from pipelines.status.read import Status, WorkspaceStatus

DEFAULT_MAX_AGE = timedelta(hours=26)  # a daily load, and two hours to spare


class Health(StrEnum):
    """A workspace's health as a check and an alert name it."""

    OK = "ok"
    FAILED = "failed"  # its last run, or the last model build, failed
    STALE = "stale"  # nothing loaded within the allowed age (or never)


@dataclass(frozen=True)
class WorkspaceHealth:
    """One workspace's health and why, as one phrase (empty when ok)."""

    workspace: str
    health: Health
    why: str = ""

    @property
    def line(self) -> str:
        """The check's line for it."""
        return f"workspace {self.workspace}: {self.why}"


def healths(
    found: Status, max_age: timedelta, configured: Iterable[str], now: datetime
) -> dict[str, WorkspaceHealth]:
    """Each workspace of the warehouse and each configured one (never loaded: stale)."""
    models = found.models
    models_failed = (
        f"the last model build failed: {models.first_error or 'see the dbt log'}"
        if models is not None and not models.success
        else None
    )
    result = {w.label: _health(w, max_age, now, models_failed) for w in found.workspaces}
    for name in configured:
        result.setdefault(name, WorkspaceHealth(name, Health.STALE, "never loaded"))
    return result


def _health(
    workspace: WorkspaceStatus, max_age: timedelta, now: datetime, models_failed: str | None
) -> WorkspaceHealth:
    last, age = workspace.last_run, workspace.age(now)
    label = workspace.label
    if age is None or age > max_age:
        since = f"{duration(age)} ago" if age else "never"
        why = f"; last run {last.outcome}: {last.stop_reason}" if last and last.stop_reason else ""
        return WorkspaceHealth(label, Health.STALE, f"last loaded {since}{why}")
    reason = (last.stop_reason or "no reason recorded") if last else ""
    if last is not None and last.outcome is Outcome.FAILED:
        return WorkspaceHealth(label, Health.FAILED, f"last run failed: {reason}")
    if last is not None and last.outcome is Outcome.STOPPED and not sum(last.rows.values()):
        # Busy (another run held the warehouse), a daily limit reached at once: nothing new.
        return WorkspaceHealth(
            label, Health.FAILED, f"last run stopped before loading anything: {reason}"
        )
    if models_failed:
        return WorkspaceHealth(label, Health.FAILED, models_failed)
    return WorkspaceHealth(label, Health.OK)


def duration(span: timedelta | None) -> str:
    """A span as an operator reads it: seconds, minutes or hours."""
    if span is None:
        return ""
    seconds = span.total_seconds()
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds / 3600:,.1f} h"
