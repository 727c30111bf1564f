"""Loading configured workspaces: one at a time or side by side, with the rule for when to stop,
for the CLI and the Dagster assets alike. What the caller shows while a workspace loads and
when it ends is its own (`LoadWatcher`); how each load ended is a `WorkspaceLoad`, never an
exception, so one workspace's failure does not keep the others from loading.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from pipelines.configuration import WorkspaceEntry
from pipelines.errors import (
    EXPECTED_FAILURES,
    WarehouseError,
    exit_code_of,
    failure_reason,
    is_transient,
)
from pipelines.load.run import LoadOptions, LoadResult, load_incremental
from pipelines.load.signals import stop_on_signals
from pipelines.outcome import Outcome, is_signal
from pipelines.warehouse import Warehouse
from sources.signing import RunControl, RunStopped

# What ends a run of several workspaces (`fatal`): the warehouse itself, which no other
# workspace could load past either (a busy or lost workspace lock is one workspace's). A broken
# setting is not: each workspace meets it (or not: settings may be a workspace's own) and its
# run records it.
FATAL_FAILURES: tuple[type[BaseException], ...] = (WarehouseError,)


@dataclass
class WorkspaceLoad:
    """How one workspace's load ended, as the CLI exits for it: its code and one-line reason,
    what was loaded (None when it ended before loading anything), and `fatal` when no other
    workspace can load either (a locked DuckDB file, an unusable warehouse; not one
    workspace's busy or lost lock, nor a setting, which each workspace's run records)."""

    entry: WorkspaceEntry
    code: int
    reason: str | None = None
    result: LoadResult | None = None
    seconds: float = 0.0
    fatal: bool = False
    transient: bool = False  # failed on the database's passing conflict: a retry may cure it

    @property
    def outcome(self) -> Outcome:
        return Outcome.from_exit_code(self.code)

    @property
    def failure_line(self) -> str:
        """The reason, and what became of what was fetched when the load got that far."""
        if self.result is None:
            return str(self.reason)
        return f"{self.reason}; what was fetched is loaded, the next run continues"


class LoadWatcher(Protocol):
    """What the caller shows of each workspace's load: around it, and once it has ended."""

    def loading(self, entry: WorkspaceEntry, control: RunControl) -> AbstractContextManager[None]:
        """Entered in the load's own thread while it runs (a progress line, say)."""
        ...

    def ended(self, load: WorkspaceLoad) -> None: ...


class _Silent:
    def loading(self, entry: WorkspaceEntry, control: RunControl) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def ended(self, load: WorkspaceLoad) -> None:
        pass


def load_workspace(
    entry: WorkspaceEntry,
    warehouse: Warehouse,
    control: RunControl,
    options: LoadOptions | None = None,
) -> WorkspaceLoad:
    """One workspace's incremental load. An error a load ends with is an outcome with its
    one-line reason, not an exception; any other exception is a bug and propagates."""
    started = time.monotonic()
    try:
        result = load_incremental(
            warehouse,
            options,
            control=control,
            workspace_name=entry.name,
            settings=entry.settings,  # resolved by the run: a bad setting is on its record
        )
    except FATAL_FAILURES as error:  # a busy warehouse (another run's) is a stop, not a failure
        fatal = not isinstance(error, WarehouseError) or error.ends_every_workspace
        return WorkspaceLoad(entry, exit_code_of(error), failure_reason(error), fatal=fatal)
    except RunStopped as error:  # at the first request: nothing fetched, nothing written
        return WorkspaceLoad(entry, exit_code_of(error), str(error))
    except EXPECTED_FAILURES as error:  # recorded by the run; here its one line
        transient = is_transient(error)
        return WorkspaceLoad(entry, exit_code_of(error), failure_reason(error), transient=transient)
    seconds = time.monotonic() - started
    return WorkspaceLoad(entry, result.exit_code, result.stopped, result, seconds)


def in_turns(
    entries: Sequence[WorkspaceEntry], last_attempts: Mapping[str, datetime]
) -> list[WorkspaceEntry]:
    """The workspaces in turn: those whose last run began longest ago (or never) first, so that
    after a stop the next run starts with the workspaces the stop kept from loading, and no
    workspace waits behind another for ever. Ties keep the configuration's order."""
    never = datetime.min.replace(tzinfo=UTC)
    return sorted(entries, key=lambda entry: last_attempts.get(entry.name, never))


def load_workspaces(
    entries: Sequence[WorkspaceEntry],
    warehouse: Warehouse,
    options: LoadOptions | None = None,
    *,
    parallel: int = 1,
    watcher: LoadWatcher | None = None,
) -> list[WorkspaceLoad]:
    """Each workspace's load, in turn or up to `parallel` at once, as they ended.

    One after another, a signal, or a failure of the warehouse itself, leaves the rest for the
    next run; a workspace whose lock another run holds (or that lost it) stops alone, and the
    others go on, as they do past a broken setting: each workspace's run meets it (or not) and
    is recorded as failed, where `status` reads it.
    Side by side, each runs in a thread with its own pipeline, key and pacer; SIGINT/SIGTERM
    stop every one of them cleanly (signals reach only the main thread), and workspaces not
    started by then wait for the next run."""
    watch = watcher or _Silent()
    if parallel > 1 and len(entries) > 1:
        return _side_by_side(entries, warehouse, options, min(parallel, len(entries)), watch)
    loads: list[WorkspaceLoad] = []
    for entry in entries:
        loads.append(_watched(entry, warehouse, RunControl(), options, watch))
        if is_signal(loads[-1].code) or loads[-1].fatal:
            break
    return loads


def _side_by_side(
    entries: Sequence[WorkspaceEntry],
    warehouse: Warehouse,
    options: LoadOptions | None,
    width: int,
    watch: LoadWatcher,
) -> list[WorkspaceLoad]:
    controls = {entry.name: RunControl() for entry in entries}
    group = _ControlGroup(list(controls.values()))

    def one(entry: WorkspaceEntry) -> WorkspaceLoad | None:
        if group.stopped:
            return None
        return _watched(entry, warehouse, controls[entry.name], options, watch)

    with stop_on_signals(group), ThreadPoolExecutor(width) as pool:
        results = list(pool.map(one, entries))
    return [load for load in results if load is not None]


def _watched(
    entry: WorkspaceEntry,
    warehouse: Warehouse,
    control: RunControl,
    options: LoadOptions | None,
    watch: LoadWatcher,
) -> WorkspaceLoad:
    with watch.loading(entry, control):
        load = load_workspace(entry, warehouse, control, options)
    watch.ended(load)
    return load


class _ControlGroup:
    """Several runs stopped as one, by a signal."""

    def __init__(self, controls: list[RunControl]) -> None:
        self._controls = controls
        self.stopped = False

    def stop(self, reason: RunStopped) -> None:
        self.stopped = True
        for control in self._controls:
            control.stop(reason)
