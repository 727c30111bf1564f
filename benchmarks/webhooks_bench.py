"""How fresh webhooks keep the warehouse, and what they cost the service against polling.

A sandbox with its limits on (plan pro: 300 requests a minute) runs background activity
(shipments sent, opened, signed, completed, expired; contacts created) for `--seconds`. Two
warehouses follow it side by side:

- **webhooks**: the receiver (`signing-etl webhooks serve`, a process of its own) subscribed to
  every event, draining its inbox `--quiet` seconds after the last delivery (at most `--within`
  after the first);
- **polls**: `load_incremental` every `--poll-every` seconds, the freshness a schedule gives.

It prints the event-to-raw-row latency of the deliveries (from the sender's first attempt,
wall time, to the commit of the load that wrote their row: `raw._dlt_loads.inserted_at`),
median, p95 and max; the same for the polls (to the commit of the first poll that began after
the event); and the requests each side made per changed shipment, the changes counted from the
sandbox's own records before and after.

    uv run python -m benchmarks.webhooks_bench                       # 300 s of activity
    uv run python -m benchmarks.webhooks_bench --seconds 600 --speed 60 --poll-every 60
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import httpx

from benchmarks.load_bench import START_MS, snapshot
from pipelines.configuration import WorkspaceEntry
from pipelines.environment import environment_set, source_environment
from pipelines.load.run import LoadResult, load_incremental
from pipelines.warehouse import Warehouse
from pipelines.webhooks.secrets_file import SecretsFile
from pipelines.webhooks.subscriptions import subscribe
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import Pacing, configured_source


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def spread(label: str, seconds: list[float]) -> str:
    if not seconds:
        return f"{label}: none"
    median, p95 = statistics.median(seconds), percentile(seconds, 0.95)
    most = max(seconds)
    return f"{label}: median {median:.1f} s, p95 {p95:.1f} s, max {most:.1f} s, of {len(seconds):,}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_receiver(folder: Path, warehouse: Path, port: int, env: dict[str, str], args: Any) -> Any:
    """`signing-etl webhooks serve` as a user runs it (`args.quiet`, `args.within`: its
    timing); its log in `receiver.log`."""
    serve = ["webhooks", "serve", "--duckdb", str(warehouse), "--port", str(port)]
    timing = ["--load-after", str(args.quiet), "--load-within", str(args.within)]
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", *serve, *timing],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(folder / "receiver.log", "w"),  # noqa: SIM115
        text=True,
    )
    assert process.stdout is not None
    print(process.stdout.readline().strip(), flush=True)
    return process


def first_attempts(running: RunningSandbox) -> dict[str, float]:
    """Each delivery's first attempt (wall time, epoch seconds): when the service sent it."""
    sent = running.app.state.dispatcher.deliveries(running.store)
    first: dict[str, float] = {}
    for delivery in sent:
        if delivery.attempts:
            first[delivery.delivery_id] = delivery.attempts[0].sent_at
    return first


def committed_rows(warehouse: Path) -> dict[str, float]:
    """Each delivery in `raw.webhook_deliveries`, and when the load that wrote it committed."""
    with duckdb.connect(str(warehouse), read_only=True) as db:
        rows = db.execute(
            "select d.delivery_id, l.inserted_at from raw.webhook_deliveries d "
            "join raw._dlt_loads l on l.load_id = d._dlt_load_id"
        ).fetchall()
    return {delivery_id: at.timestamp() for delivery_id, at in rows}


def waiting_in_inbox(warehouse: Warehouse) -> int:
    with sqlite3.connect(warehouse.webhooks_dir / "inbox.sqlite") as db:
        (count,) = db.execute("select count(*) from deliveries where done_at is null").fetchone()
    return int(count)


def settle(running: RunningSandbox, warehouse: Warehouse, most: float = 180.0) -> None:
    """Until the sender has nothing left to send and the receiver has drained it all."""
    deadline = time.time() + most
    while time.time() < deadline:
        sending = [
            d
            for d in running.app.state.dispatcher.deliveries(running.store)
            if d.state in ("waiting", "sending")
        ]
        if not sending and not waiting_in_inbox(warehouse):
            return
        time.sleep(0.5)


def named_shipments(warehouse: Path) -> int:
    """The shipments the loaded deliveries named."""
    with duckdb.connect(str(warehouse), read_only=True) as db:
        found = db.execute(
            "select count(distinct shipment_id) from raw.webhook_deliveries"
        ).fetchone()
    return int(found[0]) if found else 0


def polls_every(polls: list[tuple[float, float, LoadResult]]) -> float:
    starts = [start for start, _, _ in polls]
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    return statistics.median(gaps) if gaps else 0.0


