"""Server start-up: the ASGI app built from its parts, served by uvicorn.

In the foreground for the CLI (`serve_forever`), in a background thread for tests, the demo and
benchmarks (`RunningSandbox`).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Self

import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from ._admin import Admin
from ._config import SandboxConfig
from ._gateway import Gateway
from ._http import error_handlers
from ._routes import api_app, document_routes
from ._store import Store
from ._webhooks import WebhookDispatcher


def build_app(stores: Sequence[Store]) -> tuple[ASGIApp, Starlette]:
    """The sandbox as one ASGI app (serve the first), and the part outside `/v1` whose
    `state.dispatcher` delivers webhooks. Each part is built from the ones before it."""
    if not stores:
        raise ValueError("a sandbox serves at least one workspace")
    if len({s.workspace.id for s in stores}) < len(stores):
        raise ValueError("workspaces of one server need distinct ids: give each its position")
    if len({s.main_key.secret for s in stores}) < len(stores):
        raise ValueError("workspaces of one server need distinct keys: give each its position")
    dispatcher = WebhookDispatcher(stores)
    gateway = Gateway(api_app(), stores)
    admin = Admin(stores, gateway, dispatcher)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await dispatcher.start()
        try:
            yield
        finally:
            admin.stop_activity()
            await dispatcher.stop()

    site = Starlette(
        routes=[*document_routes(), *admin.routes()],
        exception_handlers=error_handlers(),
        lifespan=lifespan,
    )
    site.state.dispatcher = dispatcher

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            await gateway(scope, receive, send)
        else:
            await site(scope, receive, send)

    return app, site


class RunningSandbox:
    """A sandbox served on loopback in a background thread; use as a context manager.

    One workspace per config, in this order (none: one with the defaults); a request goes to
    the workspace whose key it carries. `SandboxConfig.workspaces(n)` makes configs whose ids
    collide on purpose.
    """

    def __init__(self, *configs: SandboxConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.configs = list(configs) or [SandboxConfig()]
        self.stores = [Store(c, position=n) for n, c in enumerate(self.configs)]
        self._served, self.app = build_app(self.stores)
        self.host = host
        self.port = port

    def start(self, timeout_s: float = 30.0) -> Self:
        """Serve in a background thread; after `stop`, serve the same data on the same port
        again (a service that went away and came back)."""
        self._server = uvicorn.Server(_uvicorn_config(self._served, self.host, self.port))
        self._thread = threading.Thread(target=self._server.run, name="sandbox", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the sandbox server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What a client configures: the API root, ending in `/v1`."""
        return f"{self.root_url}/v1"

    @property
    def config(self) -> SandboxConfig:
        return self.configs[0]

    @property
    def store(self) -> Store:
        """The first workspace's store."""
        return self.stores[0]

    @property
    def api_key(self) -> str:
        """The first workspace's main key (all scopes)."""
        return self.store.main_key.secret

    @property
    def api_keys(self) -> list[str]:
        """Each workspace's main key, in the order of `stores`."""
        return [store.main_key.secret for store in self.stores]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def _uvicorn_config(app: ASGIApp, host: str, port: int) -> uvicorn.Config:
    # The sandbox sends its own Date header (its clock), so uvicorn's is switched off.
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        date_header=False,
        server_header=False,
        access_log=False,
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, bound before serving so that port 0 can be reported."""
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it every kept-alive response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve_forever(stores: Store | Sequence[Store], sock: socket.socket) -> None:
    """Serve one workspace or several on a bound socket in the foreground until interrupted
    (Ctrl-C). Several: `Store(config, position=n)` for the n-th of `config.workspaces(count)`."""
    served, _ = build_app([stores] if isinstance(stores, Store) else stores)
    host, port = sock.getsockname()[:2]
    uvicorn.Server(_uvicorn_config(served, host, port)).run(sockets=[sock])
