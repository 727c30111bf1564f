"""The HTTP client of the signing API: one pacer shared by every resource, retries, and the
errors a run can end with.

The pacer starts from the reference's stated rate (10/s, burst 40) and then follows the
service: it never sends while the last response said no request is left (`X-RateLimit-Remaining`
minus the requests still in flight), waits `X-RateLimit-Reset` or `Retry-After` when told to,
and slows to a per-minute plan limit once the headers reveal one (an empty bucket whose reset
is two seconds or more away). The API key is only ever put in
the `Authorization` header; no message, log line or state entry carries it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from . import settings

log = logging.getLogger(__name__)


class SigningAPIError(Exception):
    """Anything the signing API or the network made impossible."""


class AuthError(SigningAPIError):
    """401 or 403: the key is wrong, revoked, expired, or lacks a scope."""


class NotFound(SigningAPIError):
    """404 for an addressed resource."""


class RunStopped(SigningAPIError):
    """The run must stop early, on purpose: what was fetched is kept and the next run resumes."""


class DailyLimitReached(RunStopped):
    """A 429 whose scope is `daily`: waiting makes no sense within this run."""


class RequestBudgetExhausted(RunStopped):
    """The run used the number of requests it was allowed (`--max-requests`)."""


@dataclass
class RunStats:
    """What a run cost the service; shown in the summary and kept for `signing-etl status`."""

    requests: int = 0
    throttled: int = 0
    retries: int = 0
    waited_seconds: float = 0.0
    by_endpoint: Counter[str] = field(default_factory=Counter)
    rows: Counter[str] = field(default_factory=Counter)
    stop_reason: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, endpoint: str) -> None:
        with self._lock:
            self.requests += 1
            self.by_endpoint[endpoint] += 1

    def waited(self, seconds: float) -> None:
        with self._lock:
            self.waited_seconds += seconds


class Pacer:
    """Admits requests so that the service never has to refuse one; thread-safe."""

    def __init__(
        self,
        rate: float = settings.REQUESTS_PER_SECOND,
        burst: int = settings.BURST,
        *,
        clock: Callable[[], float] = time.monotonic,
        stats: RunStats | None = None,
        budget: int | None = None,
    ) -> None:
        self.rate = rate
        self.budget = budget
        self.burst = burst
        self._clock = clock
        self._stats = stats or RunStats()
        self._cond = threading.Condition()
        self._tokens = float(burst)
        self._refilled = clock()
        self._not_before = 0.0
        self._server_left: int | None = None
        self._in_flight = 0
        self._sent = 0  # requests numbered in the order they were let go
        self._learned_from = 0  # the newest request whose response updated `_server_left`
        self._cancelled: BaseException | None = None

    def cancel(self, reason: BaseException) -> None:
        """Wake every waiting thread with `reason`: the run stops, nobody should wait for a
        reset hours away (a daily limit) to find that out."""
        with self._cond:
            self._cancelled = reason
            self._cond.notify_all()

    def acquire(self) -> int:
        """Block until one request may be sent; returns its number, for `observe`."""
        started = self._clock()
        with self._cond:
            while True:
                if self._cancelled is not None:
                    raise self._cancelled
                now = self._clock()
                self._tokens = min(self.burst, self._tokens + (now - self._refilled) * self.rate)
                self._refilled = now
                if now < self._not_before:
                    wait = self._not_before - now
                elif self._tokens < 1:
                    wait = (1 - self._tokens) / self.rate
                elif self._server_left is not None and self._server_left < 1:
                    if self._in_flight:
                        wait = 1.0  # a response in flight will tell how much room there is
                    else:
                        self._server_left = 1  # the reset passed: probe with one request
                        continue
                else:
                    if self.budget is not None and self._sent >= self.budget:
                        # Decided here, when a request would go, so threads held back
                        # together neither overshoot the budget nor leave part of it unused.
                        self._cancelled = RequestBudgetExhausted(
                            f"request budget of {self.budget} used; the next run continues"
                        )
                        self._cond.notify_all()
                        raise self._cancelled
                    self._tokens -= 1
                    if self._server_left is not None:
                        self._server_left -= 1
                    self._in_flight += 1
                    self._sent += 1
                    ticket = self._sent
                    break
                self._cond.wait(timeout=wait)
        waited = self._clock() - started
        if waited > 0.001:
            self._stats.waited(waited)
        return ticket

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


def retry_after_seconds(headers: Mapping[str, str], body: Any) -> float | None:
    """`Retry-After` in seconds, given as seconds, as an HTTP date (measured against the
    response's own `Date`, so clock skew does not matter), or only in the body."""
    raw = headers.get("retry-after")
    if raw is not None:
        raw = raw.strip()
        try:
            return max(0.0, float(raw))
        except ValueError:
            pass
        try:
            moment = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            moment = None
        if moment is not None:
            now = server_time(headers) or datetime.now(UTC)
            return max(0.0, (moment - now).total_seconds())
    if isinstance(body, dict) and isinstance(body.get("retry_after"), int | float):
        return max(0.0, float(body["retry_after"]))
    return None


def server_time(headers: Mapping[str, str]) -> datetime | None:
    """The service's clock from the `Date` header, if it sent one."""
    try:
        moment = parsedate_to_datetime(headers["date"])
    except (KeyError, TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class SigningClient:
    """GET requests against one workspace, paced and retried; safe to share between threads."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        stats: RunStats | None = None,
        pacer: Pacer | None = None,
        max_requests: int | None = None,
        timeout: float = settings.REQUEST_TIMEOUT_SECONDS,
        max_attempts: int = settings.MAX_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.stats = stats or RunStats()
        self.pacer = pacer or Pacer(stats=self.stats)
        if max_requests is not None:
            self.pacer.budget = max_requests
        self._max_attempts = max_attempts
        self._sleep = sleep
        self._stopped: RunStopped | None = None
        self._lock = threading.Lock()
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=timeout,
            limits=httpx.Limits(max_connections=settings.CHILD_CONCURRENCY + 2),
        )

    def close(self) -> None:
        self._http.close()

    @property
    def stopped(self) -> RunStopped | None:
        """Why the run stopped early, once it has."""
        return self._stopped

    def get(self, path: str, params: Mapping[str, str | int] | None = None) -> tuple[Any, datetime]:
        """The JSON body of a GET and the server's time when it answered."""
        endpoint = _endpoint_name(path)
        attempt = 0
        throttled = 0
        while True:
            self._check_stopped()
            try:
                ticket = self.pacer.acquire()
            except RunStopped as reason:
                with self._lock:
                    if self._stopped is None:
                        self._stopped = reason
                        self.stats.stop_reason = str(reason)
                raise
            self.stats.count(endpoint)
            try:
                response = self._http.get(path, params=params)
                body = response.json() if response.content else None
            except (httpx.TransportError, ValueError) as error:
                # Time-outs, refused or dropped connections, bodies cut short of their length.
                self.pacer.observe(None, ticket)
                attempt += 1
                self._retry_or_raise(attempt, f"{type(error).__name__} on GET {path}")
                continue
            self.pacer.observe(response.headers, ticket)
            status = response.status_code
            if status == 200:
                return body, server_time(response.headers) or datetime.now(UTC)
            if status == 429:
                throttled += 1
                self._throttled(response, body, throttled, path)
                continue
            if status >= 500 or status == 408:
                attempt += 1
                self._retry_or_raise(attempt, f"HTTP {status} on GET {path}")
                continue
            raise _error_for(status, body, path)

    def _check_stopped(self) -> None:
        with self._lock:
            if self._stopped is not None:
                raise self._stopped

    def _stop(self, reason: RunStopped) -> None:
        """Stop the run (called under `_lock`): every later request and every waiting thread
        raises `reason`."""
        self._stopped = reason
        self.stats.stop_reason = str(reason)
        self.pacer.cancel(reason)
        raise reason

    def _throttled(self, response: httpx.Response, body: Any, count: int, path: str) -> None:
        with self.stats._lock:
            self.stats.throttled += 1
        wait = retry_after_seconds(response.headers, body)
        if response.headers.get("x-ratelimit-scope") == "daily":
            hours = f" (resets in {wait / 3600:.1f} h)" if wait else ""
            with self._lock:
                self._stop(
                    DailyLimitReached(
                        f"the workspace's daily limit is reached{hours}; the next run continues"
                    )
                )
        if count > settings.MAX_THROTTLED_RETRIES:
            raise SigningAPIError(f"still throttled after {count} tries on GET {path}")
        # Retry-After 0 means "now"; a small jittered pause keeps many threads from stampeding.
        delay = wait if wait else random.uniform(0.05, 0.25)
        log.info("429 on %s: waiting %.1f s", path, delay)
        self.pacer.pause(delay)

    def _retry_or_raise(self, attempt: int, what: str) -> None:
        if attempt >= self._max_attempts:
            raise SigningAPIError(f"{what}, {attempt} attempts failed")
        with self.stats._lock:
            self.stats.retries += 1
        cap = min(settings.BACKOFF_MAX_SECONDS, settings.BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))
        delay = random.uniform(cap / 2, cap)  # "equal jitter": never zero, never synchronized
        log.info("%s; retry %d in %.1f s", what, attempt, delay)
        self.stats.waited(delay)
        self._sleep(delay)


def _endpoint_name(path: str) -> str:
    """`/shipments/shp_1/events` -> `/shipments/{id}/events`, for per-endpoint counts."""
    parts = path.strip("/").split("/")
    return "/" + "/".join(p if i % 2 == 0 else "{id}" for i, p in enumerate(parts))


def _error_for(status: int, body: Any, path: str) -> SigningAPIError:
    error = body.get("error", {}) if isinstance(body, dict) else {}
    message = error.get("message") if isinstance(error, dict) else None
    detail = f": {message}" if message else ""
    if status == 401:
        return AuthError(f"the API key was refused (401 unauthorized{detail}); check the key")
    if status == 403:
        return AuthError(f"the API key lacks a permission (403 forbidden{detail})")
    if status == 404:
        return NotFound(f"GET {path} answered 404{detail}")
    return SigningAPIError(f"GET {path} answered HTTP {status}{detail}")
