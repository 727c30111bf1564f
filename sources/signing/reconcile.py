"""Reconciling one list with the warehouse, after the run's pass over its changes: a cheap check
first, a full pass over the list's ids where the check cannot decide.

The check asks the list's `total` (one request, `limit=1`), when the run loaded records of the
list or the last check is `count_check_every_hours` old (a run with nothing new then costs no
request here), and compares it with what the warehouse will hold live once this run is
loaded: its live rows, the records this run loads, and the records the last full pass found
listed but not held (`FullCheck.unlisted`). Where they agree and the last full pass is
recent, nothing was deleted. Else, on `--reconcile`, or when the
last full pass is older than `full_check_max_age_hours` (by the service's clock), the whole
list is paged (archived shipments too) and every record the warehouse holds live that the pass
did not see is gone.

A pass over a list that changes while it is read may miss a record that moved (see
`paging.py`), and a missed record would be taken for deleted: so catch-up passes re-read what
changed since the pass began, until one fits in one request. A pass that did not complete (a
stop, a failure, a budget, a signal, a pager that gave up, catch-ups that never settle) marks
nothing. Counts can agree while one record was deleted and another restored: the periodic full
pass finds those.

A record the complete pass did not see is only a candidate: it is taken for deleted when its own
`GET` answers 404 (as many as `CONFIRMATIONS_PER_LIST` a run; the rest wait for the next run). A
list that hides records it still serves by id (answers empty, lies in its `total`, leaves some
out) therefore marks nothing: the record answers 200.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from . import settings
from .context import SyncContext
from .deletions import CheckOutcome, FullCheck
from .errors import RunStopped
from .incremental import read_page
from .paging import ListPage, PagerPosition, PagingReport, Record, anchored_pages
from .times import parse_iso, to_iso


def reconcile(context: SyncContext, name: str, state: dict[str, Any]) -> Iterator[list[Record]]:
    """Check list `name` for deleted records once the run's pass over its changes caught up,
    keeping the last full pass in `state` (the list resource's dlt state). Yields the records
    the warehouse holds as deleted that the list serves again, to be loaded live again."""
    deletions = context.deletions
    warehouse = deletions.warehouse
    if warehouse is None or not deletions.is_caught_up(name):
        return
    last = FullCheck.from_state(name, state.get(settings.STATE_DELETIONS))
    listed = deletions.listed_ids(name) - deletions.not_found_ids(name)
    if not listed and not _count_due(context, last):
        deletions.checked(name, CheckOutcome("none", 0, last.at))
        return
    path, extra = settings.LIST_ENDPOINTS[name]
    page, answered_at = read_page(context, path, {**extra, "limit": 1, "offset": 0})
    live_count = warehouse.live_count(name)
    if live_count == 0 and not warehouse.ids(name)[1]:
        # Nothing held live, so nothing to mark: what the list holds beyond this run's records
        # is what the warehouse does not hold (a first load from --since), and the next count
        # check expects it.
        unlisted = max(0, (page.total or 0) - len(listed))
        whole = context.initial_since is None
        kept = FullCheck(name, to_iso(answered_at), 1, 0, unlisted, whole, to_iso(answered_at))
        state[settings.STATE_DELETIONS] = kept.to_state()
        deletions.checked(name, CheckOutcome("count", 1, kept.at, live=0))
        return
    held = warehouse.ids(name) if listed else None  # only the count, when nothing was loaded
    if held:
        last.unlisted -= _formerly_unlisted(context, name, last, listed - held[0] - held[1])
    expected = (len(held[0] | listed) if held else live_count) + last.unlisted
    if page.total is None:
        context.client.stats.warn(
            f"{name}: GET {path} gave no usable `total`, so every run pages the whole list "
            "to find deleted records"
        )
    if page.total == expected and not _due(context, last, answered_at):
        last.counted_at = to_iso(answered_at)
        state[settings.STATE_DELETIONS] = last.to_state()
        deletions.checked(name, CheckOutcome("count", 1, last.at, live=live_count))
        return
    live, deleted = held or warehouse.ids(name)
    yield from _full_check(context, name, state, (live | listed, deleted, listed))


def _formerly_unlisted(context: SyncContext, name: str, last: FullCheck, new: set[str]) -> int:
    """Of the records this run loads that the warehouse did not hold, those created before the
    last full check: the list held them then, unloaded (older than --since), and counted them
    in `unlisted`; now that one changed, the warehouse holds it. Records without a usable
    `created_at` are not counted (a full pass then settles the count)."""
    if not last.unlisted or last.at is None:
        return 0
    checked_at = parse_iso(last.at)
    formerly = 0
    for record_id in new:
        created = context.deletions.created_at(name, record_id)
        try:
            formerly += isinstance(created, str) and parse_iso(created) < checked_at
        except ValueError:
            continue
    return min(formerly, last.unlisted)


def check_due(context: SyncContext, last_at: str | None) -> bool:
    """Whether a read done on the count checks' cadence is due: asked for (`--reconcile`),
    never done, or `count_check_every_hours` passed since `last_at` by the service's clock
    (as its latest answer stated it)."""
    now = context.client.service_time
    if context.deletions.settings.reconcile or last_at is None or now is None:
        return True
    every = timedelta(hours=context.deletions.settings.count_check_every_hours)
    return now - parse_iso(last_at) >= every


def _count_due(context: SyncContext, last: FullCheck) -> bool:
    """A count check is due in a run that loaded nothing of the list: on its cadence, or
    when a full pass is due."""
    now = context.client.service_time
    return check_due(context, last.counted_at) or (now is not None and _due(context, last, now))


def _due(context: SyncContext, last: FullCheck, now: datetime) -> bool:
    """A full pass is due whatever the counts say: asked for, never run, or too long ago."""
    if context.deletions.settings.reconcile or last.at is None:
        return True
    age = timedelta(hours=context.deletions.settings.full_check_max_age_hours)
    return now - parse_iso(last.at) >= age


def _full_check(
    context: SyncContext,
    name: str,
    state: dict[str, Any],
    held: tuple[set[str], set[str], set[str]],
) -> Iterator[list[Record]]:
    """Page the whole list; when the pass completes, what the warehouse holds live (`held`:
    live after this run, marked deleted, loaded by this run) and the pass did not see is gone."""
    live, deleted, listed = held
    deletions = context.deletions
    last = FullCheck.from_state(name, state.get(settings.STATE_DELETIONS))
    last_at = last.at
    scan = _IdPass(context, name, deleted, live | deleted if last.whole_history else None)
    try:
        yield from scan.pages()
    except RunStopped:
        deletions.checked(name, CheckOutcome("incomplete", 1 + scan.requests, last_at))
        raise
    if not scan.complete or scan.started is None:
        deletions.checked(name, CheckOutcome("incomplete", 1 + scan.requests, last_at))
        return
    candidates = live - scan.seen
    gone, unconfirmed, served = _confirmed(context, name, candidates)
    unlisted = 0 if last.whole_history else len(scan.seen - live - deleted - listed)
    began = to_iso(scan.started)
    # What the check cost in all (its count, the pass, the GETs that confirmed): the same
    # figure in the run's summary and record and in `status`.
    cost = 1 + scan.requests + len(gone) + len(served)
    done = FullCheck(name, began, cost, len(gone), unlisted, last.whole_history, counted_at=began)
    state[settings.STATE_DELETIONS] = done.to_state()
    if served:
        context.client.stats.warn(
            f"{name}: {len(served):,} records the list left out still answer by id; none of "
            "them was marked deleted"
        )
    outcome = CheckOutcome(
        "full",
        cost,
        done.at,
        gone=frozenset(gone),
        seen_again=frozenset(scan.seen_again),
        live=len(live),
        candidates=len(candidates),
        unconfirmed=len(unconfirmed),
    )
    deletions.checked(name, outcome)


def _confirmed(
    context: SyncContext, name: str, candidates: set[str]
) -> tuple[set[str], set[str], set[str]]:
    """Of the records a complete pass did not see: those whose own `GET` answers 404 (gone),
    those not asked or not answered this run (wait for the next), those it still serves."""
    gone: set[str] = set()
    served: set[str] = set()
    for record_id in sorted(candidates)[: settings.CONFIRMATIONS_PER_LIST]:
        answer = context.still_served(name, record_id)
        if answer is False:
            gone.add(record_id)
        elif answer:
            served.add(record_id)
        # None: no answer this run, asked again by the next complete pass
    return gone, candidates - gone - served, served


class _IdPass:
    """A pass over every record of a list, then catch-up passes over what changed while it
    paged, until one fits in one request: `seen` is then every record the list held. The
    records it yields are those the warehouse holds marked deleted (`deleted`), and when it
    holds the whole history (`held` given), those it does not hold at all."""

    def __init__(
        self, context: SyncContext, name: str, deleted: set[str], held: set[str] | None
    ) -> None:
        self.context = context
        self.name = name
        self.path, self.extra = settings.LIST_ENDPOINTS[name]
        self.deleted = deleted
        self.held = held
        self.seen: set[str] = set()
        self.seen_again: set[str] = set()
        self.requests = 0
        self.started: datetime | None = None
        self.complete = False
        self._since: str | None = None
        self._pass_started: datetime | None = None

    def pages(self) -> Iterator[list[Record]]:
        """Records marked deleted that the list holds again, as they are read."""
        for _ in range(settings.MAX_CATCH_UP_PASSES + 1):
            before = self.requests
            report = PagingReport()
            self._pass_started = None
            for fresh in anchored_pages(
                self._fetch,
                page_size=self.context.page_size,
                overlap=settings.PAGE_OVERLAP,
                position=PagerPosition(),
                patience=self.context.max_pages_without_new_records,
                report=report,
            ):
                again = self._read([record for record, _ in fresh])
                if again:
                    yield self.context.stamp(again, self.name)
            if report.gave_up is not None or self._pass_started is None:
                return  # the pages never showed the list's end: nothing is proven gone
            self.started = self.started or self._pass_started
            if self.requests - before <= 1:
                self.complete = True
                return
            # Records that changed while the pass paged may have moved past it: read what
            # changed since a second before it began (and the lag), as the incremental passes do.
            lag = timedelta(seconds=self.context.lag_seconds + 1)
            self._since = to_iso(self._pass_started - lag)

    def _read(self, records: list[Record]) -> list[Record]:
        again = []
        for record in records:
            record_id = str(record["id"])
            self.seen.add(record_id)
            missing = self.held is not None and record_id not in self.held
            if (record_id in self.deleted or missing) and record_id not in self.seen_again:
                self.seen_again.add(record_id)
                again.append(dict(record))
        return again

    def _fetch(self, offset: int) -> ListPage:
        params: dict[str, str | int] = {
            **self.extra,
            "limit": self.context.page_size,
            "offset": offset,
        }
        if self._since:
            params["updated_since"] = self._since
        page, answered_at = read_page(self.context, self.path, params)
        self.requests += 1
        self._pass_started = self._pass_started or answered_at
        return page
