"""The gateway in front of `/v1`: API keys, rate limits, injected faults, limit headers.

In the order a real gateway would: authenticate the key (401), spend from the rate buckets
(429), inject configured faults, then stamp the `X-RateLimit-*`, `X-Daily-*` and `Date` headers
on whatever the route answered, errors included.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
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


class Lane:
    """One workspace's side of the gateway: the buckets of its keys, its per-minute and daily
    caps, the dice of its faults, whether it holds requests, and how many of its requests it
    served and refused, and holds now."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._key_buckets: dict[str, TokenBucket] = {}
        self._rng = random.Random(store.config.seed + 13)
        self.served = 0
        self.refused = 0
        self.held = 0
        self._holding: tuple[int | None, str | None] = (None, None)  # how the hold was armed
        self._passes: int | None = None  # requests still let through before the hold
        self._released = asyncio.Event()
        self._released.set()
        self.reset()

    def reset(self) -> None:
        """Start the workspace's buckets afresh, after a configuration change; arm or lift
        the hold when `hold_after` or `hold_key` changed."""
        config = self.store.config
        if (config.hold_after, config.hold_key) != self._holding:
            self._holding = (config.hold_after, config.hold_key)
            self._passes = config.hold_after
            if config.hold_after is None:
                self._released.set()
            else:
                self._released.clear()
        self._key_buckets.clear()
        self._minute = SlidingWindow(config.effective_requests_per_minute, 60.0)
        self._daily = (
            DailyCounter(config.daily_requests, self._sandbox_day)
            if config.daily_requests is not None
            else None
        )

    def _sandbox_day(self) -> tuple[int, float]:
        now = self.store.clock.now_ms()
        return now // DAY_MS, ((now // DAY_MS + 1) * DAY_MS - now) / 1000

    async def wait_while_held(self, token: str | None) -> None:
        """Keep a request waiting while the workspace holds the requests of its key
        (`hold_after`, `hold_key`), once the ones still let through have gone."""
        hold_key = self.store.config.hold_key
        if self._passes is None or (hold_key is not None and token != hold_key):
            return
        if self._passes > 0:
            self._passes -= 1
            return
        self.held += 1
        try:
            await self._released.wait()
        finally:
            self.held -= 1

    def admit(self, key: ApiKey, ip_bucket: TokenBucket) -> Verdict | None:
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

    def fault(self) -> Response | None:
        config = self.store.config
        roll = self._rng.random()
        if roll < config.fault_429_rate:
            style = config.fault_retry_after
            if style == "mixed":
                style = self._rng.choice(("seconds", "http-date", "zero"))
            wait = 0 if style == "zero" else config.fault_retry_after_s
            response = too_many(wait)
            if style == "http-date":
                moment = datetime.fromtimestamp(self.store.clock.now_ms() / 1000 + wait, UTC)
                response.headers["Retry-After"] = format_datetime(moment, usegmt=True)
            return response
        if roll < config.fault_429_rate + config.fault_5xx_rate:
            status = self._rng.choice((500, 502, 503))
            return error_response(status, "server_error", "injected server fault")
        return None

    def truncates(self) -> bool:
        return self._rng.random() < self.store.config.fault_truncate_rate

    def limit_headers(self, verdict: Verdict | None, arrival_ms: int) -> list[tuple[bytes, bytes]]:
        config = self.store.config
        now = self.store.clock.now_ms()
        used = self.store.daily_shipments_used.get(now // DAY_MS, 0)
        moment = datetime.fromtimestamp(arrival_ms / 1000, UTC)
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


def too_many(wait_s: int) -> Response:
    response = error_response(429, "rate_limited", "rate limit exceeded", retry_after=wait_s)
    response.headers["Retry-After"] = str(wait_s)
    return response


class Gateway:
    """Authentication, limits, faults and headers for every `/v1` request, in front of `app`.

    A request goes to the workspace whose key it carries. A request with a key no workspace
    knows is refused as the first workspace would, with its headers. The buckets per client
    address belong to the whole server, sized by the first workspace's settings.
    """

    def __init__(self, app: ASGIApp, stores: Sequence[Store]) -> None:
        self.app = app
        self.lanes = {store.workspace.id: Lane(store) for store in stores}
        self._first = self.lanes[stores[0].workspace.id]
        self._ip_buckets: dict[str, TokenBucket] = {}
        self.served = 0
        self.refused = 0

    def reset_limits(self, store: Store) -> None:
        """Start a workspace's buckets and the per-address ones afresh."""
        self.lanes[store.workspace.id].reset()
        self._ip_buckets.clear()

    def _lane_of(self, token: str | None) -> Lane:
        for lane in self.lanes.values():
            if lane.store.keys.get(token) is not None:
                return lane
        return self._first  # whose keyring then refuses the key as unknown

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client_ip = (scope.get("client") or ("", 0))[0]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = _token(headers)
        lane = self._lane_of(token)
        store = lane.store
        await lane.wait_while_held(token)  # before anything is counted: as if it came later
        # The Date header is the clock when the request arrived, never later than the data the
        # answer shows: a client that takes it as "read up to here" misses nothing.
        state = scope.setdefault("state", {})
        state["arrival_ms"] = store.clock.now_ms()
        self.served += 1
        sizes = self._first.store.config
        ip_bucket = self._ip_buckets.setdefault(
            client_ip, TokenBucket(sizes.ip_requests_per_second, sizes.ip_burst)
        )
        try:
            with store.lock:
                key = store.keys.authenticate(token, client_ip, store.clock.now_ms())
        except SandboxError as error:
            verdict = admit([(ip_bucket, "ip")]) if store.config.limits_enabled else None
            response = error_response(error.status, error.code, error.message)
            await self._reply(scope, send, response, lane, verdict)
            return
        state["api_key"] = key
        state["store"] = store
        lane.served += 1
        verdict = lane.admit(key, ip_bucket)
        if verdict is not None and not verdict.allowed:
            self.refused += 1
            lane.refused += 1
            await self._reply(scope, send, too_many(verdict.retry_after_s), lane, verdict)
            return
        fault = lane.fault()
        if fault is not None:
            await self._reply(scope, send, fault, lane, verdict)
            return
        await self._forward(scope, receive, send, lane, verdict, lane.truncates())

    @staticmethod
    async def _reply(
        scope: Scope, send: Send, response: Response, lane: Lane, verdict: Verdict | None
    ) -> None:
        response.raw_headers.extend(lane.limit_headers(verdict, scope["state"]["arrival_ms"]))

        async def no_body() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        await response(scope, no_body, send)

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        lane: Lane,
        verdict: Verdict | None,
        truncate: bool,
    ) -> None:
        arrival_ms = scope["state"]["arrival_ms"]
        started = finished = False

        async def stamped(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
                message = dict(message)
                own = {k.lower() for k, _ in message["headers"]}
                message["headers"] = [
                    (k, v) for k, v in message["headers"] if k.lower() != b"date"
                ] + [(k, v) for k, v in lane.limit_headers(verdict, arrival_ms) if k not in own]
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
            crashed = error_response(500, "server_error", "internal error")
            await self._reply(scope, send, crashed, lane, verdict)


def _token(headers: dict[str, str]) -> str | None:
    authorization = headers.get("authorization", "")
    if authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return headers.get("x-api-key")
