"""Incremental passes over a list endpoint that changes while it is read, and their typed state.

A pass pages through the records changed since the saved cursor (`updated_since`). A pass that
took more than one request may have missed records that changed while it paged (their new
`updated_at` lies after its start); catch-up passes re-read from its start until one pass fits
in a single response, a consistent snapshot. So a run leaves the warehouse equal to the service
as of its last request, not merely "eventually" equal.

The cursor is the service's time (its `Date` header) when the run's first pass began, minus a
lag; never a record's `updated_at` (shipments have none) and never this machine's clock.

The next run reads again what changed at or after the cursor, unchanged records included, so a
run remembers the fingerprints of those records (`ListSync.known`) and the next one loads none of
them again (nor fetches their children). Only those: a record with `updated_at` is remembered
when its time is at or after the cursor; records without one (shipments) cannot be told apart
by their content, so the first catch-up pass of a list that has them re-reads from the cursor
itself, and what that pass and later ones read is exactly what the next run may see again. So
the state holds the records of the lag and of the run, not one fingerprint per record of the
workspace.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from . import settings
from .context import SyncContext
from .errors import RunStopped
from .paging import ListPage, PagerPosition, PagingReport, Read, Record, anchored_pages
from .times import parse_iso, to_iso

log = logging.getLogger(__name__)


def _time_or_none(text: str | None) -> datetime | None:
    return parse_iso(text) if text else None


def _iso_or_none(moment: datetime | None) -> str | None:
    return to_iso(moment) if moment else None


@dataclass
class InterruptedPass:
    """A pass a stop cut short: where it resumes, and what it had fetched so far.

    Its times are the service's; a pass stopped before its first answer keeps them unknown
    and learns them when it resumes."""

    since: str | None
    started: datetime | None = None
    first_started: datetime | None = None
    position: PagerPosition = field(default_factory=PagerPosition)
    fetched: dict[str, str] = field(default_factory=dict)

    def to_state(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "started": _iso_or_none(self.started),
            "first_started": _iso_or_none(self.first_started),
            "position": self.position.to_state(),
            "fetched": self.fetched,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> InterruptedPass:
        started = _time_or_none(state.get("started"))
        return cls(
            since=state.get("since"),
            started=started,
            first_started=_time_or_none(state.get("first_started")) or started,
            position=PagerPosition.from_state(state.get("position")),
            fetched=dict(state.get("fetched", {})),
        )


@dataclass
class ListSync:
    """What one list endpoint's sync keeps between runs.

    `cursor`: the ISO time the next run reads changes from. `known`: fingerprints of what the
    last run loaded and the next may return again (changed at or after the cursor), so a run
    with no change loads no row. `interrupted`: a pass a stop cut short."""

    cursor: str | None = None
    known: dict[str, str] = field(default_factory=dict)
    interrupted: InterruptedPass | None = None

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ListSync:
        interrupted = state.get(settings.STATE_PASS)
        return cls(
            cursor=state.get(settings.STATE_CURSOR),
            known=state.get(settings.STATE_KNOWN, {}),
            interrupted=InterruptedPass.from_state(interrupted) if interrupted else None,
        )

    def to_state(self, state: dict[str, Any]) -> None:
        """Write into a resource's dlt state (the keys stay as earlier versions wrote them)."""
        if self.cursor is not None:
            state[settings.STATE_CURSOR] = self.cursor
        state[settings.STATE_KNOWN] = self.known
        if self.interrupted is None:
            state.pop(settings.STATE_PASS, None)
        else:
            state[settings.STATE_PASS] = self.interrupted.to_state()


def incremental_pass(
    context: SyncContext, name: str, state: dict[str, Any]
) -> Iterator[list[Record]]:
    """Pages of records of list endpoint `name` that changed since the saved cursor.

    `state` is the resource's dlt state; on a stop it keeps the interrupted pass, otherwise the
    new cursor and the fingerprints of what the next run may read again."""
    sync = ListSync.from_state(state)
    current = sync.interrupted or InterruptedPass(since=sync.cursor or context.initial_since)
    pager = _Pass(context, name, current, sync.known)
    try:
        for page in pager.rounds():
            context.deletions.listed(name, page)
            yield page
    except RunStopped:
        sync.interrupted = current
        sync.to_state(state)
        raise
    finally:
        pager.warn_about_paging()
    if pager.gave_up:
        # Records past where the pager gave up may be unread, and a cursor moved past their
        # `updated_at` would hide them for good: the next run reads from the same cursor, and
        # knows what this one loaded.
        sync.known = {**sync.known, **current.fetched}
    else:
        sync.cursor = to_iso(pager.cursor())
        sync.known = pager.remembered()
        context.deletions.caught_up(name)
    sync.interrupted = None
    sync.to_state(state)


