"""What a run cost the service and what it fetched: counters shared by every thread of a run."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class RunStats:
    """Counters for the progress display, the summary and the run record; thread-safe through
    its methods (callers never take its lock)."""

    requests: int = 0  # answered, whatever the status
    failed_attempts: int = 0  # sent, no usable answer (time-out, refused, cut short)
    throttled: int = 0
    retries: int = 0
    truncated_trails: int = 0  # audit trails cut at the API's cap (the oldest events missing)
    waited_seconds: float = 0.0  # wall time during which some request waited for the limits
    request_seconds: float = 0.0  # wall time during which some request was on the wire
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
