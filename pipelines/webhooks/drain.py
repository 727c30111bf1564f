"""Draining the inbox: a small load of just the records the waiting deliveries name.

For each configured workspace with deliveries waiting: the shipments they name are read by id
with their recipients, audit trail and filled-in fields, the contacts by id, once each however
many events name them, and merged into the same raw tables with the same keys as the
incremental load (`sources.signing.records.records_source`: resources of their own names, so the
incremental cursors never move). The deliveries themselves go to `raw.webhook_deliveries`.
Only once that load committed are the deliveries marked done; a drain that failed or was
stopped leaves them waiting, and the next one reads their records again (the merge makes that
harmless). A record the service will not serve by id (a redirect, another answer no retry
changes) does not hold up the rest: its deliveries are set aside with the reason (counted by
`webhooks status`), no drain takes them again, and the next load of the workspace, which reads
its changes from the lists, takes them.

Its rows are under the privacy policy the warehouse records and its erasures, read before each
drain (`LoadSteps`' gate), whatever the receiver's own settings say; a receiver without the
warehouse's hash key fails its drains in one line that names the setting, and the deliveries
wait.

A drain holds the warehouse as a load does (`Warehouse.writer`), as a brief hold: a scheduled
load that finds it waits for it to end, and a drain that finds a load running says it is busy
and is tried again later. Between drains nothing holds the DuckDB file, so analysts' reads work.
Brief it stays: a drain reads records for at most `HOLD_SECONDS` (half of what a load waits for
it), then loads what it read and marks done the deliveries whose records it read whole; the
rest wait for the next drain, which the receiver starts soon after (`DrainResult.more_waiting`),
so a backlog read at a slow key's pace lets a scheduled load in between. How many deliveries a
drain takes follows the pace (`DrainSizes`): what the key reads in a hold at first, halved
after a hold spent, so that a drain always reads some records whole.

With `marts`, the receiver's drains are followed by a refresh of the marts (`refresh_marts`),
under a brief hold of its own: each drain publishes raw first (a delivery marked done is in the
published raw), the marts follow seconds later. A failed or busy refresh is a warning (the rows
are loaded, the next build catches up), never a failed drain.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipelines.configuration import WorkspaceEntry
from pipelines.errors import (
    EXPECTED_FAILURES,
    AlreadyRunning,
    caused_by,
    exit_code_of,
    failure_reason,
)
from pipelines.outcome import Outcome
from pipelines.raw.pipeline import make_pipeline
from pipelines.raw.run_records import record_incomplete_shipments
from pipelines.raw.steps import LoadSteps
from pipelines.warehouse import BRIEF_HOLD_WAIT_SECONDS, Warehouse
from pipelines.webhooks.inbox import Delivery, DrainRecord, Inbox
from pipelines.webhooks.ledger import RECORD_TABLES, RowDigests
from pipelines.webhooks.secrets_file import now_utc, stamp
from pipelines.webhooks.stream import deliveries_resource
from sources.signing import (
    Interrupted,
    Pacing,
    RunControl,
    RunStopped,
    SigningConfiguration,
    connect,
    incomplete_shipments,
)
from sources.signing.records import records_source
from sources.signing.settings import BY_ID_RESOURCES, REQUESTS_PER_SECOND

BATCH = 5_000  # deliveries one drain of one workspace takes at most
HOLD = "webhook drain"  # how a drain names its brief hold of the warehouse
BUSY = "busy"  # the outcome of a drain that found a load running
# How long a drain reads records under its hold at most: half of what a load waits for it.
HOLD_SECONDS = BRIEF_HOLD_WAIT_SECONDS / 2


# Requests one named record costs at most in a drain: a shipment, its audit trail, its fields.
REQUESTS_PER_RECORD = 3


class HoldSpent(RunStopped):
    """The drain read records for as long as it may hold the warehouse: what it read is
    loaded, the deliveries of records it did not read whole wait for the next drain."""


class DrainSizes:
    """How many deliveries the next drain of each workspace takes. At first what the pace reads
    in a hold (`first`, if given); halved after a drain whose hold was spent (a key slower than
    its settings, a per-minute limit), since records are read breadth first and a batch too
    large for the hold reads none whole; doubled after a full batch read in time, up to
    `BATCH`. One is kept by the receiver for as long as it runs."""

    def __init__(self, first: int | None = None) -> None:
        self._first = first
        self._sizes: dict[str, int] = {}

    def size(self, workspace: str, pacing: Pacing | None, hold_seconds: float) -> int:
        """The deliveries the next drain of `workspace` takes."""
        if workspace in self._sizes:
            return self._sizes[workspace]
        if self._first is not None:
            return self._first
        rate = pacing.requests_per_second if pacing else REQUESTS_PER_SECOND
        return max(1, min(BATCH, int(rate * hold_seconds / REQUESTS_PER_RECORD)))

    def learn(self, result: DrainResult, batch: int) -> None:
        """After a drain that could take `batch` deliveries."""
        if result.left:
            took = result.deliveries + result.set_aside + result.left
            self._sizes[result.workspace] = max(1, took // 2)
        elif result.outcome == Outcome.COMPLETED and result.deliveries + result.set_aside >= batch:
            self._sizes[result.workspace] = min(BATCH, batch * 2)


@dataclass
class DrainResult:
    """What one drain of one workspace did."""

    workspace: str
    outcome: str  # completed, stopped, failed, or busy (a load held the warehouse)
    deliveries: int = 0  # deliveries loaded and marked done
    set_aside: int = 0  # deliveries whose record the service would not serve: the load's
    left: int = 0  # deliveries taken but left waiting: the hold was spent before their records
    more_waiting: bool = False  # deliveries wait for the next drain (left, past `batch`, new)
    records: int = 0  # shipments and contacts read
    requests: int = 0
    reason: str | None = None
    marts_seconds: float | None = None  # the marts were refreshed after it, in these seconds
    warnings: list[str] = field(default_factory=list)  # said by the receiver's log

    def line(self) -> str:
        """One line for the receiver's log."""
        what = ", ".join(
            _counted(count, name)
            for count, name in (
                (self.deliveries, "delivery loaded"),
                (self.set_aside, "delivery set aside"),
                (self.left, "delivery left for the next drain"),
                (self.records, "record read"),
                (self.requests, "request"),
            )
            if count or name != "delivery left for the next drain"  # said when there are some
        )
        said = f": {self.reason}" if self.reason else ""
        marts = (
            f"; marts refreshed in {self.marts_seconds:.1f} s"
            if self.marts_seconds is not None
            else ""
        )
        return f"workspace {self.workspace}: drain {self.outcome}{said} ({what}){marts}"


