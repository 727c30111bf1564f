"""Throwaway Redis servers for tests (the Celery broker): Debian's redis-server in a temporary
folder, on a free loopback port, nothing saved to disk."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

# The one line a run without a server says (skipped locally, failed in CI).
SERVER_MISSING = "Redis server not found: apt-get install redis-server (or put it on PATH)"
HOST = "127.0.0.1"


class RedisNotFound(RuntimeError):
    """No redis-server here."""


class RedisStartError(RuntimeError):
    """The server did not answer; the message ends with the tail of its log."""


@dataclass(frozen=True)
class RedisServer:
    """A running throwaway server on 127.0.0.1."""

    host: str
    port: int

    def url(self, database: int = 0) -> str:
        """The URL Celery takes as its broker or result backend."""
        return f"redis://{self.host}:{self.port}/{database}"


def missing_redis() -> str | None:
    """The one-line reason no server can be started here, or None when one can."""
    return None if shutil.which("redis-server") else SERVER_MISSING


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    client = redis.Redis(host=HOST, port=port, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
    finally:
        client.close()


@contextmanager
def running_redis() -> Iterator[RedisServer]:
    """Start a server in a temporary folder on a free port; stop it and remove the folder.

    Raises:
        RedisNotFound: no redis-server on PATH.
        RedisStartError: it exited or did not answer within a minute.
    """
    executable = shutil.which("redis-server")
    if executable is None:
        raise RedisNotFound(SERVER_MISSING)
    base = Path(tempfile.mkdtemp(prefix="signing-etl-redis-"))
    log = base / "redis.log"
    port = _free_port()
    settings = {
        "port": str(port),
        "bind": HOST,
        "dir": str(base),
        "save": "",  # no snapshots, no append-only file: a broker for one test session
        "appendonly": "no",
        "daemonize": "no",
        "logfile": str(log),
    }
    arguments = [executable, *(part for k, v in settings.items() for part in (f"--{k}", v))]
    server = subprocess.Popen(arguments, cwd=base, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _answers(port):
            if server.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text().strip().splitlines()[-5:] if log.exists() else []
                raise RedisStartError(f"redis-server did not start: {' | '.join(tail)}")
            time.sleep(0.05)
        yield RedisServer(HOST, port)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(base, ignore_errors=True)
