"""The receiver under a flood of idle connections: `signing-etl webhooks serve` with `ulimit -n`
1,024, 1,500 idle connections opened at once from one client and left open, then one signed
delivery; prints its answer and how long it took (wall clock, this machine). Without the
receiver's bounds (`pipelines/webhooks/guard.py`) the delivery gets no answer at all.

    uv run python -m benchmarks.receiver_bench"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from pipelines.webhooks.secrets_file import SecretsFile, StoredSubscription, WorkspaceSecrets
from sandbox import signature

SECRET = "whsec_bench"
IDLE = 1_500


def _limited() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1_024, hard))


def _started_receiver(folder: Path, port: int) -> subprocess.Popen[str]:
    """`webhooks serve` for a subscribed workspace `default`, under `ulimit -n` 1,024."""
    SecretsFile(folder / ".signing.webhooks").update(
        "default",
        lambda _: WorkspaceSecrets(
            "ws_bench",
            (StoredSubscription("wh_1", "shipment.sent", "https://x", SECRET, "2026-01-01"),),
        ),
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SOURCES__", "DLT_"))},
        "SOURCES__SIGNING__API_KEY": "sk_live_not_used",
        "SOURCES__SIGNING__BASE_URL": "http://127.0.0.1:9/v1",
    }
    args = ["webhooks", "serve", "--duckdb", str(folder / "signing.duckdb"), "--port", str(port)]
    receiver = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", *args, "--no-loads"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=_limited,
    )
    assert receiver.stdout is not None
    receiver.stdout.readline()  # its URL: it is listening
    return receiver


def _delivered(port: int) -> tuple[int, float]:
    """One signed delivery: its status and the seconds it took."""
    payload = orjson.dumps(
        {
            "event": "shipment.sent",
            "workspace_id": "ws_bench",
            "occurred_at": "2026-03-01T10:00:00.000Z",
            "shipment": {"id": "shp_1", "status": "sent"},
        }
    )
    stamp = str(int(time.time()))
    began = time.monotonic()
    answer = httpx.post(
        f"http://127.0.0.1:{port}/default",
        content=payload,
        timeout=60,
        headers={
            "X-Service-Delivery": "dlv_bench",
            "X-Service-Timestamp": stamp,
            "X-Service-Signature": signature(SECRET, stamp, payload),
        },
    )
    return answer.status_code, time.monotonic() - began


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="receiver-bench-"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    receiver = _started_receiver(folder, port)
    idle = []
    try:
        for _ in range(IDLE):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            idle.append(sock)
        time.sleep(3)  # the receiver takes what it can of them
        status, took = _delivered(port)
        print(
            f"{IDLE} idle connections, ulimit -n 1024: delivery answered {status} in {took:.2f} s"
        )
    finally:
        for sock in idle:
            sock.close()
        receiver.terminate()
        receiver.wait(30)


if __name__ == "__main__":
    main()
