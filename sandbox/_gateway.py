"""The gateway in front of `/v1`: API keys, rate limits, injected faults, limit headers.

In the order a real gateway would: authenticate the key (401), spend from the rate buckets
(429), inject configured faults, then stamp the `X-RateLimit-*`, `X-Daily-*` and `Date` headers
on whatever the route answered, errors included.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import format_datetime

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._errors import SandboxError
from ._http import error_response
from ._keys import ApiKey
from ._limits import Bucket, DailyCounter, SlidingWindow, TokenBucket, Verdict, admit
from ._store import Store
from ._timeline import DAY_MS


class Gateway:
    """Authentication, limits, faults and headers for every `/v1` request, in front of `app`."""

    def __init__(self, app: ASGIApp, store: Store) -> None:
        self.app = app
        self.store = store
        self._key_buckets: dict[str, TokenBucket] = {}
        self._ip_buckets: dict[str, TokenBucket] = {}
        self._rng = random.Random(store.config.seed + 13)
        self.reset_limits()
        self.served = 0
        self.refused = 0

    def reset_limits(self) -> None:
        """Start all buckets afresh, after a configuration change."""
        config = self.store.config
        self._key_buckets.clear()
        self._ip_buckets.clear()
        self._minute = SlidingWindow(config.effective_requests_per_minute, 60.0)
        self._daily = (
            DailyCounter(config.daily_requests, self._sandbox_day)
            if config.daily_requests is not None
            else None
        )

    def _sandbox_day(self) -> tuple[int, float]:
        now = self.store.clock.now_ms()
        return now // DAY_MS, ((now // DAY_MS + 1) * DAY_MS - now) / 1000

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        config = self.store.config
        # The Date header is the clock when the request arrived, never later than the data the
        # answer shows: a client that takes it as "read up to here" misses nothing.
        state = scope.setdefault("state", {})
        state["arrival_ms"] = self.store.clock.now_ms()
        client_ip = (scope.get("client") or ("", 0))[0]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = _token(headers)
        ip_bucket = self._ip_buckets.setdefault(
            client_ip, TokenBucket(config.ip_requests_per_second, config.ip_burst)
        )
        try:
            with self.store.lock:
                key = self.store.keys.authenticate(token, client_ip, self.store.clock.now_ms())
        except SandboxError as error:
            verdict = admit([(ip_bucket, "ip")]) if config.limits_enabled else None
            await self._reply(
                scope, send, error_response(error.status, error.code, error.message), verdict
            )
            return
        state["api_key"] = key
        state["store"] = self.store
        verdict = self._admit(key, ip_bucket)
        if verdict is not None and not verdict.allowed:
            self.refused += 1
            await self._reply(scope, send, self._too_many(verdict.retry_after_s), verdict)
            return
        fault = self._fault()
        if fault is not None:
            await self._reply(scope, send, fault, verdict)
            return
        truncate = self._rng.random() < config.fault_truncate_rate
        await self._forward(scope, receive, send, verdict, truncate)

    def _admit(self, key: ApiKey, ip_bucket: TokenBucket) -> Verdict | None:
        config = self.store.config
        if not config.limits_enabled:
            return None
        key_bucket = self._key_buckets.setdefault(
            key.secret, TokenBucket(config.requests_per_second, config.burst)
        )
        buckets: list[tuple[Bucket, str]] = [
            (key_bucket, "key"),
            (self._minute, "key"),
            (ip_bucket, "ip"),
        ]
        if self._daily is not None:
            buckets.append((self._daily, "daily"))
        return admit(buckets)

    def _fault(self) -> Response | None:
        config = self.store.config
        roll = self._rng.random()
        if roll < config.fault_429_rate:
            style = config.fault_retry_after
            if style == "mixed":
                style = self._rng.choice(("seconds", "http-date", "zero"))
            wait = 0 if style == "zero" else 1
            response = self._too_many(wait)
            if style == "http-date":
                moment = datetime.fromtimestamp(self.store.clock.now_ms() / 1000 + wait, UTC)
                response.headers["Retry-After"] = format_datetime(moment, usegmt=True)
            return response
        if roll < config.fault_429_rate + config.fault_5xx_rate:
            status = self._rng.choice((500, 502, 503))
            return error_response(status, "server_error", "injected server fault")
        return None

    @staticmethod
    def _too_many(wait_s: int) -> Response:
        response = error_response(429, "rate_limited", "rate limit exceeded", retry_after=wait_s)
        response.headers["Retry-After"] = str(wait_s)
        return response

    def _limit_headers(self, verdict: Verdict | None, scope: Scope) -> list[tuple[bytes, bytes]]:
        config = self.store.config
        now = self.store.clock.now_ms()
        used = self.store.daily_shipments_used.get(now // DAY_MS, 0)
        moment = datetime.fromtimestamp(scope["state"]["arrival_ms"] / 1000, UTC)
        pairs = [
            ("date", format_datetime(moment, usegmt=True)),
            ("x-daily-limit", str(config.daily_shipments)),
            ("x-daily-remaining", str(max(0, config.daily_shipments - used))),
        ]
        if verdict is None:  # limits off: report the bucket as never empty
            verdict = Verdict(True, config.burst, config.burst, 0.0, "key")
        pairs += [
            ("x-ratelimit-limit", str(verdict.limit)),
            ("x-ratelimit-remaining", str(verdict.remaining)),
            ("x-ratelimit-reset", str(verdict.retry_after_s)),
            ("x-ratelimit-scope", verdict.scope),
        ]
        return [(k.encode(), v.encode()) for k, v in pairs]

    async def _reply(
        self, scope: Scope, send: Send, response: Response, verdict: Verdict | None
    ) -> None:
        self.served += 1
        response.raw_headers.extend(self._limit_headers(verdict, scope))

        async def no_body() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        await response(scope, no_body, send)

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send, verdict: Verdict | None, truncate: bool
    ) -> None:
        self.served += 1
        started = finished = False

        async def stamped(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
                message = dict(message)
                own = {k.lower() for k, _ in message["headers"]}
                message["headers"] = [
                    (k, v) for k, v in message["headers"] if k.lower() != b"date"
                ] + [(k, v) for k, v in self._limit_headers(verdict, scope) if k not in own]
            elif message["type"] == "http.response.body" and truncate and message.get("body"):
                message = {
                    **message,
                    "body": message["body"][: len(message["body"]) // 2],
                    "more_body": False,
                }
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                finished = True

        try:
            await self.app(scope, receive, stamped)
        except Exception:
            # Starlette's error middleware answers a crash itself and then re-raises it: the
            # client already has its 500, so only a half-sent response is worth re-raising.
            if finished:
                return
            if started:
                raise
            await self._reply(
                scope, send, error_response(500, "server_error", "internal error"), verdict
            )


def _token(headers: dict[str, str]) -> str | None:
    authorization = headers.get("authorization", "")
    if authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return headers.get("x-api-key")
