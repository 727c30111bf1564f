"""One run's stop switch: the client, the pacer and a signal handler share it, so that the
first reason to stop reaches every thread at once and the run ends with what it fetched."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from .errors import RunStopped
from .stats import RunStats


class RunControl:
    """The stop switch and the counters of one run."""

    def __init__(self, stats: RunStats | None = None) -> None:
        self.stats = stats or RunStats()
        self.run_id = uuid.uuid4().hex[:12]  # ties log lines to the run record
        self._reason: RunStopped | None = None
        self._listeners: list[Callable[[RunStopped], None]] = []
        self._finishers: list[Callable[[], None]] = []
        self._lock = threading.RLock()

    @property
    def reason(self) -> RunStopped | None:
        """Why the run stopped, once it has."""
        return self._reason

    def on_stop(self, listener: Callable[[RunStopped], None]) -> None:
        """Call `listener` with the reason when the run stops (a pacer wakes its waiters)."""
        with self._lock:
            self._listeners.append(listener)

    def stop(self, reason: RunStopped) -> RunStopped:
        """Stop the run; only the first reason counts. Returns the reason in force."""
        with self._lock:
            if self._reason is not None:
                return self._reason
            self._reason = reason
            listeners = list(self._listeners)
        self.stats.stopped(str(reason))
        for listener in listeners:
            listener(reason)
        return reason

    def check(self) -> None:
        """Raise the stop reason if the run has stopped."""
        if self._reason is not None:
            raise self._reason

    def on_finish(self, finisher: Callable[[], None]) -> None:
        """Call `finisher` when the run is over (threads and connections are released)."""
        self._finishers.append(finisher)

    def finish(self) -> None:
        """The run is over: release what its parts hold."""
        finishers, self._finishers = self._finishers, []
        for finisher in finishers:
            finisher()
