"""Deleted records, which the service never announces: what one run learns about them, the
guard that keeps a partial read from passing for a mass deletion, and the state each list keeps
between runs (`FullCheck`).

The application deletes contacts, documents and shipments: they vanish from the lists, from
the lists' `total`, and answer 404. So a record is taken for deleted only on evidence: a full
pass over a list's ids that completed and did not see it (`reconcile`), or a 404 on the record
itself or on a shipment's children. What the run found is decided once its fetching is over
(`Deletions.decide`): the pipeline then marks it in the warehouse (`_deleted_at`, or removes
the rows when `deletes` is `hard`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from . import settings
from .paging import Record

DeleteMode = Literal["soft", "hard"]
# How a list was checked in a run: its `total` against the warehouse (`count`), a full pass
# over its ids (`full`), a full pass that did not complete and so marks nothing (`incomplete`),
# or not at all: nothing of it loaded and its last check younger than its cadence (`none`).
CheckKind = Literal["count", "full", "incomplete", "none"]


class WarehouseRecords(Protocol):
    """What the warehouse holds of the run's workspace, read by the pipeline for the source:
    the source decides what is deleted, and never opens the warehouse itself."""

    def live_count(self, table: str) -> int:
        """Rows of `table` (documents, shipments, contacts) not marked deleted."""
        ...

    def ids(self, table: str) -> tuple[set[str], set[str]]:
        """The ids of `table`'s rows: those live, and those marked deleted."""
        ...


@dataclass(frozen=True)
class DeletionSettings:
    """How a run treats deleted records (settings of `connect`, options of the load)."""

    mode: DeleteMode = "soft"
    reconcile: bool = False  # a full pass over every list this run, whatever the counts say
    allow_mass_delete: bool = False  # mark what a full pass found, whatever its share
    full_check_max_age_hours: float = settings.FULL_CHECK_MAX_AGE_HOURS
    mass_delete_share: float = settings.MASS_DELETE_SHARE
    count_check_every_hours: float = settings.COUNT_CHECK_EVERY_HOURS


@dataclass
class FullCheck:
    """A list's last complete pass over its ids, kept in the list resource's state.

    `at`: when it began, by the service's clock (ISO); `requests` it cost; `found`: records it
    found gone; `unlisted`: records the list held that the warehouse does not, which the next
    count check expects (older than `--since`). `whole_history`: the warehouse was loaded from
    the list's beginning, so a full pass loads what it holds not (a record restored after a
    hard delete, or deleted before the first load and restored since) instead of counting it;
    unknown for warehouses loaded before these checks existed, which are taken as partial.
    `counted_at`: the list's last check of either kind (the service's clock), which sets when
    the next count check is due."""

    table: str
    at: str | None = None
    requests: int = 0
    found: int = 0
    unlisted: int = 0
    whole_history: bool = False
    counted_at: str | None = None

    def to_state(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "at": self.at,
            "requests": self.requests,
            "found": self.found,
            "unlisted": self.unlisted,
            "whole_history": self.whole_history,
            "counted_at": self.counted_at,
        }

    @classmethod
    def from_state(cls, table: str, state: Mapping[str, Any] | None) -> FullCheck:
        if not state:
            return cls(table)
        return cls(
            table=table,
            at=state.get("at"),
            requests=int(state.get("requests", 0)),
            found=int(state.get("found", 0)),
            unlisted=int(state.get("unlisted", 0)),
            whole_history=bool(state.get("whole_history", False)),
            counted_at=state.get("counted_at"),
        )


@dataclass(frozen=True)
class CheckOutcome:
    """What checking one list cost and found."""

    kind: CheckKind
    requests: int
    full_check_at: str | None  # the list's last complete full pass, this one or an earlier
    gone: frozenset[str] = frozenset()  # ids a complete full pass did not see
    seen_again: frozenset[str] = frozenset()  # ids marked deleted (or not held) it saw live
    live: int | None = None  # the warehouse's live rows of the table when it was checked
    candidates: int = 0  # records the complete pass did not see (before their own GET)
    unconfirmed: int = 0  # candidates not asked or not answered this run: the next run asks


@dataclass(frozen=True)
class TableDeletions:
    """One table's deletions in one run, as the summary, the run record and the marks need
    them: what was checked and at what cost, what was found gone, and what is to be marked
    (nothing when the guard refused, with the one line that says why)."""

    table: str
    check: CheckKind | None
    check_requests: int
    full_check_at: str | None
    found: frozenset[str]
    marked: frozenset[str]
    seen_again: int = 0
    refused: str | None = None

    def to_record(self) -> dict[str, Any]:
        """Its figures for the run record (ids stay out of it)."""
        return {
            "check": self.check,
            "check_requests": self.check_requests,
            "full_check_at": self.full_check_at,
            "found": len(self.found),
            "marked": len(self.marked),
            "seen_again": self.seen_again,
            "refused": self.refused is not None,
        }