def _counted(count: int, name: str) -> str:
    """`1 delivery loaded`, `2 deliveries loaded`, `3 requests`."""
    if count == 1:
        return f"1 {name}"
    noun, _, rest = name.partition(" ")
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{count:,} {plural} {rest}".rstrip()


def drain(
    warehouse: Warehouse,
    entries: Sequence[WorkspaceEntry],
    inbox: Inbox,
    *,
    controls: Callable[[], RunControl] = RunControl,
    sizes: DrainSizes | None = None,
    pacing: Pacing | None = None,
    marts: bool = False,
    hold_seconds: float = HOLD_SECONDS,
) -> list[DrainResult]:
    """Drain each configured workspace that has deliveries waiting, one after another, each
    taking as many as `sizes` says; with `marts`, then refresh the marts when a drain loaded
    anything, all in one run of the warehouse (published once)."""
    waiting = inbox.waiting_workspaces()
    chosen = [entry for entry in entries if entry.name in waiting]
    if not chosen:
        return []
    sizes = sizes or DrainSizes()
    results = []
    for entry in chosen:
        batch = sizes.size(entry.name, pacing, hold_seconds)
        control = controls()
        result = drain_workspace(
            warehouse,
            entry,
            inbox,
            control=control,
            batch=batch,
            pacing=pacing,
            hold_seconds=hold_seconds,
        )
        sizes.learn(result, batch)
        results.append(result)
    if marts and any(r.deliveries for r in results):
        _refresh_marts(warehouse, results)
    return results


def _refresh_marts(warehouse: Warehouse, results: list[DrainResult]) -> None:
    """The marts rebuilt from raw as the drains left it; said on the drains that loaded."""
    from pipelines.modeling import refresh_marts  # dbt: only for receivers that refresh

    loaded = [r for r in results if r.deliveries]
    started = time.monotonic()
    try:
        refreshed = refresh_marts(warehouse, brief=HOLD)
    except EXPECTED_FAILURES as error:  # raw is loaded all the same, and published
        problem: str | None = failure_reason(error)
    else:
        if refreshed is None:
            return  # never modelled: no marts to refresh
        problem = None if refreshed.success else refreshed.summary
    for result in loaded:
        if problem is None:
            result.marts_seconds = time.monotonic() - started
        else:
            result.warnings.append(f"the marts were not refreshed: {problem}")