def read_page(
    context: SyncContext, path: str, params: dict[str, str | int]
) -> tuple[ListPage, datetime]:
    """One page of a list, with its `total` when the service gave a usable one, and the
    service's time when it answered."""
    data, body, answered_at = context.client.get_data(path, params)
    total = body.get("total")
    usable = isinstance(total, int) and not isinstance(total, bool) and total >= 0
    return ListPage(list(data), total if usable else None), answered_at


class _Pass:
    """The passes of one run over one list, moving `current` along as pages arrive."""

    def __init__(
        self,
        context: SyncContext,
        name: str,
        current: InterruptedPass,
        known: dict[str, str],
    ) -> None:
        self.context = context
        self.name = name
        self.path, self.extra = settings.LIST_ENDPOINTS[name]
        self.current = current
        self.known = known
        self.requests = 0
        # What `remembered` keeps: `again` collects the fingerprints of records the next run
        # may return (timed at or after the cursor, or read by a pass from the cursor on);
        # `covered` says that a pass from the cursor itself completed, so `again` holds them
        # all. Fingerprints a resumed pass brought along are kept: nothing tells them apart.
        self.untimed = False
        self.again: dict[str, str] = {}
        self.covered = False
        self.restored = set(current.fetched)
        # What the service did that the pager saw through, over all passes of the run; and
        # whether the first pass gave up before its pages showed the list's end.
        self.report = PagingReport()
        self.gave_up = False

    def rounds(self) -> Iterator[list[Record]]:
        """The first pass, then catch-up passes while the previous one saw changes."""
        current = self.current
        for round_number in range(settings.MAX_CATCH_UP_PASSES + 1):
            changed_in_pass = 0
            for fresh in anchored_pages(
                self._fetch,
                page_size=self.context.page_size,
                overlap=settings.PAGE_OVERLAP,
                position=current.position,
                patience=self.context.max_pages_without_new_records,
                report=self.report,
            ):
                current.first_started = current.first_started or current.started
                changed = self._changed(fresh)
                changed_in_pass += len(changed)
                if changed:
                    yield self.context.stamp(changed, self.name)
            current.first_started = current.first_started or current.started
            if self.report.gave_up is not None:
                # A catch-up pass that gave up costs nothing: the cursor is the first pass's
                # start, and the next run reads what changed since. The first pass (resumed
                # or not: it started when the run's first pass did) cannot say as much.
                self.gave_up = current.first_started == current.started
                return
            if current.since is not None and parse_iso(current.since) == self.cursor():
                self.covered = True
            done = self.requests <= 1 or (round_number > 0 and not changed_in_pass)
            if done or round_number == settings.MAX_CATCH_UP_PASSES:
                return
            # Catch up on what changed while this pass paged: from a second before its start,
            # since `Date` has whole seconds and a service may read `updated_since` as strictly
            # greater; the run's cursor keeps the lag for anything stamped a little early.
            # Records without `updated_at` are caught up from the cursor itself: then the pass
            # reads exactly what the next run may return again, and `again` learns it.
            log.info("%s: %d requests in the pass; catching up", self.name, self.requests)
            assert current.started is not None
            since = current.started - timedelta(seconds=1)
            current.since = to_iso(min(since, self.cursor()) if self.untimed else since)
            current.started = None
            current.position = PagerPosition()
            self.requests = 0

    def cursor(self) -> datetime:
        """Where the next run starts: the first pass's start minus the lag, and a second more
        because `Date` has whole seconds."""
        started = self.current.first_started
        assert started is not None
        # In whole milliseconds, as the state keeps it: a pass from the cursor starts there.
        return parse_iso(to_iso(started - timedelta(seconds=self.context.lag_seconds + 1)))

    def _fetch(self, offset: int) -> ListPage:
        params: dict[str, str | int] = {
            **self.extra,
            "limit": self.context.page_size,
            "offset": offset,
        }
        if self.current.since:
            params["updated_since"] = self.current.since
        page, answered_at = read_page(self.context, self.path, params)
        self.requests += 1
        if self.current.started is None:
            self.current.started = answered_at
        if page.total is not None and offset == 0:
            self.context.client.stats.count_total(self.name, page.total)
        return page

    def warn_about_paging(self) -> None:
        """One warning line for the run if the service's pages contradicted themselves: what
        it did, and whether the pager read to the list's end anyway or gave up."""
        report = self.report
        if not report.oddities and report.gave_up is None:
            return
        did = "; ".join(report.oddities.values()) or "pages that repeat what was read"
        if report.gave_up is None:
            outcome = "its pages still showed where the list ends, and it was read to there"
        else:
            outcome = (
                f"paging stopped: {report.gave_up} (max_pages_without_new_records); what was "
                "read is kept, and the next run reads this list again from the same cursor"
            )
        self.context.client.stats.warn(f"{self.name}: GET {self.path} answered {did}; {outcome}")

    def remembered(self) -> dict[str, str]:
        """The fingerprints the next run needs: of the records it may return again."""
        if not self.covered:
            return dict(self.current.fetched)
        fetched = self.current.fetched
        kept = {i: fetched[i] for i in self.restored if i in fetched}
        kept.update(self.again)
        return kept

    def _changed(self, fresh: list[Read]) -> list[Record]:
        """The records not loaded before with this content (the last read of a record in this
        run counts before what the last run loaded). Keeps what this run read and the next may
        return again: every record without `updated_at` (for the catch-up passes; `again`
        sorts them), and the others changed at or after the cursor."""
        cursor = self.cursor()
        since = self.current.since
        from_cursor = since is not None and parse_iso(since) >= cursor
        fetched, known, again = self.current.fetched, self.known, self.again
        changed = []
        for record, digest in fresh:
            key = record["id"]
            last = fetched[key] if key in fetched else known.get(key)
            if last != digest:
                changed.append(dict(record))
            stamp = record.get("updated_at")
            if isinstance(stamp, str):
                if parse_iso(stamp) >= cursor:
                    fetched[key] = again[key] = digest
            else:
                self.untimed = True
                fetched[key] = digest
                if from_cursor:
                    again[key] = digest
        return changed


