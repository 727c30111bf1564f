"""What a run cost the service and what it fetched: counters shared by every thread of a run."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field


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

    def waited(self, seconds: float) -> None:
        with self._lock:
            self.waited_seconds += seconds

    def stopped(self, reason: str) -> None:
        """Record why the run stopped; only the first reason counts."""
        with self._lock:
            if self.stop_reason is None:
                self.stop_reason = reason
