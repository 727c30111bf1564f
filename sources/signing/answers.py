"""What an answer of the service means, read without trusting it: the `Retry-After` it asks
for, its clock, a refusal as the run's exception, whether its `data` has the shape asked for,
and how deep its JSON nests; and the names requests are counted and described by."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx

from .errors import AuthError, Forbidden, NotFound, SigningAPIError, Unserved

# What `data` must be in an answer (see `SigningClient.get_data`), and in words.
DataShape = Literal["records", "entries", "record"]
WANTED: dict[DataShape, str] = {
    "records": "objects with an `id`",
    "entries": "objects",
    "record": "an object with an `id`",
}


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


def whole_number(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def server_time(headers: Mapping[str, str]) -> datetime | None:
    """The service's clock from the `Date` header, if it sent one."""
    try:
        moment = parsedate_to_datetime(headers["date"])
    except (KeyError, TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def describe(error: httpx.HTTPError) -> str:
    """A transport error in words: its class, and its message when it has one."""
    detail = str(error).strip()
    return f"{type(error).__name__} ({detail})" if detail else type(error).__name__


def endpoint_name(path: str) -> str:
    """`/shipments/shp_1/events` -> `/shipments/{id}/events`, for per-endpoint counts."""
    parts = path.strip("/").split("/")
    return "/" + "/".join(p if i % 2 == 0 else "{id}" for i, p in enumerate(parts))


class TooDeep(Exception):
    """A JSON body nested deeper than `settings.MAX_JSON_DEPTH`."""


def deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests lists or objects more than `limit` levels deep (a walk without
    recursion, so a body nested a thousand deep costs no stack)."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def misshapen(data: Any, shape: DataShape) -> Any | None:
    """What in an answer's `data` is not of `shape` (`data` itself, or its first item that is
    not), or None when all is."""
    if shape == "record":
        return None if isinstance(data, dict) and usable_id(data.get("id")) else data
    if not isinstance(data, list):
        return data
    return next((item for item in data if not _fits(item, shape)), None)


def _fits(item: Any, shape: DataShape) -> bool:
    """Whether one item of a `data` list has `shape` (`records` or `entries`)."""
    return isinstance(item, dict) and (shape == "entries" or usable_id(item.get("id")))


def usable_id(value: Any) -> bool:
    """An id a row can be keyed by: a non-empty string or an integer."""
    return (isinstance(value, str) and value != "") or (
        isinstance(value, int) and not isinstance(value, bool)
    )


def error_for(status: int, body: Any, path: str, clean: Callable[[object], str]) -> SigningAPIError:
    """The exception for a refusal; the service's message is quoted as one clean line."""
    error = body.get("error", {}) if isinstance(body, dict) else {}
    message = error.get("message") if isinstance(error, dict) else None
    detail = f": {clean(message)}" if message else ""
    if status == 401:
        return AuthError(f"the API key was refused (401 unauthorized{detail}); check the key")
    if status == 403:
        return Forbidden(f"the API key lacks a permission for GET {path} (403 forbidden{detail})")
    if status == 404:
        return NotFound(f"GET {path} answered 404{detail}")
    return Unserved(f"GET {path} answered HTTP {status}{detail}")
