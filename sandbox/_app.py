"""The ASGI application: API v1 under `/v1`, the OpenAPI document, and `/_sandbox` admin.

One middleware does what every `/v1` request goes through, in the order a real gateway would:
authenticate (401), spend from the rate buckets (429), inject configured faults, then stamp the
`X-RateLimit-*`, `X-Daily-*` and `Date` headers on whatever the route answered, errors included.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import yaml
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._limits import Bucket, DailyCounter, SlidingWindow, TokenBucket, Verdict, admit
from ._model import JSON, WEBHOOK_EVENTS, ApiKey
from ._simulation import DAY_MS
from ._store import DailyAllowanceExhausted, SandboxConfig, SandboxError, Store
from ._webhooks import WebhookDispatcher

OPENAPI_PATH = Path(__file__).with_name("openapi.yaml")
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_INT64 = 2**63 - 1


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def error_response(status: int, code: str, message: str, **extra: Any) -> Response:
    return json_response({"error": {"code": code, "message": message}, **extra}, status)


# ---------------------------------------------------------------------- parameters
def _int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"[+-]?\d+", raw.strip()):
        raise SandboxError(422, "invalid_request", f"{name} must be an integer")
    try:
        value = int(raw)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        value = MAX_INT64 + 1
    if value > MAX_INT64:  # an answer can only echo a 64-bit integer
        raise SandboxError(422, "invalid_request", f"{name} is out of range")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise SandboxError(422, "invalid_request", f"{name} must be {bounds}")
    return value


def parse_since(raw: str | None) -> int | None:
    """`updated_since` as epoch milliseconds or ISO 8601 (naive means UTC)."""
    if raw is None:
        return None
    text = raw.strip()
    if re.fullmatch(r"\d{1,15}", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise SandboxError(
            422, "invalid_request", "updated_since must be ISO 8601 or milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return int(moment.timestamp() * 1000)
    except (OverflowError, ValueError, OSError):
        raise SandboxError(422, "invalid_request", "updated_since out of range") from None


def _bool_param(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return False
    lowered = raw.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise SandboxError(422, "invalid_request", f"{name} must be true or false")


def _list_params(request: Request) -> tuple[int | None, int, int]:
    return (
        parse_since(request.query_params.get("updated_since")),
        _int_param(request, "offset", 0, 0, None),
        _int_param(request, "limit", 50, 1, 200),
    )


async def _json_body(request: Request) -> JSON:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise SandboxError(422, "invalid_request", "body must be JSON") from None
    if not isinstance(body, dict):
        raise SandboxError(422, "invalid_request", "body must be a JSON object")
    return body


def _check_types(body: JSON, rules: dict[str, tuple[type | tuple[type, ...], ...]]) -> None:
    """Reject a body whose known fields have the wrong JSON type; unknown fields are ignored."""
    for name, allowed in rules.items():
        if name not in body:
            continue
        value = body[name]
        if any(
            isinstance(value, t) and not (t is int and isinstance(value, bool)) for t in allowed
        ):
            continue
        raise SandboxError(422, "invalid_request", f"{name} has the wrong type")


def _string_list(body: JSON, name: str) -> None:
    if name in body and not (
        isinstance(body[name], list) and all(isinstance(v, str) for v in body[name])
    ):
        raise SandboxError(422, "invalid_request", f"{name} must be an array of strings")


def _string_map(body: JSON, name: str) -> None:
    value = body.get(name)
    if (
        name in body
        and value is not None
        and not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values()))
    ):
        raise SandboxError(422, "invalid_request", f"{name} must map strings to strings")


def _require(request: Request, scope_name: str) -> None:
    key: ApiKey = request.state.api_key
    if scope_name not in key.scopes:
        raise SandboxError(403, "forbidden", f"this API key lacks the {scope_name!r} scope")


# ---------------------------------------------------------------------- routes
class Routes:
    """The v1 endpoints; each reads or changes the store under its lock."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def me(self, request: Request) -> Response:
        _require(request, "read")
        ws = self.store.workspace
        return json_response(
            {
                "workspace": {"id": ws.id, "name": ws.name, "slug": ws.slug, "plan": ws.plan},
                "key_name": request.state.api_key.name,
                "api_version": "v1",
            }
        )

    @staticmethod
    def _envelope(items: list[JSON], total: int, limit: int, offset: int) -> Response:
        return json_response({"data": items, "total": total, "limit": limit, "offset": offset})

    async def list_documents(self, request: Request) -> Response:
        _require(request, "read")
        since, offset, limit = _list_params(request)
        with self.store.lock:
            page = self.store.list_documents(
                since, offset, limit, request.query_params.get("search")
            )
            items = [d.to_json() for d in page.items]
        return self._envelope(items, page.total, limit, offset)

    async def get_document(self, request: Request) -> Response:
        _require(request, "read")
        with self.store.lock:
            doc = self.store.documents.by_id.get(request.path_params["id"])
            if doc is None:
                raise SandboxError(404, "not_found", "document not found")
            return json_response({"data": doc.to_json(detail=True)})

    async def list_shipments(self, request: Request) -> Response:
        _require(request, "read")
        since, offset, limit = _list_params(request)
        status = request.query_params.get("status")
        if status is not None and status not in ("sent", "opened", "signed", "expired", "revoked"):
            raise SandboxError(
                422, "invalid_request", "status must be sent, opened, signed, expired or revoked"
            )
        with self.store.lock:
            page = self.store.list_shipments(
                since,
                offset,
                limit,
                status=status,
                document_id=request.query_params.get("document_id"),
                include_archived=_bool_param(request, "include_archived"),
            )
            items = [s.to_json() for s in page.items]
        return self._envelope(items, page.total, limit, offset)

    async def create_shipment(self, request: Request) -> Response:
        _require(request, "send")
        body = await _json_body(request)
        if not isinstance(body.get("document_id"), str):
            raise SandboxError(422, "invalid_request", "document_id (string) is required")
        _check_types(
            body,
            {
                "channel": (str,),
                "recipients": (list,),
                "expires_in_days": (int,),
                "signature_level": (str,),
                "password": (str, type(None)),
                "message": (str,),
                "field_values": (dict,),
                "placeholders": (dict,),
            },
        )
        _string_list(body, "contact_ids")
        _string_list(body, "group_ids")
        _string_map(body, "placeholders")
        for recipient in body.get("recipients") or []:
            if not isinstance(recipient, dict):
                raise SandboxError(422, "invalid_request", "recipients must be objects")
            _check_types(recipient, dict.fromkeys(("name", "email", "company"), (str,)))
        days = body.get("expires_in_days")
        if days is not None and not 1 <= days <= 365:
            raise SandboxError(422, "invalid_request", "expires_in_days must be 1 to 365")
        with self.store.lock:
            status, reply = self.store.create_shipment(body, request.headers.get("idempotency-key"))
        return json_response(reply, status)

    async def get_shipment(self, request: Request) -> Response:
        _require(request, "read")
        with self.store.lock:
            shipment = self.store.find_shipment(request.path_params["id"])
            return json_response({"data": shipment.to_json()})

    async def shipment_fields(self, request: Request) -> Response:
        _require(request, "read")
        with self.store.lock:
            return json_response(
                self.store.find_shipment(request.path_params["id"]).filled_fields()
            )

    async def shipment_events(self, request: Request) -> Response:
        _require(request, "read")
        limit = _int_param(request, "limit", 100, 1, 500)
        with self.store.lock:
            events = self.store.find_shipment(request.path_params["id"]).audit_events()
        return json_response({"data": events[::-1][:limit]})

    async def list_contacts(self, request: Request) -> Response:
        _require(request, "read")
        since, offset, limit = _list_params(request)
        with self.store.lock:
            page = self.store.list_contacts(
                since,
                offset,
                limit,
                request.query_params.get("search"),
                request.query_params.get("email"),
            )
            items = [c.to_json() for c in page.items]
        return self._envelope(items, page.total, limit, offset)

    async def upsert_contact(self, request: Request) -> Response:
        _require(request, "write")
        body = await _json_body(request)
        _check_types(body, dict.fromkeys(("email", "id", "name"), (str,)))
        _check_types(
            body, {name: (str, type(None)) for name in ("phone", "company", "position", "notes")}
        )
        _string_map(body, "custom")
        _string_list(body, "group_ids")
        if isinstance(body.get("email"), str) and "@" not in body["email"]:
            raise SandboxError(422, "invalid_request", "email is not an e-mail address")
        with self.store.lock:
            status, contact = self.store.upsert_contact(body)
            return json_response({"data": contact.to_json()}, status)

    async def get_contact(self, request: Request) -> Response:
        _require(request, "read")
        with self.store.lock:
            contact = self.store.contacts.by_id.get(request.path_params["id"])
            if contact is None:
                raise SandboxError(404, "not_found", "contact not found")
            return json_response({"data": contact.to_json()})

    async def list_webhooks(self, request: Request) -> Response:
        _require(request, "read")
        with self.store.lock:
            hooks = [h.to_json() for h in self.store.webhooks.values()]
        return json_response({"data": hooks, "events": list(WEBHOOK_EVENTS)})

    async def create_webhook(self, request: Request) -> Response:
        _require(request, "write")
        body = await _json_body(request)
        event, target = body.get("event"), body.get("target_url")
        if event not in WEBHOOK_EVENTS:
            raise SandboxError(
                422, "invalid_request", f"event must be one of {', '.join(WEBHOOK_EVENTS)}"
            )
        if not isinstance(target, str) or not _acceptable_target(target):
            raise SandboxError(
                422, "invalid_request", "target_url must be an HTTPS URL (http only for localhost)"
            )
        with self.store.lock:
            hook = self.store.create_webhook(event, target)
            return json_response({"data": hook.to_json(with_secret=True)}, 201)

    async def get_webhook(self, request: Request) -> Response:
        _require(request, "read")
        with self.store.lock:
            hook = self.store.webhooks.get(request.path_params["id"])
            if hook is None:
                raise SandboxError(404, "not_found", "webhook not found")
            return json_response({"data": hook.to_json()})

    async def delete_webhook(self, request: Request) -> Response:
        _require(request, "write")
        hook_id = request.path_params["id"]
        with self.store.lock:
            self.store.delete_webhook(hook_id)
        return json_response({"data": {"id": hook_id, "deleted": True}})


