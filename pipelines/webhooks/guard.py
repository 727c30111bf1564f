"""The receiver's connections, bounded for the open internet: uvicorn's HTTP/1.1 protocol (h11)
with a deadline for each request to arrive whole, a cap on the header block, and a cap on open
connections that closes the oldest connection not being answered when a new one would pass it.

uvicorn closes a kept-alive connection after `timeout_keep_alive`, but not one that never sends
a request or sends it a byte at a time, and its default parser (httptools) accepts any header
size: without these bounds, idle sockets from one client use up the process's file descriptors
and every real delivery fails until they go.
"""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# The request has arrived whole (or the connection is done): the deadline no longer applies.
_RECEIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)
# File descriptors kept free of connections: the inbox, its journal, the secrets file, logs.
_SPARE_DESCRIPTORS = 64


@dataclass(frozen=True)
class ConnectionLimits:
    """How long and how large a request may be in coming, and how many connections stay open."""

    request_seconds: float = 10.0  # from a connection's start (or last answer) to a whole request
    idle_seconds: float = 5.0  # a kept-alive connection with no new request
    max_connections: int = 512  # lowered to what the process's descriptor limit allows
    max_header_bytes: int = 16 * 1024
    max_headers: int = 64

    def connections_allowed(self) -> int:
        """`max_connections`, or fewer when the descriptor limit (`ulimit -n`) is lower."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(8, min(self.max_connections, soft - _SPARE_DESCRIPTORS))


DEFAULT_LIMITS = ConnectionLimits()


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with `limits`' request deadline and connection cap."""
    allowed = limits.connections_allowed()

    class GuardedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _since: float = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._since = time.monotonic()
            self._arm()
            _close_oldest_waiting(self.connections, allowed)

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state in _RECEIVED:
                self._disarm()

        def on_response_complete(self) -> None:
            # The next request on a kept-alive connection has the same deadline; armed first
            # so that a pipelined request already here disarms it.
            self._since = time.monotonic()
            self._arm()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def waiting(self) -> bool:
            """Still waiting for its request (idle or half-sent): nothing is answered on it."""
            return self.conn.their_state not in _RECEIVED

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.request_seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


def _close_oldest_waiting(connections: set[Any], allowed: int) -> None:
    """Close the oldest connections still waiting for their request until at most `allowed`
    are open; a connection whose request is being answered is never closed."""
    excess = len(connections) - allowed
    if excess <= 0:
        return
    waiting = sorted(
        (c for c in connections if c.waiting() and not c.transport.is_closing()),
        key=lambda c: c._since,
    )
    for connection in waiting[:excess]:
        connection.transport.close()
