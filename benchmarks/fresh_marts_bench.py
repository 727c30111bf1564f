"""How soon a shipment that changes in the service is counted in the marts, with the receiver
running (`signing-etl webhooks serve`, its drains followed by a refresh of the marts).

A sandbox (`--shipments`, plan pro with its limits on) is loaded and the models built; the
receiver (a process of its own, with the serve defaults unless told: drain 10 s after the last
delivery, at most 30 s after the first) is subscribed to every event. Then `--changes`
shipments are sent through the API, one every `--every` seconds (each a `shipment.sent`
delivery). Meanwhile an analyst polls the published warehouse every `--poll` seconds,
read-only, for the shipments sent so far in `marts.fct_shipments`, and asks the `sent` metric
(the semantic layer's SQL, as `signing-etl metrics` runs it) for its total. A change's latency
is from the API's answer to the first poll that counts it (the metric: the first poll whose total
counts the k-th change); a poll that fails is counted (there must be none). It prints the
latencies' median, p95 and max, the refreshes the receiver logged, and the failed polls.

    uv run python -m benchmarks.fresh_marts_bench                  # 60 changes, one every 2 s
    uv run python -m benchmarks.fresh_marts_bench --changes 100 --every 1 --shipments 5000
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import httpx

from benchmarks.load_bench import START_MS
from benchmarks.webhooks_bench import free_port, spread, start_receiver
from pipelines.configuration import WorkspaceEntry
from pipelines.environment import environment_set, source_environment
from pipelines.errors import SigningEtlError
from pipelines.load.run import load_incremental
from pipelines.metrics.semantic import MetricsRequest, SemanticLayer
from pipelines.modeling.build import build_models
from pipelines.warehouse import Warehouse
from pipelines.webhooks.secrets_file import SecretsFile
from pipelines.webhooks.subscriptions import subscribe
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import Pacing, configured_source

REFRESHED = re.compile(r"marts refreshed in ([0-9.]+) s")


class Analyst:
    """Polls the published warehouse for the shipments sent so far, as a reader would."""

    def __init__(self, warehouse: Path) -> None:
        self.warehouse = warehouse
        self.sent: dict[str, float] = {}  # shipment id -> when the API answered (wall time)
        self.seen: dict[str, float] = {}  # shipment id -> first poll that counted it
        self.polls = 0
        self.failures: list[str] = []
        self.metric_sql: str | None = None  # the `sent` metric's total, compiled once
        self.metric_before: int | None = None  # its total before the first change
        self.metric_counted: list[float] = []  # when the total first counted k + 1 changes

    def poll(self) -> None:
        self.poll_metric()
        waiting = [i for i in self.sent if i not in self.seen]
        self.polls += 1
        if not waiting:
            return
        try:
            with duckdb.connect(str(self.warehouse), read_only=True) as db:
                rows = db.execute(
                    "select shipment_id from marts.fct_shipments "
                    "where is_sent and shipment_id in (select unnest(?))",
                    [waiting],
                ).fetchall()
        except duckdb.Error as error:
            self.failures.append(str(error).splitlines()[0])
            return
        now = time.time()
        for (shipment_id,) in rows:
            self.seen.setdefault(shipment_id, now)

    def poll_metric(self) -> None:
        """The `sent` metric's total, as an analyst's `signing-etl metrics --metrics sent`."""
        place = Warehouse.at(self.warehouse)
        try:
            if self.metric_sql is None:
                self.metric_sql = SemanticLayer.of(place).sql(MetricsRequest(("sent",)))
            _, rows = place.read_only_query(self.metric_sql, 1, in_utc=True)
        except SigningEtlError as error:
            self.failures.append(f"metrics: {error}")
            return
        total = int(rows[0][0] or 0) if rows else 0
        if self.metric_before is None:
            self.metric_before = total
            return
        now = time.time()
        counted = min(total - self.metric_before, len(self.sent))
        while len(self.metric_counted) < counted:
            self.metric_counted.append(now)

    def latencies(self) -> list[float]:
        return [self.seen[i] - at for i, at in self.sent.items() if i in self.seen]

    def metric_latencies(self) -> list[float]:
        """The k-th change's latency to the metric: changes counted in the order sent."""
        sent = sorted(self.sent.values())
        return [counted - sent[k] for k, counted in enumerate(self.metric_counted)]