def drain_workspace(
    warehouse: Warehouse,
    entry: WorkspaceEntry,
    inbox: Inbox,
    *,
    control: RunControl,
    batch: int = BATCH,
    pacing: Pacing | None = None,
    hold_seconds: float = HOLD_SECONDS,
) -> DrainResult:
    """Load the records the waiting deliveries of one workspace name (at most `batch`
    deliveries, read for at most `hold_seconds`), then mark done the deliveries whose records
    were read whole; a failure is a result, not an exception. The source's settings are the
    entry's (`pacing` instead of the configured one, if given)."""
    started = stamp(now_utc())
    deliveries = inbox.waiting(entry.name, batch)
    result = DrainResult(entry.name, str(Outcome.COMPLETED))
    if not deliveries:
        return result
    try:
        settings = entry.settings().paced(pacing)
        _load(warehouse, settings, entry, inbox, deliveries, control, result, hold_seconds)
    except AlreadyRunning as error:
        result.outcome, result.reason = BUSY, str(error)
    except EXPECTED_FAILURES as error:
        # A drain the receiver's own stop cut short stopped; it did not fail. Nor did one that
        # lost its run lock (exit 75, as a load that lost it): its deliveries wait.
        stopping = isinstance(control.reason, Interrupted) and caused_by(error, control.reason)
        ended = Outcome.STOPPED if stopping else Outcome.from_exit_code(exit_code_of(error))
        result.outcome = str(ended)
        result.reason = failure_reason(error)
    finally:
        control.finish()
    if result.outcome == Outcome.COMPLETED and _stopped(control):
        result.outcome, result.reason = str(Outcome.STOPPED), str(control.reason)
    result.more_waiting = bool(inbox.waiting(entry.name, 1))  # left, past `batch`, or new
    result.requests = control.stats.requests
    result.warnings = list(control.stats.warnings)
    inbox.record_drain(
        DrainRecord(
            entry.name,
            started,
            stamp(now_utc()),
            result.outcome,
            result.deliveries,
            result.records,
            result.requests,
            result.reason,
        )
    )
    return result


def _load(
    warehouse: Warehouse,
    settings: SigningConfiguration,
    entry: WorkspaceEntry,
    inbox: Inbox,
    deliveries: list[Delivery],
    control: RunControl,
    result: DrainResult,
    hold_seconds: float,
) -> None:
    """The drain's load, under the warehouse's brief hold, its reading cut short once it held
    it for `hold_seconds`."""
    seen = RowDigests()
    with contextlib.ExitStack() as held:
        held.enter_context(warehouse.writer(brief=HOLD))
        spent = HoldSpent(f"read records for {hold_seconds:.0f} s, the longest a drain holds")
        timer = threading.Timer(hold_seconds, control.stop, args=(spent,))
        timer.daemon = True
        timer.start()
        held.callback(timer.cancel)
        connection = connect(settings, control=control)
        workspace_id = connection.workspace_id
        mine = [d for d in deliveries if d.workspace_id == workspace_id]
        _skip_others(inbox, [d for d in deliveries if d.workspace_id != workspace_id], control)
        named = {table: _named(mine, table) for table in RECORD_TABLES}
        source = records_source(connection, named["shipments"], named["contacts"])
        seen.watch((table, source.resources[BY_ID_RESOURCES[table]]) for table in RECORD_TABLES)
        source.resources.add(deliveries_resource(mine))
        folder = held.enter_context(warehouse.workspace_session(workspace_id, brief=HOLD))
        pipeline = make_pipeline(warehouse, workspace_id, folder)
        steps = LoadSteps()
        info = steps.run(pipeline, connection, source, control.stats)
        incomplete = incomplete_shipments(pipeline.state)
        record_incomplete_shipments(pipeline, workspace_id, incomplete)
    inbox.remember_drained(workspace_id, seen.digests)
    result.records = sum(len(ids) for ids in named.values())
    if _stopped(control):  # a stopped drain leaves its deliveries for the next one
        return
    refused = connection.unserved
    if control.reason is None:
        taken = mine
    else:  # the hold was spent: what was read whole is done, the rest waits
        asked = {(table, record_id) for table, ids in named.items() for record_id in ids}
        done = (set(seen.digests) - {("shipments", s) for s in incomplete}) | refused.keys()
        taken = [d for d in mine if _record_of(d) in done or _record_of(d) not in asked]
    aside = [(d, refused[key]) for d in taken if (key := _record_of(d)) in refused]
    loaded = [d for d in taken if _record_of(d) not in refused]
    inbox.set_aside(aside)
    inbox.mark_done(loaded, info.loads_ids[0] if info.loads_ids else None)
    result.deliveries, result.set_aside = len(loaded), len(aside)
    result.left = len(mine) - len(taken)
    if aside:
        control.stats.warn(f"{len(aside):,} deliveries set aside for the next load: {aside[0][1]}")


def _stopped(control: RunControl) -> bool:
    """Whether the drain was stopped (a signal, the service), not just out of hold time."""
    return control.reason is not None and not isinstance(control.reason, HoldSpent)


def _record_of(delivery: Delivery) -> tuple[str, str]:
    """The (kind, id) of the record a delivery names, as `records_source` keys it."""
    return delivery.record_kind or "", delivery.record_id or ""


def _named(deliveries: Sequence[Delivery], table: str) -> list[str]:
    """The ids of the records of `table` the deliveries name, each once."""
    return list(
        dict.fromkeys(d.record_id for d in deliveries if d.record_kind == table and d.record_id)
    )


def _skip_others(inbox: Inbox, others: list[Delivery], control: RunControl) -> None:
    """Deliveries for another workspace than the key's (the key was changed since): their
    records cannot be read with it, so they are set aside, and said."""
    if others:
        inbox.mark_done(others, None)
        control.stats.warn(
            f"{len(others)} deliveries were for workspace {others[0].workspace_id}, not the "
            "configured key's; set aside (the next load of that workspace reads its changes)"
        )
