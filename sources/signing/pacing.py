"""The pacer: admits requests so that the service never has to refuse one.

It starts from the reference's stated rate (10/s, burst 40) and then follows the service: it
never sends while the last response said no request is left (`X-RateLimit-Remaining` minus the
requests still in flight), waits `X-RateLimit-Reset` or `Retry-After` when told to, and slows to
a per-minute plan limit once the headers reveal one (an empty bucket whose reset is two seconds
or more away). It keeps `PACE_MARGIN` below each rate it knows: at exactly the allowance the
service's clock and ours drift apart by a request now and then, and that request earns a 429.
One pacer is shared by every resource and thread of a run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from . import settings
from .control import RunControl
from .errors import RequestBudgetExhausted, RetryAfterTooLong, RunStopped


class Pacer:
    """Admits requests so that the service never has to refuse one; thread-safe."""

    def __init__(
        self,
        rate: float = settings.REQUESTS_PER_SECOND,
        burst: int = settings.BURST,
        *,
        clock: Callable[[], float] = time.monotonic,
        control: RunControl | None = None,
        budget: int | None = None,
        max_wait: float = settings.MAX_RETRY_AFTER_SECONDS,
        margin: float = settings.PACE_MARGIN,
    ) -> None:
        self.margin = margin
        self.rate = rate  # the allowance as far as the pacer knows it; it sends below it
        self.budget = budget
        self.max_wait = max_wait
        self.burst = burst
        self._clock = clock
        self._control = control or RunControl()
        self._control.on_stop(self._wake_all)
        self._cond = threading.Condition()  # its lock is reentrant: stop() calls back in here
        self._tokens = float(burst)
        self._refilled = clock()
        self._not_before = 0.0
        self._server_left: int | None = None
        self._in_flight = 0
        self._sent = 0  # requests numbered in the order they were let go
        self._learned_from = 0  # the newest request whose response updated `_server_left`
        self._waiting = 0  # threads held back right now
        self._waiting_since = 0.0

    def _wake_all(self, reason: RunStopped) -> None:
        """The run stopped: nobody should wait for a reset hours away (a daily limit) to find
        that out."""
        with self._cond:
            self._cond.notify_all()

    def acquire(self) -> int:
        """Block until one request may be sent; returns its number, for `observe`."""
        with self._cond:
            while (wait := self._wait_before_next()) > 0:
                self._hold(wait)
            self._tokens -= 1
            if self._server_left is not None:
                self._server_left -= 1
            self._in_flight += 1
            self._sent += 1
            return self._sent

    def _wait_before_next(self) -> float:
        """Seconds until the next request may go (0: now); raises if the run has stopped."""
        self._control.check()
        now = self._clock()
        pace = self.rate * (1 - self.margin)
        self._tokens = min(self.burst, self._tokens + (now - self._refilled) * pace)
        self._refilled = now
        if now < self._not_before:
            return self._not_before - now
        if self._tokens < 1:
            return (1 - self._tokens) / pace
        if self._server_left is not None and self._server_left < 1:
            if self._in_flight:
                return 1.0  # a response in flight will tell how much room there is
            self._server_left = 1  # the reset passed: probe with one request
        if self.budget is not None and self._sent >= self.budget:
            # Decided here, when a request would go, so threads held back together neither
            # overshoot the budget nor leave part of it unused.
            raise self._control.stop(
                RequestBudgetExhausted(
                    f"request budget of {self.budget} used; the next run continues"
                )
            )
        return 0.0

    def _hold(self, seconds: float) -> None:
        """Wait (lock released), counting the wall time during which anyone waits."""
        if self._waiting == 0:
            self._waiting_since = self._clock()
        self._waiting += 1
        self._cond.wait(timeout=seconds)
        self._waiting -= 1
        if self._waiting == 0:
            self._control.stats.waited(self._clock() - self._waiting_since)

    def observe(self, headers: Mapping[str, str] | None, ticket: int = 0) -> None:
        """Learn from the response to request `ticket` (`None`: it got no response)."""
        with self._cond:
            self._in_flight = max(0, self._in_flight - 1)
            if headers is not None:
                self._learn(headers, ticket)
            self._cond.notify_all()

    def _learn(self, headers: Mapping[str, str], ticket: int) -> None:
        remaining = _int_header(headers, "x-ratelimit-remaining")
        if remaining is None:
            return
        # Concurrent responses arrive out of order; an older one's count is stale and would
        # overstate the room left, so only a newer request's answer may raise the estimate.
        estimate = remaining - self._in_flight
        if ticket >= self._learned_from or self._server_left is None:
            self._learned_from = ticket
            self._server_left = estimate
        else:
            self._server_left = min(self._server_left, estimate)
        reset = _int_header(headers, "x-ratelimit-reset") or 0
        # An answer that says its own wait (a 429's Retry-After, the daily scope) is the
        # client's to judge and name; the pacer only learns its reset.
        said_its_wait = "retry-after" in headers or headers.get("x-ratelimit-scope") == "daily"
        if remaining <= 0 and reset > self.max_wait and not said_its_wait:
            # A reset hours (or, from a broken service, centuries) away is not waited out in
            # this run, any more than such a Retry-After.
            self._control.stop(
                RetryAfterTooLong(
                    f"the service asked to wait {reset:,} s (X-RateLimit-Reset), longer than "
                    f"max_retry_after_seconds ({self.max_wait:,.0f} s)"
                )
            )
            return
        if remaining <= 0 and reset > 0:
            self._not_before = max(self._not_before, self._clock() + reset)
        limit = _int_header(headers, "x-ratelimit-limit")
        if limit and remaining <= 0 and reset >= 2:
            # A per-second bucket frees a token within a second; an empty bucket that needs two
            # or more is a window limit (the plan's per minute): spread the requests evenly
            # over the minute from now on instead of bursting into the wall each time.
            self.rate = min(self.rate, limit / 60.0)

    def pause(self, seconds: float) -> None:
        """Send nothing for `seconds` (a Retry-After), then one probe whose answer reopens
        the gate: letting every waiting thread go at once would only earn more 429s."""
        with self._cond:
            self._not_before = max(self._not_before, self._clock() + max(0.0, seconds))
            self._server_left = 0
            self._learned_from = self._sent


def _int_header(headers: Mapping[str, str], name: str) -> int | None:
    try:
        return int(headers[name])
    except (KeyError, ValueError):
        return None
