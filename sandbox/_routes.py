"""The v1 endpoints with their parameter parsing, and the OpenAPI document that describes them.

Adding an endpoint means a handler and a line in `ROUTES` here, and its description in
`openapi.yaml`. The gateway has authenticated the request before a handler runs and put the
key and its workspace's store in `request.state`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import _drift, _writes
from ._errors import DailyAllowanceExhausted, SandboxError
from ._http import (
    check_string_list,
    check_string_map,
    check_types,
    error_handlers,
    error_response,
    json_body,
    json_response,
)
from ._keys import ApiKey
from ._model import JSON, WEBHOOK_EVENTS
from ._store import Store
from ._webhooks import acceptable_target

OPENAPI_PATH = Path(__file__).with_name("openapi.yaml")
MAX_INT64 = 2**63 - 1


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
    if text.endswith("z"):  # fromisoformat takes only the capital Z
        text = f"{text[:-1]}Z"
    try:
        moment = datetime.fromisoformat(text)
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


def _store(request: Request, scope_name: str) -> Store:
    """The workspace the request's key belongs to, once the key is known to have the scope."""
    key: ApiKey = request.state.api_key
    if scope_name not in key.scopes:
        raise SandboxError(403, "forbidden", f"this API key lacks the {scope_name!r} scope")
    store: Store = request.state.store
    return store


def _envelope(items: list[JSON], total: int, limit: int, offset: int) -> Response:
    return json_response({"data": items, "total": total, "limit": limit, "offset": offset})


# ---------------------------------------------------------------------- endpoints
async def me(request: Request) -> Response:
    ws = _store(request, "read").workspace
    return json_response(
        {
            "workspace": {"id": ws.id, "name": ws.name, "slug": ws.slug, "plan": ws.plan},
            "key_name": request.state.api_key.name,
            "api_version": "v1",
        }
    )


async def list_documents(request: Request) -> Response:
    store = _store(request, "read")
    since, offset, limit = _list_params(request)
    with store.lock:
        page = store.list_documents(since, offset, limit, request.query_params.get("search"))
        items = [d.to_json() for d in page.items]
    return _envelope(items, page.total, limit, offset)


async def get_document(request: Request) -> Response:
    store = _store(request, "read")
    with store.lock:
        doc = store.documents.by_id.get(request.path_params["id"])
        if doc is None:
            raise SandboxError(404, "not_found", "document not found")
        return json_response({"data": doc.to_json(detail=True)})


async def list_shipments(request: Request) -> Response:
    store = _store(request, "read")
    since, offset, limit = _list_params(request)
    status = request.query_params.get("status")
    if status is not None and status not in ("sent", "opened", "signed", "expired", "revoked"):
        raise SandboxError(
            422, "invalid_request", "status must be sent, opened, signed, expired or revoked"
        )
    with store.lock:
        page = store.list_shipments(
            since,
            offset,
            limit,
            status=status,
            document_id=request.query_params.get("document_id"),
            include_archived=_bool_param(request, "include_archived"),
        )
        items = [_drift.shipment(s.to_json(), store.config) for s in page.items]
    return _envelope(items, page.total, limit, offset)


