"""Stand-in servers: small ASGI apps served over loopback in a thread, for what the sandbox never
does (a `total` that lies, a gzip bomb, an answer dripped byte by byte, forged field names).

`StandIn` serves any app and records each request (path, query, arrival time). `FakeAPI` is a
minimal signing API v1 whose workspaces, records and list pages a test sets up as it needs;
anything it does not answer is a 404 in the API's error shape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from pipelines.environment import environment_set
from sandbox import JSON

# A list page as the service answers it: the records, offset and limit asked -> the body.
PageAnswer = Callable[[list[JSON], int, int], JSON]


@dataclass(frozen=True)
class Arrival:
    """One request as it reached the stand-in."""

    path: str
    query: dict[str, str]
    at: float  # time.monotonic() when it arrived


class StandIn:
    """`app` served on 127.0.0.1 in a background thread; use as a context manager."""

    def __init__(self, app: ASGIApp) -> None:
        self.arrivals: list[Arrival] = []
        self._lock = threading.Lock()
        self._app = app
        self.port = 0

    async def _recording(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = dict(Request(scope).query_params)
            with self._lock:
                self.arrivals.append(Arrival(scope["path"], query, time.monotonic()))
        await self._app(scope, receive, send)

    def __enter__(self) -> StandIn:
        config = uvicorn.Config(
            self._recording,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="off",
            interface="asgi3",
            access_log=False,
            # Handlers that stall or drip forever are cut off when the test ends.
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="stand-in", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the stand-in server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The API root a client configures, ending in `/v1`."""
        return f"{self.root_url}/v1"

    def requests_to(self, path: str) -> list[Arrival]:
        """The requests that reached `path` (e.g. `/v1/contacts`), in order."""
        with self._lock:
            return [a for a in self.arrivals if a.path == path]

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.arrivals)


def honest_page(records: list[JSON], offset: int, limit: int) -> JSON:
    """A list page as the reference describes it."""
    return {
        "data": records[offset : offset + limit],
        "total": len(records),
        "limit": limit,
        "offset": offset,
    }


@dataclass
class FakeWorkspace:
    """One workspace of `FakeAPI`: what its key sees. Child bodies (`events`, `fields`) are
    keyed by shipment id; `pages` answers every list endpoint's pages."""

    id: str
    name: str = "Stand-in workspace"
    documents: list[JSON] = field(default_factory=list)
    shipments: list[JSON] = field(default_factory=list)
    contacts: list[JSON] = field(default_factory=list)
    webhooks: list[JSON] = field(default_factory=list)
    events: dict[str, list[JSON]] = field(default_factory=dict)
    fields: dict[str, JSON] = field(default_factory=dict)
    pages: PageAnswer = honest_page
    me_extra: JSON = field(default_factory=dict)  # more fields in /me's `workspace`

    def me(self) -> JSON:
        workspace = {"id": self.id, "name": self.name, "slug": self.id, "plan": "payg"}
        return {"workspace": {**workspace, **self.me_extra}, "key_name": "k", "api_version": "v1"}


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


class FakeAPI:
    """A minimal signing API v1: each key names a workspace (`Authorization: Bearer KEY`)."""

    def __init__(self, workspaces: dict[str, FakeWorkspace]) -> None:
        self.workspaces = workspaces

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/{path:path}", self._answer)])

    async def _answer(self, request: Request) -> Response:
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        workspace = self.workspaces.get(key)
        if workspace is None:
            return _error(401, "unauthorized", "unknown key")
        parts = request.path_params["path"].strip("/").split("/")
        query = request.query_params
        lists = {
            "documents": workspace.documents,
            "shipments": workspace.shipments,
            "contacts": workspace.contacts,
        }
        if parts == ["me"]:
            return JSONResponse(workspace.me())
        if len(parts) == 1 and parts[0] in lists:
            offset, limit = int(query.get("offset", 0)), int(query.get("limit", 50))
            since = query.get("updated_since", "")
            # Stamps in one format (`...T00:00:00.000Z`) compare as text; no stamp, always.
            records = [r for r in lists[parts[0]] if str(r.get("updated_at", "~")) >= since]
            return JSONResponse(workspace.pages(records, offset, limit))
        if parts == ["webhooks"]:
            return JSONResponse({"data": workspace.webhooks, "events": []})
        if len(parts) == 2 and parts[0] == "documents":
            found = [d for d in workspace.documents if d["id"] == parts[1]]
            if found:
                return JSONResponse({"data": found[0]})
        if len(parts) == 3 and parts[0] == "shipments" and parts[2] == "events":
            return JSONResponse({"data": workspace.events.get(parts[1], [])})
        if len(parts) == 3 and parts[0] == "shipments" and parts[2] == "fields":
            body = workspace.fields.get(parts[1], {"shipment_id": parts[1], "data": []})
            return JSONResponse(body)
        return _error(404, "not_found", f"nothing at /{'/'.join(parts)}")


def source_env(
    base_url: str,
    api_key: str,
    *,
    give_up_after_seconds: float | None = None,
    request_deadline_seconds: float | None = None,
    max_response_bytes: int | None = None,
    max_pages_without_new_records: int | None = None,
) -> AbstractContextManager[None]:
    """The signing source configured through its documented environment variables
    (`SOURCES__SIGNING__<NAME>`) for the block, as a user sets them; restored afterwards."""
    values: dict[str, object | None] = {
        "api_key": api_key,
        "base_url": base_url,
        "give_up_after_seconds": give_up_after_seconds,
        "request_deadline_seconds": request_deadline_seconds,
        "max_response_bytes": max_response_bytes,
        "max_pages_without_new_records": max_pages_without_new_records,
    }
    return environment_set(
        {f"SOURCES__SIGNING__{k.upper()}": str(v) for k, v in values.items() if v is not None}
    )
