"""When the receiver drains the inbox: once deliveries have been quiet for a while (a burst of
events for one shipment is one drain), and at the latest a fixed time after the first one that
waits, so that a steady stream is loaded within a minute too. One drain at a time, in a thread
of its own; a drain that could not finish (a load held the warehouse, the service failed) is
tried again after a back-off that grows up to five minutes, and one that left deliveries waiting
(its hold spent, its batch full) is followed by another after the quiet time.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

from pipelines.webhooks.drain import DrainResult
from sources.signing import Interrupted, RunControl

LONGEST_BACK_OFF_SECONDS = 300.0

# A drain: given a way to make each workspace's run control, what it did per workspace.
Drain = Callable[[Callable[[], RunControl]], list[DrainResult]]


class DrainTrigger:
    """Drains after `quiet_seconds` without a new delivery, or `within_seconds` after the
    first waiting one, whichever comes first."""

    def __init__(
        self,
        drain: Drain,
        quiet_seconds: float,
        within_seconds: float,
        say: Callable[[DrainResult], None],
    ) -> None:
        self._drain = drain
        self._quiet = quiet_seconds
        self._within = max(within_seconds, quiet_seconds)
        self._say = say
        self._condition = threading.Condition()
        self._first: float | None = None  # when the oldest delivery not drained arrived
        self._last = 0.0
        self._not_before = 0.0  # a drain that could not finish is tried again from then
        self._stopping = False
        self._current: RunControl | None = None
        self._back_off = quiet_seconds
        self._thread = threading.Thread(target=self._run, name="drain", daemon=True)

    def start(self, waiting: bool = False) -> None:
        """Start watching; `waiting`: the inbox already holds deliveries (a restart)."""
        self._thread.start()
        if waiting:
            self.notify()

    def notify(self) -> None:
        """A delivery was accepted."""
        with self._condition:
            now = time.monotonic()
            self._last = now
            self._first = self._first if self._first is not None else now
            self._condition.notify()

    def stop(self) -> None:
        """Stop, cutting a running drain short (what it fetched is loaded; its deliveries wait
        for the next start)."""
        with self._condition:
            self._stopping = True
            current = self._current
            self._condition.notify()
        if current is not None:
            current.stop(Interrupted("the receiver is stopping", signal.SIGTERM))
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while self._wait_until_due():
            results = self._drain(self._control)
            for result in results:
                self._say(result)
            with self._condition:
                self._current = None
                unfinished = any(r.outcome != "completed" for r in results)
                if unfinished and not self._stopping:
                    self._rearm(self._back_off)
                    self._back_off = min(self._back_off * 2, LONGEST_BACK_OFF_SECONDS)
                else:
                    self._back_off = self._quiet
                    if any(r.more_waiting for r in results) and not self._stopping:
                        # Not all were taken (a spent hold, a full batch): soon again, with
                        # a pause in which a waiting load takes the warehouse.
                        self._rearm(self._quiet)

    def _wait_until_due(self) -> bool:
        """Wait until a drain is due (True) or the trigger stops (False)."""
        with self._condition:
            while not self._stopping:
                if self._first is None:
                    self._condition.wait()
                    continue
                due = min(self._last + self._quiet, self._first + self._within)
                due = max(due, self._not_before)
                now = time.monotonic()
                if now >= due:
                    self._first = None
                    return True
                self._condition.wait(due - now)
            return False

    def _rearm(self, after: float) -> None:
        """Drain again `after` seconds from now, not sooner."""
        now = time.monotonic()
        self._first = self._first if self._first is not None else now
        self._not_before = now + after

    def _control(self) -> RunControl:
        control = RunControl()
        with self._condition:
            self._current = control
            if self._stopping:
                control.stop(Interrupted("the receiver is stopping", signal.SIGTERM))
        return control