def send_changes(running: RunningSandbox, analyst: Analyst, args: Any) -> None:
    """`args.changes` shipments sent through the API, `args.every` seconds apart, polling the
    marts in between."""
    headers = {"Authorization": f"Bearer {running.api_key}"}
    with httpx.Client(base_url=running.base_url, headers=headers, timeout=60) as api:
        documents = [d["id"] for d in api.get("/documents", params={"limit": 20}).json()["data"]]
        began = time.time()
        for number in range(args.changes):
            recipient = {"name": "Ada", "email": f"ada.{number}@example.com", "company": "Acme"}
            document = documents[number % len(documents)]
            answer = api.post(
                "/shipments", json={"document_id": document, "recipients": [recipient]}
            )
            answer.raise_for_status()
            analyst.sent[answer.json()["data"]["id"]] = time.time()
            while time.time() < began + args.every * (number + 1):
                analyst.poll()
                time.sleep(args.poll)


def settle(analyst: Analyst, most: float, poll: float) -> None:
    """Poll until every change is counted, or `most` seconds pass."""
    deadline = time.time() + most
    while len(analyst.seen) < len(analyst.sent) and time.time() < deadline:
        analyst.poll()
        time.sleep(poll)


def prepare(running: RunningSandbox, warehouse: Path) -> dict[str, str]:
    """The first load and the models, limits off; the limits on afterwards. The environment
    that points the receiver at the sandbox."""
    env_values = source_environment(running.base_url, running.api_key)
    with environment_set(env_values):
        load_incremental(
            warehouse,
            settings=configured_source().paced(Pacing(requests_per_second=1000, burst=200)),
        )
    built = build_models(warehouse)
    assert built.success, built.summary
    print(f"first load and models: {built.summary}", flush=True)
    httpx.patch(f"{running.root_url}/_sandbox/config", json={"limits_enabled": True})
    return env_values


def report(analyst: Analyst, log: str, args: Any) -> None:
    refreshes = [float(seconds) for seconds in REFRESHED.findall(log)]
    print(
        f"changes: {len(analyst.sent)} shipments sent, one every {args.every:g} s; receiver "
        f"--load-after {args.quiet:g} --load-within {args.within:g}; {args.shipments:,} "
        "shipments in the sandbox"
    )
    print(spread("change to marts (fct_shipments counts it)", analyst.latencies()))
    print(spread("change to the `sent` metric (its total counts it)", analyst.metric_latencies()))
    print(
        f"not counted within {args.settle:g} s after the last change: "
        f"{len(analyst.sent) - len(analyst.seen)}"
    )
    print(spread("marts refresh after a drain (logged by the receiver)", refreshes))
    print(
        f"analyst polls: {analyst.polls:,}, failed: {len(analyst.failures)}"
        + (f" (first: {analyst.failures[0]})" if analyst.failures else "")
    )
    print(f"at {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--changes", type=int, default=60)
    parser.add_argument("--every", type=float, default=2.0, help="seconds between changes")
    parser.add_argument("--shipments", type=int, default=1_000)
    parser.add_argument("--quiet", type=float, default=10.0, help="serve --load-after")
    parser.add_argument("--within", type=float, default=30.0, help="serve --load-within")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between polls")
    parser.add_argument("--settle", type=float, default=300.0)
    args = parser.parse_args()
    config = SandboxConfig(
        seed=11,
        shipments=args.shipments,
        history_days=10,
        start_ms=START_MS,
        plan="pro",
        limits_enabled=False,
    )
    with tempfile.TemporaryDirectory() as work, RunningSandbox(config) as running:
        folder = Path(work)
        warehouse = folder / "signing.duckdb"
        env_values = prepare(running, warehouse)
        port = free_port()
        entry = WorkspaceEntry("default", running.base_url, running.api_key)
        subscribe(
            entry, SecretsFile(Warehouse.at(warehouse).webhooks_dir), f"http://127.0.0.1:{port}"
        )
        receiver = start_receiver(folder, warehouse, port, {**os.environ, **env_values}, args)
        analyst = Analyst(warehouse)
        analyst.poll_metric()  # the metric's total before any change
        try:
            send_changes(running, analyst, args)
            settle(analyst, args.settle, args.poll)
        finally:
            receiver.terminate()
            receiver.wait(120)
        report(analyst, (folder / "receiver.log").read_text(), args)


if __name__ == "__main__":
    main()
