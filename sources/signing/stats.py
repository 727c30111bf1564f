"""What a run cost the service and what it fetched: counters shared by every thread of a run."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field, fields
from datetime import datetime


@dataclass
class RunCounters:
    """What a run cost the service, counted by every thread: the one definition of the counters
    the load's summary, the run record (a column each) and `status` report. A new counter is a
    field here; the record's column and the documents' keys follow."""

    requests: int = 0  # answered, whatever the status
    failed_attempts: int = 0  # sent, no usable answer (time-out, refused, cut short)
    throttled: int = 0
    retries: int = 0
    waited_seconds: float = 0.0  # wall time during which some request waited for the limits
    request_seconds: float = 0.0  # wall time during which some request was on the wire
    truncated_trails: int = 0  # audit trails cut at the API's cap (the oldest events missing)

    def as_dict(self) -> dict[str, int | float]:
        """Each counter by its name, seconds to the millisecond (as records and summaries keep
        them)."""
        counted: dict[str, int | float] = {}
        for each in fields(RunCounters):
            value = getattr(self, each.name)
            counted[each.name] = round(value, 3) if isinstance(value, float) else value
        return counted


@dataclass
class RunStats(RunCounters):
    """The counters, and what else the progress display, the summary and the run record show;
    thread-safe through its methods (callers never take its lock)."""

    by_endpoint: Counter[str] = field(default_factory=Counter)
    rows: Counter[str] = field(default_factory=Counter)
    stop_reason: str | None = None
    warnings: list[str] = field(default_factory=list)
    service_time: datetime | None = None  # the service's clock (`Date`) at its last answer
    limits: dict[str, int] = field(default_factory=dict)  # X-RateLimit-Limit by its scope
    daily_remaining: int | None = None  # X-Daily-Remaining at the last answer
    list_totals: dict[str, int] = field(default_factory=dict)  # changed records per list
    phase: str = "fetching"  # fetching, normalizing, loading: what the run does now
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _in_flight: int = field(default=0, repr=False)
    _busy_since: float = field(default=0.0, repr=False)

    def counters(self) -> RunCounters:
        """The counters as they are now, apart from the live object."""
        with self._lock:
            return RunCounters(*(getattr(self, each.name) for each in fields(RunCounters)))

    def count_request(self, endpoint: str) -> None:
        with self._lock:
            self.requests += 1
            self.by_endpoint[endpoint] += 1

    def request_sent(self) -> None:
        """A request went out; with `request_done`, it measures the wall time the run spent
        with requests on the wire (overlapping ones counted once), so that what a run costs
        beyond its requests can be told apart."""
        with self._lock:
            if self._in_flight == 0:
                self._busy_since = time.monotonic()
            self._in_flight += 1

    def request_done(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.request_seconds += time.monotonic() - self._busy_since

    def count_failed_attempt(self) -> None:
        with self._lock:
            self.failed_attempts += 1

    def count_throttled(self) -> None:
        with self._lock:
            self.throttled += 1

    def count_retry(self) -> None:
        with self._lock:
            self.retries += 1

    def count_truncated_trail(self) -> None:
        with self._lock:
            self.truncated_trails += 1

    def count_rows(self, table: str, count: int) -> None:
        with self._lock:
            self.rows[table] += count

    def warn(self, message: str) -> None:
        """Something the run did without, said in the summary and kept in the run record."""
        with self._lock:
            self.warnings.append(message)

    def answered(
        self, at: datetime | None, scope: str | None, limit: int | None, daily: int | None
    ) -> None:
        """What an answer said about the service: its clock and the limits that apply."""
        with self._lock:
            if at is not None and (self.service_time is None or at > self.service_time):
                self.service_time = at
            if scope and limit is not None:
                self.limits[scope] = limit
            if daily is not None:
                self.daily_remaining = daily

    def count_total(self, name: str, total: int) -> None:
        """How many records of list `name` changed since its cursor, as its first page said."""
        with self._lock:
            self.list_totals.setdefault(name, total)

    def enter(self, phase: str) -> None:
        self.phase = phase

    def waited(self, seconds: float) -> None:
        with self._lock:
            self.waited_seconds += seconds

    def stopped(self, reason: str) -> None:
        """Record why the run stopped; only the first reason counts."""
        with self._lock:
            if self.stop_reason is None:
                self.stop_reason = reason