def changed_shipments(before: dict[str, Any], after: dict[str, Any]) -> int:
    shipments = after["shipments"]
    return sum(1 for i, body in shipments.items() if before["shipments"].get(i) != body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=300.0, help="activity, real seconds")
    parser.add_argument("--speed", type=float, default=20.0, help="simulated s per real s")
    parser.add_argument("--shipments", type=int, default=1_000)
    parser.add_argument(
        "--touches", type=float, default=0.0, help="edits per second that send no event"
    )
    parser.add_argument("--poll-every", type=float, default=60.0)
    parser.add_argument("--quiet", type=float, default=10.0, help="serve --load-after")
    parser.add_argument("--within", type=float, default=30.0, help="serve --load-within")
    args = parser.parse_args()
    config = SandboxConfig(
        seed=11,
        shipments=args.shipments,
        history_days=10,
        start_ms=START_MS,
        plan="pro",
        limits_enabled=False,  # for the two first loads; on for what is measured
    )
    with tempfile.TemporaryDirectory() as work, RunningSandbox(config) as running:
        folder = Path(work)
        hooks, polled = folder / "webhooks.duckdb", folder / "polls.duckdb"
        env_values = source_environment(running.base_url, running.api_key)
        with environment_set(env_values):
            limits_off = configured_source().paced(Pacing(requests_per_second=1000, burst=200))
            load_incremental(hooks, settings=limits_off)
            load_incremental(polled, settings=limits_off)
        admin = f"{running.root_url}/_sandbox"
        httpx.patch(f"{admin}/config", json={"limits_enabled": True}).raise_for_status()
        port = free_port()
        entry = WorkspaceEntry("default", running.base_url, running.api_key)
        subscribe(entry, SecretsFile(Warehouse.at(hooks).webhooks_dir), f"http://127.0.0.1:{port}")
        receiver = start_receiver(folder, hooks, port, {**os.environ, **env_values}, args)
        before = snapshot(running.store)
        polls: list[tuple[float, float, LoadResult]] = []  # began, committed, result
        activity = {"speed": args.speed, "touches_per_second": args.touches}
        httpx.post(f"{admin}/activity", json=activity, timeout=60).raise_for_status()
        began = time.time()
        with environment_set(env_values):
            while time.time() - began < args.seconds:
                time.sleep(max(0.0, began + args.poll_every * (len(polls) + 1) - time.time()))
                start = time.time()
                result = load_incremental(polled)
                polls.append((start, result.finished_at.timestamp(), result))
        httpx.post(f"{admin}/activity", json={"running": False}, timeout=60).raise_for_status()
        after = snapshot(running.store)
        settle(running, Warehouse.at(hooks))
        receiver.terminate()
        receiver.wait(60)
        report(running, hooks, polls, changed_shipments(before, after), Warehouse.at(hooks))


def report(
    running: RunningSandbox,
    hooks: Path,
    polls: list[tuple[float, float, LoadResult]],
    changed: int,
    warehouse: Warehouse,
) -> None:
    sent = first_attempts(running)
    rows = committed_rows(hooks)
    latencies = [rows[i] - at for i, at in sent.items() if i in rows]
    poll_latencies = []
    for at in sent.values():
        later = [committed for start, committed, _ in polls if start >= at]
        if later:
            poll_latencies.append(later[0] - at)
    with sqlite3.connect(warehouse.webhooks_dir / "inbox.sqlite") as db:  # the drains' counts
        drain_count, drain_requests, drain_records = db.execute(
            "select count(*), sum(requests), sum(records) from drains"
        ).fetchone()
    poll_requests = sum(result.stats.requests for _, _, result in polls)
    named = named_shipments(hooks)
    print(f"deliveries sent {len(sent):,}; loaded by the drains {len(rows):,}")
    print(spread("event to raw row, webhooks (triggered drains)", latencies))
    print(spread("event to raw row, polls", poll_latencies))
    print(f"shipments changed in the sandbox: {changed:,}, of which deliveries named {named:,}")
    print(
        f"webhooks: {drain_count} drains, {drain_requests or 0:,} requests, "
        f"{drain_records or 0:,} records read; {(drain_requests or 0) / max(changed, 1):.2f} "
        f"requests per changed shipment, {(drain_requests or 0) / max(named, 1):.2f} per "
        "shipment named"
    )
    print(
        f"polls every {polls_every(polls):.0f} s: {len(polls)} polls, {poll_requests:,} requests; "
        f"{poll_requests / max(changed, 1):.2f} requests per changed shipment"
    )
    print(f"at {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")


if __name__ == "__main__":
    main()
