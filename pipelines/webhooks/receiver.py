"""The receiver: a Starlette app on uvicorn, bound to loopback by default, that serves each
configured workspace at its own path (`/<name>`).

For each delivery it reads at most `max_body_bytes`, judges it (`verify`: signature against
every secret the workspace may sign with, timestamp within the window, delivery id, payload),
and keeps it in the inbox, committed to disk, before it answers 2xx. A delivery id accepted
before is answered 200 again (the sender stops) and counted as a duplicate, not kept twice. A
refusal is 401 (nothing verifies it), 400 (verified but unusable) or 413 (too large), counted
by its reason and logged in one line (in a flood, one a second per workspace, saying how many
more there were); never a 5xx, unless the inbox itself cannot be written (503, so the
sender tries again). Accepted deliveries wake the drain trigger. Connections are bounded as
`guard` says: a request must arrive whole in time, headers are capped, and the oldest idle
connections give way to new ones.

The secrets file is read again whenever it is replaced, so subscribing, rotating or
unsubscribing needs no restart. `service.WebhookReceiver` puts it together with the inbox and
the drain trigger.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pipelines.console import output
from pipelines.errors import WebhooksError
from pipelines.webhooks.guard import DEFAULT_LIMITS, ConnectionLimits, guarded_protocol
from pipelines.webhooks.inbox import Inbox
from pipelines.webhooks.secrets_file import Secrets, SecretsFile, now_utc
from pipelines.webhooks.verify import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_TOLERANCE_SECONDS,
    Expected,
    Refusal,
    judge,
)
from sources.signing.errors import one_line

DEFAULT_PORT = 8788
T = TypeVar("T")


@dataclass(frozen=True)
class ReceiverSettings:
    """How the receiver listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    limits: ConnectionLimits = DEFAULT_LIMITS


class SecretsView:
    """The secrets file as the receiver reads it: again whenever it was replaced."""

    def __init__(self, file: SecretsFile) -> None:
        self._file = file
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._secrets: Secrets = {}

    def current(self) -> Secrets:
        with self._lock:
            signature = self._file.signature()
            if signature != self._seen:
                try:
                    self._secrets = self._file.read()
                except WebhooksError as error:
                    output.error(f"webhooks: {error}; deliveries are refused until it is fixed")
                    self._secrets = {}
                self._seen = signature
            return self._secrets

    def expected(self, workspace: str, settings: ReceiverSettings) -> Expected:
        """What a delivery to `workspace`'s path must show now (no secret: not subscribed)."""
        entry = self.current().get(workspace)
        return Expected(
            workspace=workspace,
            workspace_id=entry.workspace_id if entry else "",
            secrets=entry.secrets_at(now_utc()) if entry else (),
            now=time.time(),
            tolerance_seconds=settings.tolerance_seconds,
        )


def receiver_app(
    workspaces: Sequence[str],
    inbox: Inbox,
    secrets: SecretsView,
    settings: ReceiverSettings,
    accepted: Callable[[], None],
) -> Starlette:
    """The receiver's ASGI app: `POST /<workspace name>` for each configured workspace."""
    served = set(workspaces)
    said = RefusalLog()

    async def receive(request: Request) -> Response:
        name = request.path_params["workspace"]
        if name not in served:
            return JSONResponse({"error": "no workspace is served at this path"}, 404)
        if len(request.headers.raw) > settings.limits.max_headers:
            return JSONResponse({"error": "too many headers"}, 431)
        try:
            body = await _bounded_body(request, settings.max_body_bytes)
            delivery = judge(request.headers, body, secrets.expected(name, settings))
        except Refusal as refusal:
            given = one_line(request.headers.get("x-service-delivery", "(none)"), 80)
            said.refused(name, given, refusal.reason)
            await _kept(inbox.reject, name, refusal.reason)
            return JSONResponse({"error": refusal.reason}, refusal.status)
        except ClientDisconnect:  # the sender went (or its connection was too slow): no answer
            return Response(status_code=400)
        new = await _kept(inbox.accept, delivery)
        if new is None:
            return JSONResponse({"error": "the inbox is unavailable"}, 503)
        if new:
            accepted()
        return JSONResponse({"accepted": True, "duplicate": not new}, 200)

    return Starlette(routes=[Route("/{workspace:path}", receive, methods=["POST"])])


class RefusalLog:
    """A refusal's warning line, at most `BURST` lines a workspace at once and one a second
    after that; the next line said tells how many were left unsaid. A flood of bad deliveries
    must not become a flood of log lines (each one a write)."""

    BURST = 50
    PER_SECOND = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[float, float]] = {}  # workspace -> (tokens, at)
        self._unsaid: dict[str, int] = {}

    def refused(self, workspace: str, delivery: str, reason: str) -> None:
        now = time.monotonic()
        with self._lock:
            tokens, at = self._tokens.get(workspace, (float(self.BURST), now))
            tokens = min(float(self.BURST), tokens + (now - at) * self.PER_SECOND)
            if tokens < 1.0:
                self._tokens[workspace] = (tokens, now)
                self._unsaid[workspace] = self._unsaid.get(workspace, 0) + 1
                return
            self._tokens[workspace] = (tokens - 1.0, now)
            unsaid = self._unsaid.pop(workspace, 0)
        also = f" ({unsaid} more refused and not logged since the last line)" if unsaid else ""
        output.warning(
            f"webhooks: workspace {workspace}: refused delivery {delivery}: {reason}{also}"
        )


async def _kept(write: Callable[..., T], *args: Any) -> T | None:
    """`write` to the inbox in a worker thread (SQLite waits for the disk); None, and one
    line said, when the inbox cannot be written."""
    try:
        return await run_in_threadpool(write, *args)
    except (sqlite3.Error, OSError) as error:
        output.error(f"webhooks: the inbox cannot be written: {one_line(error)}")
        return None


async def _bounded_body(request: Request, most: int) -> bytes:
    """The raw body, refused unread when it says it is larger than `most`, and as soon as it
    grows past it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > most:
        raise Refusal("too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > most:
            raise Refusal("too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def local_url(host: str, port: int, workspace: str) -> str:
    """The URL of a workspace's path on this receiver."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/{quote(workspace, safe='')}"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (before serving, so that port 0 can be reported).

    Raises:
        WebhooksError: the address cannot be listened on (one line).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Without TCP_NODELAY a kept-alive answer waits for a delayed ACK (~40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(1024)  # a burst of connections waits for the oldest idle ones to go
    except OSError as error:
        sock.close()
        raise WebhooksError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    return sock


class Server:
    """The receiver's app on a bound socket, in the foreground (`serve`) or in a thread."""

    def __init__(
        self, app: Any, sock: socket.socket, limits: ConnectionLimits = DEFAULT_LIMITS
    ) -> None:
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            server_header=False,
            lifespan="off",
            http=guarded_protocol(limits),
            timeout_keep_alive=int(limits.idle_seconds),
            h11_max_incomplete_event_size=limits.max_header_bytes,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def serve(self) -> None:
        """Serve until SIGINT or SIGTERM (uvicorn's handlers) or `stop`."""
        self._server.run(sockets=[self.sock])

    def start(self) -> None:
        """Serve in a background thread (the demo, benchmarks)."""
        self._thread = threading.Thread(target=self.serve, name="receiver", daemon=True)
        self._thread.start()
        while not self._server.started and self._thread.is_alive():
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
