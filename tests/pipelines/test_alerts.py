"""Alerts on a workspace's health (`status --check` with `[alerts] urls`), sent through Apprise
to a local HTTP endpoint: once when the workspace fails, none while it stays failed, once when
it recovers; a workspace first seen healthy is no news."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import SandboxFactory, cli_env, describe, load_args, run_cli

pytestmark = pytest.mark.slow  # loads and Apprise notifications per case


class Endpoint:
    """A local HTTP endpoint that keeps the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"json://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def messages(self) -> list[str]:
        return [str(body.get("message")) for body in self.received]


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    served = Endpoint()
    yield served
    served.server.shutdown()


def test_a_failure_is_told_once_and_the_recovery_once(
    make_sandbox: SandboxFactory, endpoint: Endpoint, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=30, seed=5)
    good = {**cli_env(running), "ALERTS__URLS": json.dumps([endpoint.url])}
    bad = {**good, "SOURCES__SIGNING__API_KEY": "sk_live_revoked"}
    warehouse = tmp_path / "signing.duckdb"
    check = ["status", "--duckdb", str(warehouse), "--check"]

    def load(env: dict[str, str]) -> int:
        return run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode

    assert load(good) == 0
    first = run_cli(check, cwd=tmp_path, env=good)
    assert first.returncode == 0, describe(first)
    assert endpoint.messages() == []  # first seen healthy: no news

    assert load(bad) == 1
    assert run_cli(check, cwd=tmp_path, env=good).returncode == 1  # fresh, but it failed
    [failed] = endpoint.messages()
    assert failed.startswith("workspace default is failed: ")
    assert "sk_live_revoked" not in failed
    run_cli(check, cwd=tmp_path, env=good)
    assert len(endpoint.messages()) == 1  # still failed: told once

    assert load(good) == 0
    run_cli(check, cwd=tmp_path, env=good)
    run_cli(check, cwd=tmp_path, env=good)
    assert endpoint.messages()[1:] == ["workspace default recovered: loaded again"]
    assert endpoint.url not in (tmp_path / ".signing.alerts.json").read_text()