# An absolute http(s) URI as RFC 3986 spells it: only its characters, `[]` only around an IP
# literal, percent signs only in escapes. (`urlsplit` alone accepts spaces and drops tabs.)
_CHARS = r"A-Za-z0-9\-._~!$&'()*+,;="
_ESCAPE = r"%[0-9A-Fa-f]{2}"
_URI = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*://"
    rf"(?:(?:[{_CHARS}:]|{_ESCAPE})*@)?"
    rf"(?:\[[0-9A-Fa-f:.]+\]|(?:[{_CHARS}]|{_ESCAPE})*)(?::[0-9]*)?"
    rf"(?:/(?:[{_CHARS}:@/]|{_ESCAPE})*)?"
    rf"(?:\?(?:[{_CHARS}:@/?]|{_ESCAPE})*)?"
    rf"(?:#(?:[{_CHARS}:@/?]|{_ESCAPE})*)?"
)


def _acceptable_target(url: str) -> bool:
    if not _URI.fullmatch(url):
        return False
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        return False
    if not parts.hostname:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOCAL_HOSTS)


# ---------------------------------------------------------------------- the gateway
class Gateway:
    """Authentication, limits, faults and headers for every `/v1` request."""

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
        if scope["type"] != "http" or not scope["path"].startswith("/v1"):
            await self.app(scope, receive, send)
            return
        config = self.store.config
        # The Date header is the clock when the request arrived, never later than the data the
        # answer shows: a client that takes it as "read up to here" misses nothing.
        scope.setdefault("state", {})["arrival_ms"] = self.store.clock.now_ms()
        client_ip = (scope.get("client") or ("", 0))[0]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = _token(headers)
        ip_bucket = self._ip_buckets.setdefault(
            client_ip, TokenBucket(config.ip_requests_per_second, config.ip_burst)
        )
        try:
            with self.store.lock:
                key = self.store.authenticate(token, client_ip)
        except SandboxError as error:
            verdict = admit([(ip_bucket, "ip")]) if config.limits_enabled else None
            await self._reply(
                scope, send, error_response(error.status, error.code, error.message), verdict
            )
            return
        scope.setdefault("state", {})["api_key"] = key
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


