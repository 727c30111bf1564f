"""What a run cost the service and what it fetched: counters shared by every thread of a run."""

from __future__ import annotations

import threading
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
    by_endpoint: Counter[str] = field(default_factory=Counter)
    rows: Counter[str] = field(default_factory=Counter)
    stop_reason: str | None = None
    warnings: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count_request(self, endpoint: str) -> None:
        with self._lock:
            self.requests += 1
            self.by_endpoint[endpoint] += 1

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
