"""Serving the sandbox with uvicorn, in the foreground (CLI) or in a background thread (tests,
demo, benchmarks)."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn

from ._app import Gateway, asgi_app
from ._store import SandboxConfig, Store


class RunningSandbox:
    """A sandbox served on loopback in a background thread; use as a context manager."""

    def __init__(
        self, config: SandboxConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config = config or SandboxConfig()
        self.store = Store(self.config)
        self.gateway, self.app = asgi_app(self.store)
        self._server = uvicorn.Server(_uvicorn_config(self.gateway, host, port))
        self._thread = threading.Thread(target=self._server.run, name="sandbox", daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout_s: float = 30.0) -> RunningSandbox:
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
    def api_key(self) -> str:
        return self.store.main_key.secret

    def __enter__(self) -> RunningSandbox:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def _uvicorn_config(app: Gateway, host: str, port: int) -> uvicorn.Config:
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


def serve_forever(store: Store, sock: socket.socket) -> None:
    """Serve on a bound socket in the foreground until interrupted (Ctrl-C)."""
    gateway, _ = asgi_app(store)
    host, port = sock.getsockname()[:2]
    uvicorn.Server(_uvicorn_config(gateway, host, port)).run(sockets=[sock])
