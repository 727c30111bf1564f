"""Bounds on one HTTP exchange: a deadline for the whole request, and a size for its body.

httpx's time-out applies to each socket operation, so a server that sends one byte every 29 s
keeps a request alive forever under a 30 s time-out. Here every socket operation of a request
(connect, send, each read, headers included) waits at most until that request's deadline, set
by `deadline(seconds)` around it on the thread that sends it.

A body is read as it arrives and decompressed here, never more than `limit` bytes of output:
a gzip bomb of 200 kB on the wire would otherwise be inflated whole (200 MB and more) before
anything could look at its size.
"""

from __future__ import annotations

import functools
import os
import ssl
import time
import urllib.request
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import certifi
import httpcore
import httpx

# The deadline (time.monotonic()) of the request the current thread is sending, if any.
_DEADLINE: ContextVar[float | None] = ContextVar("signing_request_deadline", default=None)

# The encodings asked for (and so the only ones accepted): both decode with zlib, in bounds.
ACCEPT_ENCODING = "gzip, deflate"


class BodyTooLarge(Exception):
    """The body passed `limit` bytes (decompressed, or as sent)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit:,} bytes")  # the client words it for the user
        self.limit = limit


class UnaskedEncoding(Exception):
    """The body came in a `Content-Encoding` that was not asked for."""


@contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Bound every socket operation on this thread within the block to `seconds` from now;
    yields the deadline (a `time.monotonic()` value)."""
    moment = time.monotonic() + seconds
    token = _DEADLINE.set(moment)
    try:
        yield moment
    finally:
        _DEADLINE.reset(token)


def _bounded(timeout: float | None, timeout_kind: type[Exception]) -> float | None:
    """`timeout` shortened to what is left of the current request's time; raises
    `timeout_kind` once none is left."""
    moment = _DEADLINE.get()
    if moment is None:
        return timeout
    left = moment - time.monotonic()
    if left <= 0:
        raise timeout_kind("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every operation ends by the current request's deadline."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend, its connections bounded by the current request's deadline."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        stream = self._backend.connect_tcp(host, port, bounded, local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's own transport (pool, proxy, TLS and error mapping unchanged) whose connections
    honour `deadline`. httpx takes no network backend, so its pool's is wrapped once here;
    the tests of the deadline fail if a new httpx moves it."""

    def __init__(self, *, limits: httpx.Limits, proxy: str | None) -> None:
        super().__init__(verify=tls_context(), limits=limits, proxy=proxy)
        pool = self._pool
        pool._network_backend = _DeadlineBackend(pool._network_backend)


def tls_context() -> ssl.SSLContext:
    """httpx's own default TLS context (certifi's CAs, or `SSL_CERT_FILE` / `SSL_CERT_DIR`),
    shared by the clients of the process while the CAs it read stay as they are: making it
    reads the CA bundle, about 20 ms of CPU a client otherwise. A changed variable or a
    rewritten bundle (a certifi upgraded under a long-running receiver) makes a new one."""
    cert_file = os.environ.get("SSL_CERT_FILE")
    cert_dir = os.environ.get("SSL_CERT_DIR")
    cas = cert_file or cert_dir or certifi.where()
    try:
        found = os.stat(cas)
        version = (found.st_mtime_ns, found.st_size, found.st_ino)
    except OSError:
        version = None  # httpx says why when it reads them
    return _tls_context_for(cert_file, cert_dir, os.environ.get("SSLKEYLOGFILE"), cas, version)


@functools.lru_cache(maxsize=4)
def _tls_context_for(*settings: object) -> ssl.SSLContext:
    return httpx.create_ssl_context()  # reads the same variables and files


def proxy_for(url: httpx.URL) -> str | None:
    """The proxy the environment names for `url` (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
    minus `NO_PROXY`), read as the standard library does: httpx reads them itself only for a
    transport it builds."""
    proxies = urllib.request.getproxies()
    if urllib.request.proxy_bypass(url.host):
        return None
    return proxies.get(url.scheme) or proxies.get("all")


def read_body(response: httpx.Response, limit: int) -> bytes:
    """The body of a streamed response, decompressed, read only while it stays within `limit`
    bytes; also ends by the request's deadline between reads (a proxy's stream included).

    Raises:
        BodyTooLarge: it passed `limit`, as sent or decompressed.
        UnaskedEncoding: a `Content-Encoding` other than gzip or deflate.
        httpx.ReadTimeout: the request's deadline passed.
    """
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        decoder = None
    elif encoding in ("gzip", "x-gzip", "deflate"):
        decoder = zlib.decompressobj(wbits=47)  # a gzip or zlib header, told apart by zlib
    else:
        raise UnaskedEncoding(encoding)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    parts: list[bytes] = []
    size = sent = 0
    for chunk in response.iter_raw():
        sent += len(chunk)
        if sent > limit:
            raise BodyTooLarge(limit)
        if decoder is None:
            parts.append(chunk)
            size = sent
        else:
            data = chunk
            while data and not decoder.eof:
                # At most one byte past the limit comes out, however much `data` inflates to.
                parts.append(decoder.decompress(data, limit - size + 1))
                size += len(parts[-1])
                if size > limit:
                    raise BodyTooLarge(limit)
                data = decoder.unconsumed_tail
        moment = _DEADLINE.get()
        if moment is not None and time.monotonic() > moment:
            raise httpx.ReadTimeout("the request's deadline passed")
    if decoder is not None:
        parts.append(decoder.flush(limit - size + 1))
        if size + len(parts[-1]) > limit:
            raise BodyTooLarge(limit)
    return b"".join(parts)
