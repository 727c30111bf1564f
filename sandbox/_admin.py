"""`/_sandbox`, the admin endpoints: move the clock, run activity, change settings, make keys,
delete and restore records as the application does.

They need no key: they belong to whoever runs the sandbox, not to the API.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import _activity
from ._config import RUNTIME_SETTINGS, check_runtime_settings
from ._errors import SandboxError
from ._gateway import Gateway
from ._http import check_string_list, check_types, json_body, json_response
from ._keys import ALL_SCOPES
from ._model import JSON, iso
from ._routes import parse_since
from ._store import RECORD_KINDS, RecordKind, Store
from ._timeline import DAY_MS
from ._webhooks import WebhookDispatcher, delivery_counts


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
            Route("/_sandbox/delete", self.delete, methods=["POST"]),
            Route("/_sandbox/restore", self.restore, methods=["POST"]),
            Route("/_sandbox/deleted", self.list_deleted, methods=["GET"]),
            Route("/_sandbox/webhook-deliveries", self.webhook_deliveries, methods=["GET"]),
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
                "deleted": {kind: len(store.deleted.of(kind)) for kind in RECORD_KINDS},
                "requests_served": lane.served,
                "requests_refused": lane.refused,
                "requests_held": lane.held,
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
        check_runtime_settings(body)
        each: list[JSON] = []
        for store in targets:
            with store.lock:
                for name, value in body.items():
                    setattr(store.config, name, value)
                self.gateway.reset_limits(store)
            settings = {name: getattr(store.config, name) for name in RUNTIME_SETTINGS}
            each.append({"workspace_id": store.workspace.id, **settings})
        first = {k: v for k, v in each[0].items() if k != "workspace_id"}
        return self._answer(first, each)

    async def create_key(self, request: Request) -> Response:
        """A key in each workspace acted on; the top level shows the first."""
        targets = self._targets(request)
        body = await json_body(request)
        check_types(body, {"name": (str,), "expires_at": (str, type(None))})
        check_string_list(body, "scopes")
        if body.get("ip_allowlist") is not None:
            check_string_list(body, "ip_allowlist")
        scopes = body.get("scopes", ["read"])
        if not set(scopes) <= ALL_SCOPES:
            raise SandboxError(422, "invalid_request", f"scopes are among {sorted(ALL_SCOPES)}")
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
        check_types(body, {"running": (bool,)})
        speed = _amount(body, "speed", 600)
        touches = _amount(body, "touches_per_second", 20)
        for store in targets:
            self._stop(store)
            if body.get("running", True):
                self.activity[store.workspace.id] = asyncio.get_running_loop().create_task(
                    _activity.run_in_background(store, speed, touches)
                )
        each = [{"workspace_id": s.workspace.id, "running": self._running(s)} for s in targets]
        return self._answer({"running": each[0]["running"]}, each)

    async def delete(self, request: Request) -> Response:
        """Delete records as the application does: one by `id` (or several by `ids`) in each
        workspace acted on that holds it, or `count` (or `share`) of the kind chosen by each
        workspace's seeded deletion stream. Answers the ids deleted."""
        targets = self._targets(request)
        body = await json_body(request)
        kind = _kind(body)
        ways = [name for name in ("id", "ids", "count", "share") if name in body]
        if len(ways) != 1:
            raise SandboxError(422, "invalid_request", "give one of id, ids, count or share")
        each: list[JSON] = []
        for store in targets:
            with store.lock:
                if ways[0] in ("id", "ids"):
                    ids = _ids(body)
                    if not all(store.is_live(kind, i) for i in ids):
                        continue  # not this workspace's (the next may hold it)
                    deleted = store.delete(kind, ids)
                else:
                    deleted = store.delete_some(kind, _how_many(body, len(store.live_ids(kind))))
            each.append({"workspace_id": store.workspace.id, "deleted": deleted})
        if not each:
            raise SandboxError(404, "not_found", f"no live {kind} with those ids")
        return self._answer({"kind": kind, "deleted": each[0]["deleted"]}, each)

    async def restore(self, request: Request) -> Response:
        """Bring a deleted record (`kind`, `id`) back as it was, without a new change stamp,
        in each workspace acted on where it is deleted."""
        targets = self._targets(request)
        body = await json_body(request)
        kind = _kind(body)
        record_id = body.get("id")
        if not isinstance(record_id, str):
            raise SandboxError(422, "invalid_request", "id (string) is required")
        each: list[JSON] = []
        for store in targets:
            with store.lock:
                if record_id not in store.deleted.of(kind):
                    continue
                store.restore(kind, record_id)
            each.append({"workspace_id": store.workspace.id, "restored": [record_id]})
        if not each:
            raise SandboxError(404, "not_found", f"no deleted {kind} with id {record_id!r}")
        return self._answer({"kind": kind, "restored": [record_id]}, each)

    async def list_deleted(self, request: Request) -> Response:
        """What the application deleted and has not restored, per kind: ids (sorted) and
        when (sandbox time)."""
        each: list[JSON] = []
        for store in self._targets(request):
            with store.lock:
                deleted = {
                    kind: [
                        {"id": record_id, "deleted_at": iso(store.deleted.at_ms[(kind, record_id)])}
                        for record_id in sorted(store.deleted.of(kind))
                    ]
                    for kind in RECORD_KINDS
                }
            each.append({"workspace_id": store.workspace.id, "deleted": deleted})
        return self._answer({"deleted": each[0]["deleted"]}, each)

    async def webhook_deliveries(self, request: Request) -> Response:
        """What the sender did with each webhook delivery, oldest first: its faults, every
        attempt with the receiver's answer, its state; and the counts of each."""
        each: list[JSON] = []
        for store in self._targets(request):
            deliveries = self.dispatcher.deliveries(store)
            each.append(
                {
                    "workspace_id": store.workspace.id,
                    "counts": delivery_counts(deliveries),
                    "deliveries": [d.to_json() for d in deliveries],
                }
            )
        first = {k: v for k, v in each[0].items() if k != "workspace_id"}
        return self._answer(first, each)

    def _stop(self, store: Store) -> None:
        task = self.activity.pop(store.workspace.id, None)
        if task is not None:
            task.cancel()

    def stop_activity(self) -> None:
        for store in self.stores:
            self._stop(store)


def _kind(body: JSON) -> RecordKind:
    kind = body.get("kind")
    for known in RECORD_KINDS:
        if kind == known:
            return known
    raise SandboxError(422, "invalid_request", f"kind must be one of {', '.join(RECORD_KINDS)}")


def _ids(body: JSON) -> list[str]:
    ids = [body["id"]] if "id" in body else body["ids"]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise SandboxError(422, "invalid_request", "id must be a string, ids strings")
    return ids


def _how_many(body: JSON, live: int) -> int:
    """`count`, or `share` of the `live` records (rounded), as a number of records."""
    if "count" in body:
        count = body["count"]
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise SandboxError(422, "invalid_request", "count must be a whole number of at least 0")
        return count
    share = body["share"]
    if not isinstance(share, int | float) or isinstance(share, bool) or not 0 <= share <= 1:
        raise SandboxError(422, "invalid_request", "share is a number between 0 and 1")
    return round(share * live)


def _amount(body: JSON, name: str, default: float) -> float:
    """A finite number of at least 0, or `default` when not given."""
    value = body.get(name, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < math.inf:
        raise SandboxError(422, "invalid_request", f"{name} must be a number of at least 0")
    return float(value)


def _iso_now(store: Store) -> str:
    return datetime.fromtimestamp(store.clock.now_ms() / 1000, UTC).isoformat()
