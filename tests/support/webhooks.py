"""Webhooks for tests: the sandbox sender's own record of its deliveries, waiting for it to
settle, deliveries made by hand and signed with the sandbox's own `signature`, and the
receiver run as a user runs it (`signing-etl webhooks serve` in the background)."""

from __future__ import annotations

import json
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx
import orjson

from pipelines.webhooks.secrets_file import SecretsFile, StoredSubscription, WorkspaceSecrets
from sandbox import RunningSandbox, signature

from .cli import Background, cli_env, forks, run_cli, start_cli
from .forked_cli import ForkedProcess
from .sandboxes import admin
from .waiting import wait_until

DEADLINE_S = 60.0


def record(running: RunningSandbox, workspace: str | None = None) -> dict[str, Any]:
    """The sender's record (`GET /_sandbox/webhook-deliveries`) of the first workspace, or of
    the one named."""
    query = f"?workspace={workspace}" if workspace else ""
    body = admin(running, "GET", f"/webhook-deliveries{query}")
    assert isinstance(body, dict)
    return body


def sender_done(running: RunningSandbox, deadline_s: float = DEADLINE_S) -> dict[str, Any]:
    """The sender's record once no delivery waits for an attempt or is being sent."""

    last: dict[str, Any] = {}

    def idle() -> bool:
        counts = record(running)["counts"]
        last.update(counts)
        return bool(counts["waiting"] == 0 and counts["sending"] == 0)

    try:
        # each look fetches the whole record (thousands of deliveries under faults)
        wait_until(idle, deadline_s, "the sender to finish its deliveries", poll_at_most_s=0.5)
    except AssertionError as late:  # what was still under way says why
        raise AssertionError(f"{late}; its last counts: {last}") from None
    return record(running)


def free_port() -> int:
    """A loopback port nobody listens on now (the receiver is restarted on it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def delivery(
    url: str,
    secret: str,
    payload: dict[str, Any],
    *,
    delivery_id: str,
    timestamp: int | None = None,
    body: bytes | None = None,
    headers: dict[str, str | bytes] | None = None,
) -> httpx.Response:
    """POST one delivery as the service sends it, signed with the sandbox's own `signature`
    over the timestamp and the body (`body`: bytes sent instead of the payload, still signed
    as the payload; `headers` replace or add headers)."""
    signed = orjson.dumps(payload)
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    sent: dict[str, str | bytes] = {
        "Content-Type": "application/json",
        "X-Service-Event": str(payload.get("event")),
        "X-Service-Delivery": delivery_id,
        "X-Service-Timestamp": stamp,
        "X-Service-Signature": signature(secret, stamp, signed),
        **(headers or {}),
    }
    raw = {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in sent.items()}
    return httpx.post(url, content=signed if body is None else body, headers=raw, timeout=30)


class ServedReceiver:
    """`signing-etl webhooks serve` in the background, as a user runs it: its URL lines read
    from stdout, stderr kept in a file (its log). Forked as `start_cli` forks a command, or a
    fresh interpreter when it needs a lower `ulimit -n` than this process's."""

    def __init__(
        self,
        folder: Path,
        warehouse: Path,
        env: dict[str, str],
        *options: str,
        descriptor_limit: int | None = None,
    ) -> None:
        self.folder = folder
        self.descriptor_limit = descriptor_limit  # its `ulimit -n`, when not this process's
        self.args = ["webhooks", "serve", "--duckdb", str(warehouse), *options]
        self.env = env
        self.logs: list[Path] = []
        self.process: Background | None = None
        self._log: IO[str] | None = None

    def start(self, workspaces: int = 1) -> list[str]:
        """Start it and return its first `workspaces` lines (one URL per workspace)."""
        if self.descriptor_limit is None and forks(self.env):
            forked = start_cli(self.args, cwd=self.folder, env=self.env)
            assert isinstance(forked, ForkedProcess)
            self.process = forked
            self.logs.append(forked.stderr_path)
            return self._first_lines(forked, workspaces)
        log_path = self.folder / f"receiver-{len(self.logs)}.log"
        self.logs.append(log_path)
        self._log = open(log_path, "w")  # noqa: SIM115 (closed in stop)
        process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", *self.args],
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            preexec_fn=self._limited if self.descriptor_limit else None,
        )
        self.process = process
        assert process.stdout is not None
        lines = [process.stdout.readline().rstrip("\n") for _ in range(workspaces)]
        assert all(lines), f"the receiver printed no URL: {self.log()}"
        return lines

    def _first_lines(self, process: ForkedProcess, count: int) -> list[str]:
        """The first `count` lines the forked receiver printed, once it printed them."""
        lines: list[str] = []

        def printed() -> bool:
            out = process.stdout_path  # made by the child as it starts
            text = out.read_text(encoding="utf-8") if out.exists() else ""
            lines[:] = text.splitlines()[:count]
            if len(lines) == count and text.count("\n") >= count:
                return True
            assert process.poll() is None, f"the receiver printed no URL: {self.log()}"
            return False

        wait_until(printed, DEADLINE_S, "the receiver's URL lines")
        return lines

    def _limited(self) -> None:
        assert self.descriptor_limit is not None
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.descriptor_limit, hard))

    def kill(self) -> None:
        """SIGKILL: no clean-up at all."""
        self._end(signal.SIGKILL)

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it; its exit code."""
        return self._end(signal.SIGTERM)

    def _end(self, how: int) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(how)
        code = self.process.wait(timeout=120)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def log(self) -> str:
        """Everything every run of it logged."""
        return "".join(path.read_text() for path in self.logs if path.exists())


def inbox_status(folder: Path, warehouse: Path, env: dict[str, str]) -> dict[str, Any]:
    """`signing-etl webhooks status --format json`, by workspace."""
    args = ["webhooks", "status", "--duckdb", str(warehouse), "--format", "json"]
    done = run_cli(args, cwd=folder, env=env)
    assert done.returncode == 0, done.stderr
    return {entry["workspace"]: entry for entry in map(json.loads, done.stdout.splitlines())}


def drained(folder: Path, warehouse: Path, env: dict[str, str], accepted: int) -> dict[str, Any]:
    """The inbox status once `accepted` deliveries were accepted and none waits."""
    found: dict[str, Any] = {}

    def done() -> bool:
        found.update(inbox_status(folder, warehouse, env).get("default", {}))
        return bool(found.get("accepted") == accepted and found.get("waiting") == 0)

    wait_until(done, DEADLINE_S, f"{accepted} deliveries accepted and drained")
    return found


def subscribed_receiver(
    folder: Path,
    workspace_id: str,
    secret: str,
    *options: str,
    descriptor_limit: int | None = None,
) -> ServedReceiver:
    """A receiver (not started) for `folder/signing.duckdb` whose workspace `default` is
    subscribed for `workspace_id` with `secret`, and whose source settings are never used
    (`--no-loads` callers): the set-up of every test that sends deliveries by hand."""
    SecretsFile(folder / ".signing.webhooks").update(
        "default",
        lambda _: WorkspaceSecrets(
            workspace_id,
            (StoredSubscription("wh_1", "shipment.sent", "https://x", secret, "2026-01-01"),),
        ),
    )
    env = {
        **cli_env(None),
        "SOURCES__SIGNING__API_KEY": "sk_live_not_used",
        "SOURCES__SIGNING__BASE_URL": "http://127.0.0.1:9/v1",
    }
    warehouse = folder / "signing.duckdb"
    return ServedReceiver(folder, warehouse, env, *options, descriptor_limit=descriptor_limit)
