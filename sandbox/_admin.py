"""`/_sandbox`, the admin endpoints: move the clock, run activity, change settings, make keys.

They need no key: they belong to whoever runs the sandbox, not to the API.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import _activity
from ._errors import SandboxError
from ._gateway import Gateway
from ._http import json_body, json_response
from ._routes import parse_since
from ._store import Store
from ._timeline import DAY_MS
from ._webhooks import WebhookDispatcher

# What PATCH /_sandbox/config may change at run time.
SETTINGS = (
    "burst",
    "daily_requests",
    "daily_shipments",
    "fault_429_rate",
    "fault_5xx_rate",
    "fault_retry_after",
    "fault_truncate_rate",
    "limits_enabled",
    "order",
    "requests_per_minute",
    "requests_per_second",
    "webhook_retry_base_s",
    "webhook_timeout_s",
)


class Admin:
    """The admin endpoints over one store, its gateway and its webhook dispatcher."""

    def __init__(self, store: Store, gateway: Gateway, dispatcher: WebhookDispatcher) -> None:
        self.store = store
        self.gateway = gateway
        self.dispatcher = dispatcher
        self.activity: asyncio.Task[None] | None = None

    def routes(self) -> list[Route]:
        return [
            Route("/_sandbox/state", self.state, methods=["GET"]),
            Route("/_sandbox/advance", self.advance, methods=["POST"]),
            Route("/_sandbox/touch", self.touch, methods=["POST"]),
            Route("/_sandbox/config", self.configure, methods=["PATCH"]),
            Route("/_sandbox/keys", self.create_key, methods=["POST"]),
            Route("/_sandbox/keys/revoke", self.revoke_key, methods=["POST"]),
            Route("/_sandbox/activity", self.set_activity, methods=["POST"]),
        ]

    async def state(self, request: Request) -> Response:
        store = self.store
        with store.lock:
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
                    "requests_served": self.gateway.served,
                    "requests_refused": self.gateway.refused,
                    "webhook_attempts": self.dispatcher.attempts,
                    "activity_running": self.activity is not None and not self.activity.done(),
                    "generation_seconds": round(store.generation_seconds, 3),
                }
            )

    async def advance(self, request: Request) -> Response:
        body = await json_body(request)
        units = {"minutes": 60_000, "hours": 3_600_000, "days": DAY_MS}
        total = 0.0
        for name, factor in units.items():
            value = body.get(name, 0)
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise SandboxError(422, "invalid_request", f"{name} must be a positive number")
            total += value * factor
        counts = await asyncio.to_thread(_activity.advance, self.store, int(total))
        return json_response({"now": _iso_now(self.store), **counts})

    async def touch(self, request: Request) -> Response:
        body = await json_body(request)
        count = body.get("count", 1)
        if not isinstance(count, int) or count < 0:
            raise SandboxError(422, "invalid_request", "count must be a positive integer")
        touched = _activity.touch(self.store, str(body.get("entity")), count)
        return json_response({"touched": touched, "now": _iso_now(self.store)})

    async def configure(self, request: Request) -> Response:
        body = await json_body(request)
        unknown = set(body) - set(SETTINGS)
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
        config = self.store.config
        with self.store.lock:
            for name, value in body.items():
                setattr(config, name, value)
            self.gateway.reset_limits()
        return json_response({name: getattr(config, name) for name in SETTINGS})

    async def create_key(self, request: Request) -> Response:
        body = await json_body(request)
        scopes = body.get("scopes", ["read"])
        expires = parse_since(body.get("expires_at")) if body.get("expires_at") else None
        with self.store.lock:
            key = self.store.keys.create(
                str(body.get("name", "test key")),
                scopes,
                expires_at=expires,
                ip_allowlist=body.get("ip_allowlist") or (),
            )
        return json_response({"key": key.secret, "scopes": sorted(key.scopes)}, 201)

    async def revoke_key(self, request: Request) -> Response:
        body = await json_body(request)
        with self.store.lock:
            key = self.store.keys.get(str(body.get("key")))
            if key is None:
                raise SandboxError(404, "not_found", "no such key")
            key.revoked = True
        return json_response({"revoked": True})

    async def set_activity(self, request: Request) -> Response:
        """Start or stop background activity: `speed` simulated seconds per real second and
        `touches_per_second` single-record updates scattered over all records."""
        body = await json_body(request)
        self.stop_activity()
        if body.get("running", True):
            speed = float(body.get("speed", 600))
            touches = float(body.get("touches_per_second", 20))
            self.activity = asyncio.get_running_loop().create_task(
                _activity.run_in_background(self.store, speed, touches)
            )
        return json_response({"running": self.activity is not None})

    def stop_activity(self) -> None:
        if self.activity is not None:
            self.activity.cancel()
            self.activity = None


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
