"""The HTTP client of the signing API: GET requests through the shared pacer, transient failures
retried with jittered back-off (tenacity), 429s waited out, and errors turned into the run's
exceptions. The API key is only ever put in the `Authorization` header; no message, log line or
state entry carries it.

Nothing the service sends is trusted: each request has a deadline and each body a size
(`transport`), a 200 must carry `data`, and the service's words reach a message only through
`without_secret`: one clean line, the key blanked before it is cut.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
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
from .answers import (
    WANTED,
    DataShape,
    TooDeep,
    deeper_than,
    describe,
    endpoint_name,
    error_for,
    misshapen,
    retry_after_seconds,
    server_time,
    whole_number,
)
from .control import RunControl
from .errors import (
    QUOTE_LIMIT,
    DailyLimitReached,
    KeyRefused,
    ResponseTooLarge,
    RetryAfterTooLong,
    ServiceUnreachable,
    SigningAPIError,
    TransientError,
    UnexpectedAnswer,
    without_secret,
)
from .pacing import Pacer
from .transport import (
    ACCEPT_ENCODING,
    BodyTooLarge,
    DeadlineTransport,
    UnaskedEncoding,
    deadline,
    proxy_for,
    read_body,
)
from .urls import checked_base_url

log = logging.getLogger(__name__)
# What keeps a request from a usable answer (`SigningClient._unusable` says which is which).
_NO_ANSWER = (httpx.HTTPError, ValueError, zlib.error, BodyTooLarge, TooDeep, UnaskedEncoding)

# "Equal jitter": half the exponential step fixed, half random, so a retry never comes at once
# and threads that failed together do not retry together.
_HALF_BASE = settings.BACKOFF_BASE_SECONDS / 2
EXCERPT_LIMIT = 80  # the characters of a body quoted in an error
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


@dataclass(frozen=True)
class RequestLimits:
    """What bounds a client's requests, as httpx's `Timeout` and `Limits` bound its own: the
    run's budget, each socket operation, the attempts, the failures in a row, the waits the
    service may ask for, each request's deadline and answer's size, and the connections."""

    max_requests: int | None = None  # the run's budget (`--max-requests`); None: no budget
    timeout: float = settings.REQUEST_TIMEOUT_SECONDS
    max_attempts: int = settings.MAX_ATTEMPTS
    give_up_after_seconds: float = settings.GIVE_UP_AFTER_SECONDS
    max_retry_after_seconds: float = settings.MAX_RETRY_AFTER_SECONDS
    request_deadline_seconds: float = settings.REQUEST_DEADLINE_SECONDS
    max_response_bytes: int = settings.MAX_RESPONSE_BYTES
    connections: int = settings.CHILD_CONCURRENCY + 2


class SigningClient:
    """GET requests against one workspace, paced and retried; safe to share between threads."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        control: RunControl | None = None,
        pacer: Pacer | None = None,
        limits: RequestLimits | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        url = checked_base_url(base_url)
        limits = limits or RequestLimits()
        self.control = control or RunControl()
        self.stats = self.control.stats
        self.pacer = pacer or Pacer(control=self.control)
        if limits.max_requests is not None:
            self.pacer.budget = limits.max_requests
        self._max_attempts = limits.max_attempts
        self.give_up_after = limits.give_up_after_seconds
        self._max_retry_after = limits.max_retry_after_seconds
        self.request_deadline = limits.request_deadline_seconds
        self.max_response_bytes = limits.max_response_bytes
        self._sleep = sleep
        self._api_key = api_key  # only to blank it out of the service's words
        # The current run of failures: since when (the sending of its first request), and
        # when the service last answered; shared by every thread.
        self._failures = threading.Lock()
        self._failing_since: float | None = None
        self._answered_at = float("-inf")
        self.service_time: datetime | None = None  # its latest answer's `Date`: "now" for it
        self.host = url.netloc.decode()
        self.base_url = base_url.rstrip("/")
        connections = httpx.Limits(
            max_connections=limits.connections, max_keepalive_connections=limits.connections
        )
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={
                "Authorization": f"Bearer {api_key}",
                "Accept": "application/json",
                "Accept-Encoding": ACCEPT_ENCODING,
            },
            timeout=limits.timeout,
            transport=DeadlineTransport(limits=connections, proxy=proxy_for(url)),
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
            wait=self._backoff,
            sleep=self._sleep,
            before_sleep=self._before_retry,
        )
        try:
            result: tuple[Any, datetime] = retrying(self._get_until_admitted, path, params)
        except RetryError as error:
            cause = error.last_attempt.exception()
            raise self.control.stop(
                ServiceUnreachable(
                    f"gave up on {self.host} after {error.last_attempt.attempt_number} attempts"
                    f" ({self.failing_for():.0f} s of failures): {cause}"
                )
            ) from None
        with self._failures:
            self.service_time = max(result[1], self.service_time or result[1])
        return result

    def get_data(
        self,
        path: str,
        params: Mapping[str, str | int] | None = None,
        *,
        shape: DataShape = "records",
    ) -> tuple[Any, dict[str, Any], datetime]:
        """`data` of a GET's JSON body, the whole body, and the server's time. `data` must
        have `shape`: `records` (a list of objects, each with an `id`), `entries` (a list of
        objects) or `record` (one object with an `id`); an answer without it stops the run
        with one line that quotes what came instead."""
        body, answered_at = self.get(path, params)
        data = body.get("data") if isinstance(body, dict) else None
        if data is None or not isinstance(body, dict):
            reason = f"GET {self.clean(path)} answered 200 without `data` ({self._excerpt(body)})"
            raise self.control.stop(UnexpectedAnswer(reason))
        wrong = misshapen(data, shape)
        if wrong is not None:
            raise self.control.stop(
                UnexpectedAnswer(
                    f"GET {self.clean(path)} answered `data` that is not {WANTED[shape]} "
                    f"({self._excerpt(wrong)})"
                )
            )
        return data, body, answered_at

    def failing_for(self) -> float:
        """Seconds for which every request has failed (0 while the service answers)."""
        since = self._failing_since
        return 0.0 if since is None else time.monotonic() - since

    def clean(self, text: object, limit: int = QUOTE_LIMIT) -> str:
        """Words from the service (or about what it sent) as one clean line, the key blanked."""
        return without_secret(text, self._api_key, limit)

    def _excerpt(self, value: Any) -> str:
        """What a body held, in a few words: its `error` when it has one, else its start."""
        error = value.get("error") if isinstance(value, dict) else None
        if isinstance(error, dict) and (error.get("code") or error.get("message")):
            return self.clean(f"error {error.get('code')}: {error.get('message')}")
        return self.clean(orjson.dumps(value, default=str).decode(), EXCERPT_LIMIT)

    def _backoff(self, state: RetryCallState) -> float:
        """The jittered back-off, but never past the moment the service is given up on: then
        one last attempt decides, instead of a sleep that overshoots the setting."""
        left = self.give_up_after - self.failing_for()
        return max(0.0, min(EQUAL_JITTER(state), left))

    def _get_until_admitted(
        self, path: str, params: Mapping[str, str | int] | None
    ) -> tuple[Any, datetime]:
        """One attempt: send, and send again after each 429 (waiting as told)."""
        endpoint = endpoint_name(path)
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
                raise TransientError(f"HTTP {status} on GET {self.clean(path)}")
            raise self._refused(status, body, path)

    def _send(
        self, path: str, params: Mapping[str, str | int] | None, endpoint: str
    ) -> tuple[httpx.Response, Any]:
        """One request through the pacer, within its deadline and its body within its size;
        the pacer learns from whatever comes back."""
        self.control.check()
        ticket = self.pacer.acquire()
        self.stats.request_sent()
        sent_at = time.monotonic()
        try:
            with (
                deadline(self.request_deadline),
                self._http.stream("GET", path, params=params) as response,
            ):
                content = read_body(response, self.max_response_bytes)
            body = orjson.loads(content) if content else None
            if deeper_than(body, settings.MAX_JSON_DEPTH):
                raise TooDeep
        except _NO_ANSWER as error:
            self._failed(ticket, sent_at)
            unreadable = isinstance(error, ValueError | zlib.error)
            raise self._unusable(error, path, sent_at) from (error if unreadable else None)
        finally:
            self.stats.request_done()
        if response.status_code >= 500 or response.status_code == 408:
            self._note_failure(sent_at)
        else:
            self._note_answer()
        self.stats.count_request(endpoint)
        self.pacer.observe(response.headers, ticket)
        self._note_limits(response.headers)
        return response, body

    def _unusable(self, error: Exception, path: str, sent_at: float) -> SigningAPIError:
        """The exception for a request that got no usable answer: a failure that may pass
        (retried), one that comes back the same (the run stops), or one no retry can help."""
        shown = self.clean(path)
        if isinstance(
            error, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError
        ):
            # Time-outs, refused or dropped connections, bodies cut short of their length,
            # answers that did not come whole within the deadline.
            if time.monotonic() - sent_at >= self.request_deadline:
                return TransientError(
                    f"no whole answer within request_deadline_seconds "
                    f"({self.request_deadline:,.0f} s) on GET {shown}"
                )
            return TransientError(f"{self.clean(describe(error))} on GET {shown}")
        if isinstance(error, ValueError | zlib.error):  # not JSON: cut short, or a proxy's page
            return TransientError(f"an unreadable body on GET {shown}")
        if isinstance(error, BodyTooLarge):
            return self.control.stop(
                ResponseTooLarge(
                    f"GET {shown} answered more than max_response_bytes ({error.limit:,} "
                    f"bytes, decompressed); nothing more was read"
                )
            )
        if isinstance(error, TooDeep):
            return self.control.stop(
                UnexpectedAnswer(
                    f"GET {shown} answered JSON nested deeper than "
                    f"{settings.MAX_JSON_DEPTH} levels, which no record of the API is"
                )
            )
        if isinstance(error, UnaskedEncoding):
            return self.control.stop(
                UnexpectedAnswer(
                    f"GET {shown} answered in Content-Encoding {self.clean(error)}, "
                    f"which was not asked for ({ACCEPT_ENCODING} were)"
                )
            )
        # A bad URL or header: no retry can help.
        return SigningAPIError(f"cannot send GET {shown}: {self.clean(error)}")

    def _note_limits(self, headers: Mapping[str, str]) -> None:
        """The service's clock and the limits it reported, for the run record and `status`."""
        self.stats.answered(
            server_time(headers),
            headers.get("x-ratelimit-scope"),
            whole_number(headers.get("x-ratelimit-limit")),
            whole_number(headers.get("x-daily-remaining")),
        )

    def _failed(self, ticket: int, sent_at: float) -> None:
        """A request that got no usable answer: counted apart from answered ones."""
        self.stats.count_failed_attempt()
        self.pacer.observe(None, ticket)
        self._note_failure(sent_at)

    def _note_failure(self, sent_at: float) -> None:
        """A request sent at `sent_at` failed (no answer, or a 5xx or 408): the service has
        been failing since then, or since its last answer if that came later."""
        with self._failures:
            began = max(sent_at, self._answered_at)
            if self._failing_since is None or began < self._failing_since:
                self._failing_since = began

    def _note_answer(self) -> None:
        with self._failures:
            self._answered_at = time.monotonic()
            self._failing_since = None

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
            raise SigningAPIError(f"still throttled after {count} tries on GET {self.clean(path)}")
        # Retry-After 0 means "now"; a small jittered pause keeps many threads from stampeding.
        delay = wait if wait else random.uniform(0.05, 0.25)
        log.info("429 on %s: waiting %.1f s", self.clean(path), delay)
        self.pacer.pause(delay)

    def _refused(self, status: int, body: Any, path: str) -> SigningAPIError:
        """The error for a refusal; a refused key stops the whole run at once."""
        error = error_for(status, body, self.clean(path), self.clean)
        if status == 401 or (status == 403 and path not in settings.SKIPPABLE_ON_403):
            return self.control.stop(KeyRefused(str(error)))
        return error

    def _before_retry(self, state: RetryCallState) -> None:
        """Count and log a retry."""
        self.stats.count_retry()
        failure = state.outcome.exception() if state.outcome else None
        log.info("%s; retry %d in %.1f s", failure, state.attempt_number, state.upcoming_sleep)
