"""`/_sandbox`, the admin endpoints: move the clock, run activity, change settings, make keys.

They need no key: they belong to whoever runs the sandbox, not to the API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import _activity
from ._errors import SandboxError
from ._gateway import Gateway
from ._http import json_body, json_response
from ._model import JSON
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
    "fault_retry_after_s",
    "fault_truncate_rate",
    "limits_enabled",
    "order",
    "requests_per_minute",
    "requests_per_second",
    "webhook_retry_base_s",
    "webhook_timeout_s",
)


class Admin:
    """The admin endpoints over a server's workspaces, their gateway and webhook dispatcher.

    Each acts on every workspace unless the query parameter `workspace` names one. Answers
    keep the one-workspace shape at their top level (the first workspace acted on, totals where
    they add up); with several workspaces, `workspaces` says what each did.
    """

    def __init__(
        self, stores: Sequence[Store], gateway: Gateway, dispatcher: WebhookDispatcher
    ) -> None:
        self.stores = list(stores)
        self.gateway = gateway
        self.dispatcher = dispatcher
        self.activity: dict[str, asyncio.Task[None]] = {}  # by workspace id

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

    def _targets(self, request: Request) -> list[Store]:
        """The workspace `?workspace=` names, or all of them."""
        wanted = request.query_params.get("workspace")
        if wanted is None:
            return self.stores
        for store in self.stores:
            if store.workspace.id == wanted:
                return [store]
        raise SandboxError(404, "not_found", f"no workspace {wanted!r}")

    def _answer(self, top: JSON, each: list[JSON], status: int = 200) -> Response:
        """`top`, plus `workspaces` (what each workspace did) when the server has several: a
        one-workspace sandbox answers as it always has."""
        if len(self.stores) > 1:
            top = {**top, "workspaces": each}
        return json_response(top, status)

    def _running(self, store: Store) -> bool:
        task = self.activity.get(store.workspace.id)
        return task is not None and not task.done()

    def _describe(self, store: Store) -> JSON:
        lane = self.gateway.lanes[store.workspace.id]
        with store.lock:
            return {
                "workspace_id": store.workspace.id,
                "now": _iso_now(store),
                "counts": {
                    "documents": len(store.documents),
                    "contacts": len(store.contacts),
                    "shipments": len(store.shipments),
                    "webhooks": len(store.webhooks),
                },
                "requests_served": lane.served,
                "requests_refused": lane.refused,
                "webhook_attempts": self.dispatcher.attempts[store.workspace.id],
                "activity_running": self._running(store),
                "generation_seconds": round(store.generation_seconds, 3),
            }

    async def state(self, request: Request) -> Response:
        """Each workspace; at the top level, the first, with the server's request and webhook
        totals (401 answers included) unless one workspace was asked for."""
        described = [self._describe(store) for store in self._targets(request)]
        body = dict(described[0])
        if "workspace" not in request.query_params:
            body["requests_served"] = self.gateway.served
            body["requests_refused"] = self.gateway.refused
            body["webhook_attempts"] = self.dispatcher.attempts.total()
        return self._answer(body, described)

    async def advance(self, request: Request) -> Response:
        targets = self._targets(request)
        body = await json_body(request)
        units = {"minutes": 60_000, "hours": 3_600_000, "days": DAY_MS}
        total = 0.0
        for name, factor in units.items():
            value = body.get(name, 0)
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise SandboxError(422, "invalid_request", f"{name} must be a positive number")
            total += value * factor
        each: list[JSON] = []
        for store in targets:
            counts = await asyncio.to_thread(_activity.advance, store, int(total))
            each.append({"workspace_id": store.workspace.id, "now": _iso_now(store), **counts})
        sums = {name: sum(e[name] for e in each) for name in counts}
        return self._answer({"now": each[0]["now"], **sums}, each)

    async def touch(self, request: Request) -> Response:
        targets = self._targets(request)
        body = await json_body(request)
        count = body.get("count", 1)
        if not isinstance(count, int) or count < 0:
            raise SandboxError(422, "invalid_request", "count must be a positive integer")
        each: list[JSON] = []
        for store in targets:
            touched = _activity.touch(store, str(body.get("entity")), count)
            each.append(
                {"workspace_id": store.workspace.id, "touched": touched, "now": _iso_now(store)}
            )
        total = sum(e["touched"] for e in each)
        return self._answer({"touched": total, "now": each[0]["now"]}, each)

    async def configure(self, request: Request) -> Response:
        targets = self._targets(request)
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
        each: list[JSON] = []
        for store in targets:
            with store.lock:
                for name, value in body.items():
                    setattr(store.config, name, value)
                self.gateway.reset_limits(store)
            settings = {name: getattr(store.config, name) for name in SETTINGS}
            each.append({"workspace_id": store.workspace.id, **settings})
        first = {k: v for k, v in each[0].items() if k != "workspace_id"}
        return self._answer(first, each)

    async def create_key(self, request: Request) -> Response:
        """A key in each workspace acted on; the top level shows the first."""
        targets = self._targets(request)
        body = await json_body(request)
        scopes = body.get("scopes", ["read"])
        expires = parse_since(body.get("expires_at")) if body.get("expires_at") else None
        each: list[JSON] = []
        for store in targets:
            with store.lock:
                key = store.keys.create(
                    str(body.get("name", "test key")),
                    scopes,
                    expires_at=expires,
                    ip_allowlist=body.get("ip_allowlist") or (),
                )
            each.append({"workspace_id": store.workspace.id, "key": key.secret})
        return self._answer({"key": each[0]["key"], "scopes": sorted(key.scopes)}, each, 201)

    async def revoke_key(self, request: Request) -> Response:
        targets = self._targets(request)
        body = await json_body(request)
        for store in targets:
            with store.lock:
                key = store.keys.get(str(body.get("key")))
                if key is not None:
                    key.revoked = True
                    return self._answer({"revoked": True}, [{"workspace_id": store.workspace.id}])
        raise SandboxError(404, "not_found", "no such key")

    async def set_activity(self, request: Request) -> Response:
        """Start or stop background activity: `speed` simulated seconds per real second and
        `touches_per_second` single-record updates scattered over all records."""
        targets = self._targets(request)
        body = await json_body(request)
        for store in targets:
            self._stop(store)
            if body.get("running", True):
                speed = float(body.get("speed", 600))
                touches = float(body.get("touches_per_second", 20))
                self.activity[store.workspace.id] = asyncio.get_running_loop().create_task(
                    _activity.run_in_background(store, speed, touches)
                )
        each = [{"workspace_id": s.workspace.id, "running": self._running(s)} for s in targets]
        return self._answer({"running": each[0]["running"]}, each)

    def _stop(self, store: Store) -> None:
        task = self.activity.pop(store.workspace.id, None)
        if task is not None:
            task.cancel()

    def stop_activity(self) -> None:
        for store in self.stores:
            self._stop(store)


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
    if name.endswith("_rate") and value > 1:
        raise SandboxError(422, "invalid_request", f"{name} is a rate between 0 and 1")
    if name in ("burst", "requests_per_second", "requests_per_minute") and value == 0:
        raise SandboxError(422, "invalid_request", f"{name} must be above 0")


def _iso_now(store: Store) -> str:
    return datetime.fromtimestamp(store.clock.now_ms() / 1000, UTC).isoformat()
