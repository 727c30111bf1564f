"""JSON answers and bodies, their checks and the error envelope, shared by API, gateway, admin."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ._errors import SandboxError
from ._model import JSON

ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def error_response(status: int, code: str, message: str, **extra: Any) -> Response:
    return json_response({"error": {"code": code, "message": message}, **extra}, status)


async def json_body(request: Request) -> JSON:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise SandboxError(422, "invalid_request", "body must be JSON") from None
    if not isinstance(body, dict):
        raise SandboxError(422, "invalid_request", "body must be a JSON object")
    return body


def check_types(body: JSON, rules: dict[str, tuple[type | tuple[type, ...], ...]]) -> None:
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


def check_string_list(body: JSON, name: str) -> None:
    """Reject a body whose field `name`, when given, is not an array of strings."""
    if name in body and not (
        isinstance(body[name], list) and all(isinstance(v, str) for v in body[name])
    ):
        raise SandboxError(422, "invalid_request", f"{name} must be an array of strings")


def check_string_map(body: JSON, name: str) -> None:
    """Reject a body whose field `name`, when given and not null, is not a string map."""
    value = body.get(name)
    if (
        name in body
        and value is not None
        and not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values()))
    ):
        raise SandboxError(422, "invalid_request", f"{name} must map strings to strings")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return error_response(405, "method_not_allowed", "method not allowed on this path")
    return error_response(exc.status_code, "not_found", "no such path")


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SandboxError)
    return error_response(exc.status, exc.code, exc.message)


async def _crashed(request: Request, exc: Exception) -> Response:
    return error_response(500, "server_error", "internal error")


def error_handlers() -> dict[Any, ErrorHandler]:
    """Starlette exception handlers that answer every failure with the error envelope."""
    return {Exception: _crashed, HTTPException: _http_error, SandboxError: _refused}