# ---------------------------------------------------------------------- admin
class Admin:
    """`/_sandbox`: move the clock, run activity, change limits and faults, make keys."""

    def __init__(
        self, store: Store, gateway: Callable[[], Gateway], dispatcher: WebhookDispatcher
    ) -> None:
        self.store = store
        self.gateway = gateway
        self.dispatcher = dispatcher
        self.activity: asyncio.Task[None] | None = None

    async def state(self, request: Request) -> Response:
        with self.store.lock:
            store = self.store
            return json_response(
                {
                    "now": _iso_now(store),
                    "workspace_id": store.workspace.id,
                    "counts": {
                        "documents": len(store.documents),
                        "contacts": len(store.contacts),
                        "shipments": len(store.shipments),
                        "webhooks": len(store.webhooks),
                    },
                    "requests_served": self.gateway().served,
                    "requests_refused": self.gateway().refused,
                    "webhook_attempts": len(self.dispatcher.attempts),
                    "activity_running": self.activity is not None and not self.activity.done(),
                    "generation_seconds": round(store.generation_seconds, 3),
                }
            )

    async def advance(self, request: Request) -> Response:
        body = await _json_body(request)
        units = {"minutes": 60_000, "hours": 3_600_000, "days": DAY_MS}
        total = 0.0
        for name, factor in units.items():
            value = body.get(name, 0)
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise SandboxError(422, "invalid_request", f"{name} must be a positive number")
            total += value * factor
        counts = await asyncio.get_running_loop().run_in_executor(
            None, self.store.advance, int(total)
        )
        return json_response({"now": _iso_now(self.store), **counts})

    async def touch(self, request: Request) -> Response:
        body = await _json_body(request)
        count = body.get("count", 1)
        if not isinstance(count, int) or count < 0:
            raise SandboxError(422, "invalid_request", "count must be a positive integer")
        touched = self.store.touch(str(body.get("entity")), count)
        return json_response({"touched": touched, "now": _iso_now(self.store)})

    async def configure(self, request: Request) -> Response:
        body = await _json_body(request)
        config: SandboxConfig = self.store.config
        allowed = {
            "order",
            "limits_enabled",
            "requests_per_second",
            "burst",
            "requests_per_minute",
            "daily_shipments",
            "daily_requests",
            "fault_429_rate",
            "fault_5xx_rate",
            "fault_truncate_rate",
            "fault_retry_after",
            "webhook_retry_base_s",
            "webhook_timeout_s",
        }
        unknown = set(body) - allowed
        if unknown:
            raise SandboxError(422, "invalid_request", f"unknown settings: {sorted(unknown)}")
        if body.get("order", "asc") not in ("asc", "desc"):
            raise SandboxError(422, "invalid_request", "order must be asc or desc")
        if body.get("fault_retry_after", "seconds") not in (
            "seconds",
            "http-date",
            "zero",
            "mixed",
        ):
            raise SandboxError(422, "invalid_request", "fault_retry_after is not a known form")
        for name, value in body.items():
            _check_setting(name, value)
        with self.store.lock:
            for name, value in body.items():
                setattr(config, name, value)
            self.gateway().reset_limits()
        return json_response({name: getattr(config, name) for name in sorted(allowed)})

    async def create_key(self, request: Request) -> Response:
        body = await _json_body(request)
        scopes = body.get("scopes", ["read"])
        expires = parse_since(body.get("expires_at")) if body.get("expires_at") else None
        key = self.store.create_key(
            str(body.get("name", "test key")),
            scopes,
            expires_at=expires,
            ip_allowlist=body.get("ip_allowlist") or (),
        )
        return json_response({"key": key.secret, "scopes": sorted(key.scopes)}, 201)

    async def revoke_key(self, request: Request) -> Response:
        body = await _json_body(request)
        with self.store.lock:
            key = self.store.keys.get(str(body.get("key")))
            if key is None:
                raise SandboxError(404, "not_found", "no such key")
            key.revoked = True
        return json_response({"revoked": True})

    async def set_activity(self, request: Request) -> Response:
        """Start or stop background activity: `speed` simulated seconds per real second and
        `touches_per_second` single-record updates scattered over all records."""
        body = await _json_body(request)
        if self.activity is not None:
            self.activity.cancel()
            self.activity = None
        if body.get("running", True):
            speed = float(body.get("speed", 600))
            touches = float(body.get("touches_per_second", 20))
            self.activity = asyncio.get_running_loop().create_task(
                self._run_activity(speed, touches)
            )
        return json_response({"running": self.activity is not None})

    async def _run_activity(self, speed: float, touches_per_second: float) -> None:
        tick = 0.05
        carry = 0.0
        while True:
            await asyncio.sleep(tick)
            self.store.advance(int(speed * tick * 1000))
            carry += touches_per_second * tick
            self.store.jiggle(int(carry))
            carry -= int(carry)


