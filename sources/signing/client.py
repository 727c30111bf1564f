"""The HTTP client of the signing API: GET requests through the shared pacer, transient failures
retried with jittered back-off (tenacity), 429s waited out, and errors turned into the run's
exceptions. The API key is only ever put in the `Authorization` header; no message, log line or
state entry carries it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random_exponential,
)

from . import settings
from .errors import (
    AuthError,
    DailyLimitReached,
    NotFound,
    RunStopped,
    SigningAPIError,
    TransientError,
)
from .pacing import Pacer
from .stats import RunStats

log = logging.getLogger(__name__)

# "Equal jitter": half the exponential step fixed, half random, so a retry never comes at once
# and threads that failed together do not retry together.
_HALF_BASE = settings.BACKOFF_BASE_SECONDS / 2
_HALF_MAX = settings.BACKOFF_MAX_SECONDS / 2
EQUAL_JITTER = wait_exponential(multiplier=_HALF_BASE, max=_HALF_MAX) + wait_random_exponential(
    multiplier=_HALF_BASE, max=_HALF_MAX
)


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
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=timeout,
            limits=httpx.Limits(max_connections=settings.CHILD_CONCURRENCY + 2),
        )

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, params: Mapping[str, str | int] | None = None) -> tuple[Any, datetime]:
        """The JSON body of a GET and the server's time when it answered.

        Transient failures are retried up to `max_attempts` times; 429s are waited out and do
        not count as attempts; anything else raises at once."""
        retrying = Retrying(
            retry=retry_if_exception_type(TransientError),
            stop=stop_after_attempt(self._max_attempts),
            wait=EQUAL_JITTER,
            sleep=self._sleep,
            before_sleep=self._before_retry,
        )
        try:
            result: tuple[Any, datetime] = retrying(self._get_until_admitted, path, params)
        except RetryError as error:
            last = error.last_attempt.exception()
            raise SigningAPIError(f"{last}, {self._max_attempts} attempts failed") from None
        return result

    def _get_until_admitted(
        self, path: str, params: Mapping[str, str | int] | None
    ) -> tuple[Any, datetime]:
        """One attempt: send, and send again after each 429 (waiting as told)."""
        endpoint = _endpoint_name(path)
        throttled = 0
        while True:
            response, body = self._send(path, params, endpoint)
            status = response.status_code
            if status == 200:
                return body, server_time(response.headers) or datetime.now(UTC)
            if status == 429:
                throttled += 1
                self._throttled(response, body, throttled, path)
                continue
            if status >= 500 or status == 408:
                raise TransientError(f"HTTP {status} on GET {path}")
            raise _error_for(status, body, path)

    def _send(
        self, path: str, params: Mapping[str, str | int] | None, endpoint: str
    ) -> tuple[httpx.Response, Any]:
        """One request through the pacer; the pacer learns from whatever comes back."""
        self._check_stopped()
        try:
            ticket = self.pacer.acquire()
        except RunStopped as reason:
            self._note_stop(reason)
            raise
        self.stats.count_request(endpoint)
        try:
            response = self._http.get(path, params=params)
            body = response.json() if response.content else None
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as error:
            # Time-outs, refused or dropped connections, bodies cut short of their length.
            self.pacer.observe(None, ticket)
            raise TransientError(f"{type(error).__name__} on GET {path}") from error
        except ValueError as error:  # a body that is not JSON: cut short, or a proxy's page
            self.pacer.observe(None, ticket)
            raise TransientError(f"an unreadable body on GET {path}") from error
        except httpx.HTTPError as error:  # a bad URL or header: no retry can help
            self.pacer.observe(None, ticket)
            raise SigningAPIError(f"cannot send GET {path}: {error}") from None
        self.pacer.observe(response.headers, ticket)
        return response, body

    def _check_stopped(self) -> None:
        with self._lock:
            if self._stopped is not None:
                raise self._stopped

    def _note_stop(self, reason: RunStopped) -> None:
        with self._lock:
            if self._stopped is None:
                self._stopped = reason
        self.stats.stopped(str(reason))

    def _stop(self, reason: RunStopped) -> None:
        """Stop the run: every later request and every waiting thread raises `reason`."""
        self._note_stop(reason)
        self.pacer.cancel(reason)
        raise reason

    def _throttled(self, response: httpx.Response, body: Any, count: int, path: str) -> None:
        self.stats.count_throttled()
        wait = retry_after_seconds(response.headers, body)
        if response.headers.get("x-ratelimit-scope") == "daily":
            hours = f" (resets in {wait / 3600:.1f} h)" if wait else ""
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

    def _before_retry(self, state: RetryCallState) -> None:
        """Count and log a retry, and its back-off as time waited."""
        self.stats.count_retry()
        delay = state.upcoming_sleep
        self.stats.waited(delay)
        failure = state.outcome.exception() if state.outcome else None
        log.info("%s; retry %d in %.1f s", failure, state.attempt_number, delay)


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