@dataclass(frozen=True)
class ResourceSyncStatus:
    """How far one resource's sync has come, for `signing-etl status`: named after the list
    it reads (`shipments`, not the resource `shipment_changes` that pages it)."""

    name: str
    cursor: str | None
    interrupted: bool
    pending_children: int


def describe_sync(pipeline_state: Mapping[str, Any]) -> list[ResourceSyncStatus]:
    """The sync state of every resource that keeps one, read from a pipeline's dlt state, so
    that callers never read its raw keys."""
    resources: Mapping[str, Any] = (
        pipeline_state.get("sources", {}).get("signing", {}).get("resources", {})
    )
    described = []
    for name, state in sorted(resources.items()):
        sync = ListSync.from_state(state)
        pending = len(state.get(settings.STATE_PENDING, {})) + len(
            state.get(settings.STATE_PENDING_DETAILS, {})
        )
        if sync.cursor or sync.interrupted or pending:
            listed = settings.LIST_OF_RESOURCE.get(name, name)
            described.append(
                ResourceSyncStatus(listed, sync.cursor, bool(sync.interrupted), pending)
            )
    return described


def incomplete_shipments(pipeline_state: Mapping[str, Any]) -> set[str]:
    """Shipments whose children (audit trail, filled-in fields) a stop left unfetched: the next
    run fetches them first; until then the models hold them back."""
    resources: Mapping[str, Any] = (
        pipeline_state.get("sources", {}).get("signing", {}).get("resources", {})
    )
    children = ("audit_events", "shipment_fields")
    by_id = tuple(settings.BY_ID_RESOURCES[name] for name in children)  # read by id
    return {
        shipment_id
        for name in children + by_id
        for shipment_id in resources.get(name, {}).get(settings.STATE_PENDING, {})
    }
