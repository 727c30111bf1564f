"""The HTTP client of the signing API: GET requests through the shared pacer, transient failures
retried with jittered back-off (tenacity), 429s waited out, and errors turned into the run's
exceptions. The API key is only ever put in the `Authorization` header; no message, log line or
state entry carries it.
"""

from __future__ import annotations

import logging
import random
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
from tenacity.stop import stop_base

from . import settings
from .control import RunControl
from .errors import (
    AuthError,
    DailyLimitReached,
    Forbidden,
    KeyRefused,
    NotFound,
    RetryAfterTooLong,
    ServiceUnreachable,
    SigningAPIError,
    TransientError,
)
from .pacing import Pacer

log = logging.getLogger(__name__)

# "Equal jitter": half the exponential step fixed, half random, so a retry never comes at once
# and threads that failed together do not retry together.
_HALF_BASE = settings.BACKOFF_BASE_SECONDS / 2
_HALF_MAX = settings.BACKOFF_MAX_SECONDS / 2
EQUAL_JITTER = wait_exponential(multiplier=_HALF_BASE, max=_HALF_MAX) + wait_random_exponential(
    multiplier=_HALF_BASE, max=_HALF_MAX
)


class _FailingTooLong(stop_base):
    """Stop retrying once the service has failed every request, from any thread, for the
    client's `give_up_after_seconds`: a time-out may take 30 s, so attempts alone don't bound
    the time."""

    def __init__(self, client: SigningClient) -> None:
        self._client = client

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self._client.failing_for() >= self._client.give_up_after


class SigningClient:
    """GET requests against one workspace, paced and retried; safe to share between threads."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        control: RunControl | None = None,
        pacer: Pacer | None = None,
        max_requests: int | None = None,
        timeout: float = settings.REQUEST_TIMEOUT_SECONDS,
        max_attempts: int = settings.MAX_ATTEMPTS,
        give_up_after_seconds: float = settings.GIVE_UP_AFTER_SECONDS,
        max_retry_after_seconds: float = settings.MAX_RETRY_AFTER_SECONDS,
        connections: int = settings.CHILD_CONCURRENCY + 2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.control = control or RunControl()
        self.stats = self.control.stats
        self.pacer = pacer or Pacer(control=self.control)
        if max_requests is not None:
            self.pacer.budget = max_requests
        self._max_attempts = max_attempts
        self.give_up_after = give_up_after_seconds
        self._max_retry_after = max_retry_after_seconds
        self._sleep = sleep
        self._failing_since: float | None = None  # when the current run of failures began
        self.host = httpx.URL(base_url).netloc.decode() or base_url
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=timeout,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, params: Mapping[str, str | int] | None = None) -> tuple[Any, datetime]:
        """The JSON body of a GET and the server's time when it answered.

        Transient failures are retried up to `max_attempts` times, and for at most
        `give_up_after_seconds` of failures in a row across all threads; then the run stops
        (`ServiceUnreachable`), keeping what it fetched. 429s are waited out and do not count
        as attempts; anything else raises at once."""
        retrying = Retrying(
            retry=retry_if_exception_type(TransientError),
            stop=stop_after_attempt(self._max_attempts) | _FailingTooLong(self),
            wait=EQUAL_JITTER,
            sleep=self._sleep,
            before_sleep=self._before_retry,
        )
        try:
            result: tuple[Any, datetime] = retrying(self._get_until_admitted, path, params)
        except RetryError as error:
            cause = error.last_attempt.exception()
            raise self.control.stop(
                ServiceUnreachable(
                    f"gave up on {self.host} after {error.last_attempt.attempt_number} attempts:"
                    f" {cause}"
                )
            ) from None
        return result

    def failing_for(self) -> float:
        """Seconds for which every request has failed (0 while the service answers)."""
        since = self._failing_since
        return 0.0 if since is None else time.monotonic() - since

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
            raise self._refused(status, body, path)

    def _send(
        self, path: str, params: Mapping[str, str | int] | None, endpoint: str
    ) -> tuple[httpx.Response, Any]:
        """One request through the pacer; the pacer learns from whatever comes back."""
        self.control.check()
        ticket = self.pacer.acquire()
        self.stats.request_sent()
        try:
            response = self._http.get(path, params=params)
            body = response.json() if response.content else None
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as error:
            # Time-outs, refused or dropped connections, bodies cut short of their length.
            self._failed(ticket)
            raise TransientError(f"{_describe(error)} on GET {path}") from error
        except ValueError as error:  # a body that is not JSON: cut short, or a proxy's page
            self._failed(ticket)
            raise TransientError(f"an unreadable body on GET {path}") from error
        except httpx.HTTPError as error:  # a bad URL or header: no retry can help
            self._failed(ticket)
            raise SigningAPIError(f"cannot send GET {path}: {error}") from None
        finally:
            self.stats.request_done()
        if response.status_code < 500:
            self._failing_since = None
        self.stats.count_request(endpoint)
        self.pacer.observe(response.headers, ticket)
        return response, body

    def _failed(self, ticket: int) -> None:
        """A request that got no usable answer: counted apart from answered ones."""
        self.stats.count_failed_attempt()
        self.pacer.observe(None, ticket)
        if self._failing_since is None:
            self._failing_since = time.monotonic()

    def _throttled(self, response: httpx.Response, body: Any, count: int, path: str) -> None:
        """Wait out a 429, or stop the run when waiting makes no sense within it."""
        self.stats.count_throttled()
        wait = retry_after_seconds(response.headers, body)
        if response.headers.get("x-ratelimit-scope") == "daily":
            hours = f" (resets in {wait / 3600:.1f} h)" if wait else ""
            raise self.control.stop(
                DailyLimitReached(f"the workspace's daily limit is reached{hours}")
            )
        if wait is not None and wait > self._max_retry_after:
            raise self.control.stop(
                RetryAfterTooLong(
                    f"{self.host} asked to wait {wait:,.0f} s (Retry-After), longer than "
                    f"max_retry_after_seconds ({self._max_retry_after:,.0f} s)"
                )
            )
        if count > settings.MAX_THROTTLED_RETRIES:
            raise SigningAPIError(f"still throttled after {count} tries on GET {path}")
        # Retry-After 0 means "now"; a small jittered pause keeps many threads from stampeding.
        delay = wait if wait else random.uniform(0.05, 0.25)
        log.info("429 on %s: waiting %.1f s", path, delay)
        self.pacer.pause(delay)

    def _refused(self, status: int, body: Any, path: str) -> SigningAPIError:
        """The error for a refusal; a refused key stops the whole run at once."""
        error = _error_for(status, body, path)
        if status == 401 or (status == 403 and path not in settings.SKIPPABLE_ON_403):
            return self.control.stop(KeyRefused(str(error)))
        return error

    def _before_retry(self, state: RetryCallState) -> None:
        """Count and log a retry."""
        self.stats.count_retry()
        failure = state.outcome.exception() if state.outcome else None
        log.info("%s; retry %d in %.1f s", failure, state.attempt_number, state.upcoming_sleep)


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


def _describe(error: httpx.HTTPError) -> str:
    """A transport error in words: its class, and its message when it has one."""
    detail = str(error).strip()
    return f"{type(error).__name__} ({detail})" if detail else type(error).__name__


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
        return Forbidden(f"the API key lacks a permission for GET {path} (403 forbidden{detail})")
    if status == 404:
        return NotFound(f"GET {path} answered 404{detail}")
    return SigningAPIError(f"GET {path} answered HTTP {status}{detail}")