def _check_setting(name: str, value: Any) -> None:
    """Refuse a setting value that would break the sandbox instead of changing it."""
    if name in ("order", "fault_retry_after"):
        return
    if name == "limits_enabled":
        if not isinstance(value, bool):
            raise SandboxError(422, "invalid_request", "limits_enabled must be true or false")
        return
    if value is None and name in ("requests_per_minute", "daily_requests"):
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise SandboxError(422, "invalid_request", f"{name} must be a number of at least 0")
    if name.startswith("fault_") and value > 1:
        raise SandboxError(422, "invalid_request", f"{name} is a rate between 0 and 1")
    if name in ("burst", "requests_per_second", "requests_per_minute") and value == 0:
        raise SandboxError(422, "invalid_request", f"{name} must be above 0")


def _iso_now(store: Store) -> str:
    return datetime.fromtimestamp(store.clock.now_ms() / 1000, UTC).isoformat()


# ---------------------------------------------------------------------- assembly
def create_app(store: Store) -> Starlette:
    """The sandbox as one ASGI app; `app.state.store` is the store, for in-process tests."""
    routes = Routes(store)
    dispatcher = WebhookDispatcher(store)
    gateway_ref: list[Gateway] = []
    admin = Admin(store, lambda: gateway_ref[0], dispatcher)
    spec = yaml.safe_load(OPENAPI_PATH.read_text())

    async def openapi_json(request: Request) -> Response:
        return json_response(spec)

    async def openapi_yaml(request: Request) -> Response:
        return Response(OPENAPI_PATH.read_bytes(), media_type="application/yaml")

    def v1(
        path: str, handler: Callable[[Request], Awaitable[Response]], methods: list[str]
    ) -> Route:
        return Route(f"/v1{path}", handler, methods=methods)

    route_table = [
        v1("/me", routes.me, ["GET"]),
        v1("/documents", routes.list_documents, ["GET"]),
        v1("/documents/{id}", routes.get_document, ["GET"]),
        v1("/shipments", routes.list_shipments, ["GET"]),
        v1("/shipments", routes.create_shipment, ["POST"]),
        v1("/shipments/{id}", routes.get_shipment, ["GET"]),
        v1("/shipments/{id}/fields", routes.shipment_fields, ["GET"]),
        v1("/shipments/{id}/events", routes.shipment_events, ["GET"]),
        v1("/contacts", routes.list_contacts, ["GET"]),
        v1("/contacts", routes.upsert_contact, ["POST"]),
        v1("/contacts/{id}", routes.get_contact, ["GET"]),
        v1("/webhooks", routes.list_webhooks, ["GET"]),
        v1("/webhooks", routes.create_webhook, ["POST"]),
        v1("/webhooks/{id}", routes.get_webhook, ["GET"]),
        v1("/webhooks/{id}", routes.delete_webhook, ["DELETE"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/openapi.yaml", openapi_yaml, methods=["GET"]),
        Route("/_sandbox/state", admin.state, methods=["GET"]),
        Route("/_sandbox/advance", admin.advance, methods=["POST"]),
        Route("/_sandbox/touch", admin.touch, methods=["POST"]),
        Route("/_sandbox/config", admin.configure, methods=["PATCH"]),
        Route("/_sandbox/keys", admin.create_key, methods=["POST"]),
        Route("/_sandbox/keys/revoke", admin.revoke_key, methods=["POST"]),
        Route("/_sandbox/activity", admin.set_activity, methods=["POST"]),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            return error_response(405, "method_not_allowed", "method not allowed on this path")
        return error_response(exc.status_code, "not_found", "no such path")

    async def sandbox_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SandboxError)
        return error_response(exc.status, exc.code, exc.message)

    async def crashed(request: Request, exc: Exception) -> Response:
        return error_response(500, "server_error", "internal error")

    async def daily_exhausted(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, DailyAllowanceExhausted)
        wait = max(1, exc.wait_ms // 1000)
        response = error_response(429, "rate_limited", exc.message, retry_after=wait)
        response.headers.update(
            {
                "Retry-After": str(wait),
                "X-RateLimit-Scope": "daily",
                "X-RateLimit-Limit": str(store.config.daily_shipments),
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset": str(wait),
            }
        )
        return response

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await dispatcher.start()
        try:
            yield
        finally:
            if admin.activity is not None:
                admin.activity.cancel()
            await dispatcher.stop()

    app = Starlette(
        routes=route_table,
        exception_handlers={
            Exception: crashed,
            HTTPException: http_error,
            SandboxError: sandbox_error,
            DailyAllowanceExhausted: daily_exhausted,
        },
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.dispatcher = dispatcher
    app.state.admin = admin
    gateway = Gateway(app, store)
    gateway_ref.append(gateway)
    app.state.gateway = gateway
    return app  # the gateway wraps it in `asgi_app`


def asgi_app(store: Store) -> tuple[Gateway, Starlette]:
    """The app with its gateway in front: serve the gateway."""
    app = create_app(store)
    return app.state.gateway, app