@dataclass
class Deletions:
    """What one run learns about deleted records, from every resource and child thread; the
    pipeline gives it the warehouse (`warehouse`) before the run and asks `decide` after."""

    settings: DeletionSettings = field(default_factory=DeletionSettings)
    warehouse: WarehouseRecords | None = None  # None: no reconciliation (no warehouse to ask)
    _listed: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> `created_at`
    _caught_up: set[str] = field(default_factory=set)
    _not_found: dict[str, set[str]] = field(default_factory=dict)
    _checks: dict[str, CheckOutcome] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def listed(self, table: str, records: Iterable[Record]) -> None:
        """Records the run's pass over a list loads: the warehouse holds them live after it."""
        with self._lock:
            listed = self._listed.setdefault(table, {})
            listed.update((str(r["id"]), r.get("created_at")) for r in records)

    def caught_up(self, table: str) -> None:
        """The run read every change of the list since its cursor (no stop, no give-up)."""
        with self._lock:
            self._caught_up.add(table)

    def is_caught_up(self, table: str) -> bool:
        with self._lock:
            return table in self._caught_up

    def listed_ids(self, table: str) -> set[str]:
        with self._lock:
            return set(self._listed.get(table, ()))

    def created_at(self, table: str, record_id: str) -> Any:
        """The `created_at` a listed record had, as the service wrote it (None if absent)."""
        with self._lock:
            return self._listed.get(table, {}).get(record_id)

    def not_found(self, table: str, record_id: str) -> None:
        """A 404 on the record, or on one of a shipment's children: it is gone."""
        with self._lock:
            self._not_found.setdefault(table, set()).add(record_id)

    def not_found_ids(self, table: str) -> set[str]:
        with self._lock:
            return set(self._not_found.get(table, ()))

    def checked(self, table: str, outcome: CheckOutcome) -> None:
        with self._lock:
            self._checks[table] = outcome

    def decide(self) -> list[TableDeletions]:
        """Each table's deletions once fetching is over, guard applied: more than
        `mass_delete_share` of the table's live rows (and more than `MASS_DELETE_FLOOR`)
        marks nothing unless the load allows it. A record seen again wins over a 404."""
        with self._lock:
            tables = sorted(set(self._checks) | set(self._not_found))
            checks, not_found = dict(self._checks), dict(self._not_found)
        decided = []
        for table in tables:
            outcome = checks.get(table)
            seen_again = outcome.seen_again if outcome else frozenset()
            found = frozenset(
                ((outcome.gone if outcome else frozenset()) | not_found.get(table, set()))
                - seen_again
            )
            # The guard weighs the candidates, not only what their own GET confirmed: a list
            # that left out most of a table is a reason to look, whatever answered 404.
            weighed = max(len(found), outcome.candidates if outcome else 0)
            refused = self._refusal(table, weighed, outcome.live if outcome else None)
            decided.append(
                TableDeletions(
                    table=table,
                    check=outcome.kind if outcome else None,
                    check_requests=outcome.requests if outcome else 0,
                    full_check_at=outcome.full_check_at if outcome else None,
                    found=found,
                    marked=frozenset() if refused else found,
                    seen_again=len(seen_again),
                    refused=refused,
                )
            )
        return decided

    def _refusal(self, table: str, found: int, live: int | None) -> str | None:
        """The one line that refuses marking `found` records, or None when they may be."""
        if self.settings.allow_mass_delete or found <= settings.MASS_DELETE_FLOOR:
            return None
        if live is None:
            live = self.warehouse.live_count(table) if self.warehouse is not None else 0
        share = self.settings.mass_delete_share
        if found <= share * live:
            return None
        return (
            f"{table}: {found:,} of {live:,} live rows ({found / max(live, 1):.1%}) "
            f"are gone from the service, more than mass_delete_share ({share:.0%}); none was "
            "marked deleted (a read cut short looks the same): if the service really deleted "
            "them, load again with --allow-mass-delete"
        )


def describe_deletions(pipeline_state: Mapping[str, Any]) -> dict[str, FullCheck]:
    """Each list's last full check, by table, read from a pipeline's dlt state, so that
    callers (`signing-etl status`) never read its raw keys."""
    resources: Mapping[str, Any] = (
        pipeline_state.get("sources", {}).get("signing", {}).get("resources", {})
    )
    checks: dict[str, FullCheck] = {}
    for state in resources.values():
        kept = state.get(settings.STATE_DELETIONS) if isinstance(state, Mapping) else None
        if isinstance(kept, Mapping) and kept.get("table") in settings.DELETABLE_TABLES:
            checks[str(kept["table"])] = FullCheck.from_state(str(kept["table"]), kept)
    return dict(sorted(checks.items()))