async def create_shipment(request: Request) -> Response:
    store = _store(request, "send")
    body = await json_body(request)
    if not isinstance(body.get("document_id"), str):
        raise SandboxError(422, "invalid_request", "document_id (string) is required")
    check_types(
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
    check_string_list(body, "contact_ids")
    check_string_list(body, "group_ids")
    check_string_map(body, "placeholders")
    for recipient in body.get("recipients") or []:
        if not isinstance(recipient, dict):
            raise SandboxError(422, "invalid_request", "recipients must be objects")
        check_types(recipient, dict.fromkeys(("name", "email", "company"), (str,)))
    days = body.get("expires_in_days")
    if days is not None and not 1 <= days <= 365:
        raise SandboxError(422, "invalid_request", "expires_in_days must be 1 to 365")
    with store.lock:
        status, reply = _writes.create_shipment(store, body, request.headers.get("idempotency-key"))
    return json_response(reply, status)


async def get_shipment(request: Request) -> Response:
    store = _store(request, "read")
    with store.lock:
        found = store.find_shipment(request.path_params["id"])
        return json_response({"data": _drift.shipment(found.to_json(), store.config)})


async def shipment_fields(request: Request) -> Response:
    store = _store(request, "read")
    with store.lock:
        return json_response(store.find_shipment(request.path_params["id"]).filled_fields())


async def shipment_events(request: Request) -> Response:
    store = _store(request, "read")
    limit = _int_param(request, "limit", 100, 1, 500)
    with store.lock:
        events = store.find_shipment(request.path_params["id"]).audit_events()
        events = _drift.audit_events(events, store.config)
    return json_response({"data": events[::-1][:limit]})


async def list_contacts(request: Request) -> Response:
    store = _store(request, "read")
    since, offset, limit = _list_params(request)
    with store.lock:
        page = store.list_contacts(
            since,
            offset,
            limit,
            request.query_params.get("search"),
            request.query_params.get("email"),
        )
        items = [_drift.contact(c.to_json(), store.config) for c in page.items]
    return _envelope(items, page.total, limit, offset)


async def upsert_contact(request: Request) -> Response:
    store = _store(request, "write")
    body = await json_body(request)
    check_types(body, dict.fromkeys(("email", "id", "name"), (str,)))
    check_types(
        body, {name: (str, type(None)) for name in ("phone", "company", "position", "notes")}
    )
    check_string_map(body, "custom")
    check_string_list(body, "group_ids")
    if isinstance(body.get("email"), str) and "@" not in body["email"]:
        raise SandboxError(422, "invalid_request", "email is not an e-mail address")
    with store.lock:
        status, contact = _writes.upsert_contact(store, body)
        return json_response({"data": contact.to_json()}, status)


async def get_contact(request: Request) -> Response:
    store = _store(request, "read")
    with store.lock:
        contact = store.contacts.by_id.get(request.path_params["id"])
        if contact is None:
            raise SandboxError(404, "not_found", "contact not found")
        return json_response({"data": _drift.contact(contact.to_json(), store.config)})


async def list_webhooks(request: Request) -> Response:
    store = _store(request, request.state.store.config.webhooks_list_scope)
    with store.lock:
        hooks = [h.to_json() for h in store.webhooks.values()]
    return json_response({"data": hooks, "events": list(WEBHOOK_EVENTS)})


async def create_webhook(request: Request) -> Response:
    store = _store(request, "write")
    body = await json_body(request)
    event, target = body.get("event"), body.get("target_url")
    if event not in WEBHOOK_EVENTS:
        raise SandboxError(
            422, "invalid_request", f"event must be one of {', '.join(WEBHOOK_EVENTS)}"
        )
    if not isinstance(target, str) or not acceptable_target(target):
        raise SandboxError(
            422, "invalid_request", "target_url must be an HTTPS URL (http only for localhost)"
        )
    with store.lock:
        hook = _writes.create_webhook(store, event, target)
        return json_response({"data": hook.to_json(with_secret=True)}, 201)


async def get_webhook(request: Request) -> Response:
    store = _store(request, "read")
    with store.lock:
        hook = store.webhooks.get(request.path_params["id"])
        if hook is None:
            raise SandboxError(404, "not_found", "webhook not found")
        return json_response({"data": hook.to_json()})


async def delete_webhook(request: Request) -> Response:
    store = _store(request, "write")
    hook_id = request.path_params["id"]
    with store.lock:
        _writes.delete_webhook(store, hook_id)
    return json_response({"data": {"id": hook_id, "deleted": True}})


Handler = Callable[[Request], Awaitable[Response]]

ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/me", me),
    ("GET", "/documents", list_documents),
    ("GET", "/documents/{id}", get_document),
    ("GET", "/shipments", list_shipments),
    ("POST", "/shipments", create_shipment),
    ("GET", "/shipments/{id}", get_shipment),
    ("GET", "/shipments/{id}/fields", shipment_fields),
    ("GET", "/shipments/{id}/events", shipment_events),
    ("GET", "/contacts", list_contacts),
    ("POST", "/contacts", upsert_contact),
    ("GET", "/contacts/{id}", get_contact),
    ("GET", "/webhooks", list_webhooks),
    ("POST", "/webhooks", create_webhook),
    ("GET", "/webhooks/{id}", get_webhook),
    ("DELETE", "/webhooks/{id}", delete_webhook),
]


async def _daily_exhausted(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DailyAllowanceExhausted)
    store: Store = request.state.store
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


def api_app() -> Starlette:
    """The v1 API under `/v1`, for the gateway to put in front."""
    return Starlette(
        routes=[Route(f"/v1{path}", handler, methods=[method]) for method, path, handler in ROUTES],
        exception_handlers={**error_handlers(), DailyAllowanceExhausted: _daily_exhausted},
    )


def document_routes() -> list[Route]:
    """`/openapi.json` and `/openapi.yaml`: the machine-readable reference of the API."""
    spec = yaml.safe_load(OPENAPI_PATH.read_text())

    async def openapi_json(request: Request) -> Response:
        return json_response(spec)

    async def openapi_yaml(request: Request) -> Response:
        return Response(OPENAPI_PATH.read_bytes(), media_type="application/yaml")

    return [
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/openapi.yaml", openapi_yaml, methods=["GET"]),
    ]
