"""Rate-limit buckets: token bucket, sliding window, daily counter, and admitting by all.

As the reference describes them: a token bucket per key (10/s, burst 40), the plan's requests
per minute per workspace, an optional daily request cap, and a bucket per client address for
requests that carry no valid key.

Limits run on real (monotonic) time, not on the sandbox clock: a client's pacing is measured in
real seconds whatever simulated day it is.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(slots=True)
class Verdict:
    """The state of the tightest bucket after a request, for the X-RateLimit-* headers."""

    allowed: bool
    limit: int
    remaining: int
    reset_s: float
    scope: str

    @property
    def retry_after_s(self) -> int:
        return max(0, math.ceil(self.reset_s))


@dataclass(slots=True)
class TokenBucket:
    """`rate` tokens per second up to `capacity`; a request takes one."""

    rate: float
    capacity: int
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    updated: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = float(self.capacity)
        self.updated = self.clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def check(self, scope: str) -> Verdict:
        """What taking one token would leave, without taking it."""
        self._refill()
        if self.tokens >= 1:
            left = self.tokens - 1
            reset = 0.0 if left >= 1 else (1 - left) / self.rate
            return Verdict(True, self.capacity, int(left), reset, scope)
        return Verdict(False, self.capacity, 0, (1 - self.tokens) / self.rate, scope)

    def commit(self) -> None:
        self.tokens -= 1


@dataclass(slots=True)
class SlidingWindow:
    """At most `limit` requests in any `window_s` seconds."""

    limit: int
    window_s: float
    clock: Callable[[], float] = time.monotonic
    times: deque[float] = field(default_factory=deque)

    def check(self, scope: str) -> Verdict:
        now = self.clock()
        while self.times and self.times[0] <= now - self.window_s:
            self.times.popleft()
        if len(self.times) < self.limit:
            remaining = self.limit - len(self.times) - 1
            oldest = self.times[0] if self.times else now
            reset = 0.0 if remaining else oldest + self.window_s - now
            return Verdict(True, self.limit, remaining, reset, scope)
        return Verdict(False, self.limit, 0, self.times[0] + self.window_s - now, scope)

    def commit(self) -> None:
        self.times.append(self.clock())


@dataclass(slots=True)
class DailyCounter:
    """At most `limit` requests per sandbox day; `day_of` maps now to a day number and the
    seconds left in it."""

    limit: int
    day_of: Callable[[], tuple[int, float]]
    day: int = -1
    used: int = 0

    def check(self, scope: str) -> Verdict:
        day, seconds_left = self.day_of()
        if day != self.day:
            self.day, self.used = day, 0
        if self.used < self.limit:
            return Verdict(True, self.limit, self.limit - self.used - 1, 0.0, scope)
        return Verdict(False, self.limit, 0, seconds_left, scope)

    def commit(self) -> None:
        self.used += 1


class Bucket(Protocol):
    def check(self, scope: str) -> Verdict: ...
    def commit(self) -> None: ...


def admit(buckets: list[tuple[Bucket, str]]) -> Verdict:
    """Check every bucket; spend from all of them only if all allow the request."""
    verdicts = [bucket.check(scope) for bucket, scope in buckets]
    if all(v.allowed for v in verdicts):
        for bucket, _ in buckets:
            bucket.commit()
    return tightest(verdicts)


def tightest(verdicts: list[Verdict]) -> Verdict:
    """A refusal if any bucket refused (the longest wait), else the bucket with least left."""
    refused = [v for v in verdicts if not v.allowed]
    if refused:
        return max(refused, key=lambda v: v.reset_s)
    return min(verdicts, key=lambda v: (v.remaining, -v.reset_s))
