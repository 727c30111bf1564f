"""What a load costs the service, against the sandbox over loopback.

For an initial and an incremental load with the service's limits on: requests made divided by
the minimum needed, 429s received, the achieved request rate divided by the rate the limits
allow, and wall time; then no-change and incremental runs of the CLI (`--cli-runs` of each),
each in a process of its own, with their wall time against the time they had requests on the
wire (the fixed overhead of a run). Then records per second with the network taken out (limits
off, pacer unbounded), ours and the peer (dlt's generic `rest_api` source, `benchmarks.peer`)
side by side in the same run.

    uv run python -m benchmarks.load_bench                 # defaults: 500 shipments, plan pro
    uv run python -m benchmarks.load_bench --shipments 2000 --plan business
    uv run python -m benchmarks.load_bench --only-unlimited --unlimited-shipments 3000 --rounds 3

The minimum is computed from the sandbox's own records, not from the pipeline: one page per
200 records (at least one) of each list endpoint, two child requests (events, fields) per new
or changed shipment, one detail request per new or changed document, plus GET /me and
GET /webhooks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.child import DEFAULT_WORKERS, run_load
from pipelines.environment import environment_set, source_environment
from pipelines.load.run import LoadResult, load_incremental
from sandbox import PLAN_REQUESTS_PER_MINUTE, RunningSandbox, SandboxConfig, Store

START_MS = 1_767_225_600_000


def snapshot(store: Store) -> dict[str, dict[str, Any]]:
    """The API form of every record, to tell what changed between two moments."""
    with store.lock:
        return {
            "documents": {d.id: d.to_json() for d in store.documents.by_id.values()},
            "contacts": {c.id: c.to_json() for c in store.contacts.by_id.values()},
            "shipments": {s.id: s.to_json() for s in store.shipments.by_id.values()},
        }


def minimum_requests(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> int:
    changed = {
        name: sum(1 for i, body in records.items() if before.get(name, {}).get(i) != body)
        for name, records in after.items()
    }
    pages = sum(max(1, math.ceil(n / 200)) for n in changed.values())
    return pages + 2 * changed["shipments"] + changed["documents"] + 2


def report(label: str, result: LoadResult, minimum: int, allowed_rate: float) -> None:
    stats = result.stats
    extract = result.step_seconds["extract"]  # the time the network was in use
    achieved = stats.requests / extract if extract else 0.0
    print(
        f"{label}: {stats.requests} requests / {minimum} minimum = "
        f"{stats.requests / minimum:.3f}; 429s {stats.throttled}; "
        f"rate {achieved:.2f}/s of {allowed_rate:.2f}/s allowed = {achieved / allowed_rate:.0%} "
        f"(over the {extract:.1f} s extract); wall {result.seconds:.1f} s; "
        f"{sum(result.rows.values()):,} rows"
    )


def limited(shipments: int, plan: str, workdir: Path, cli_runs: int) -> None:
    """Initial and incremental load with the plan's limits on, the pacer at its defaults."""
    config = SandboxConfig(seed=5, shipments=shipments, start_ms=START_MS, plan=plan)
    allowed = min(config.requests_per_second, config.effective_requests_per_minute / 60)
    warehouse = workdir / "limited.duckdb"
    with (
        RunningSandbox(config) as running,
        environment_set(source_environment(running.base_url, running.api_key)),
    ):
        empty: dict[str, dict[str, Any]] = {"documents": {}, "contacts": {}, "shipments": {}}
        first = snapshot(running.store)
        report(
            "initial load    ", load_incremental(warehouse), minimum_requests(empty, first), allowed
        )
        httpx.post(f"{running.root_url}/_sandbox/advance", json={"days": 2}).raise_for_status()
        second = snapshot(running.store)
        report(
            "incremental load",
            load_incremental(warehouse),
            minimum_requests(first, second),
            allowed,
        )
        beyond: dict[str, list[float]] = {"no-change": [], "incremental": []}
        for _ in range(cli_runs):
            beyond["no-change"].append(cli_run("no-change run (CLI)  ", warehouse, running))
            httpx.post(f"{running.root_url}/_sandbox/advance", json={"hours": 6}).raise_for_status()
            beyond["incremental"].append(cli_run("incremental run (CLI)", warehouse, running))
        for kind, seconds in beyond.items():
            print(
                f"{kind} runs, median of {cli_runs}: {statistics.median(seconds):.2f} s beyond "
                f"their requests (max {max(seconds):.2f} s)"
            )


def cli_run(label: str, warehouse: Path, running: RunningSandbox) -> float:
    """`signing-etl load --no-models` as a scheduler starts it, in a process of its own: its wall
    time (start-up and tail included) against the wall time it had requests on the wire."""
    env = {**os.environ, "SOURCES__SIGNING__API_KEY": running.api_key}
    env["SOURCES__SIGNING__BASE_URL"] = running.base_url
    command = [sys.executable, "-m", "pipelines.cli", "--log-format", "json", "load"]
    began = time.monotonic()
    done = subprocess.run(
        [*command, "--no-models", "--duckdb", str(warehouse)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - began
    summary = next(
        entry
        for entry in map(json.loads, done.stderr.splitlines())
        if entry.get("message") == "load summary"
    )
    on_wire = float(summary["request_seconds"])
    print(
        f"{label}: exit {done.returncode}, wall {wall:.2f} s, {summary['requests']} requests "
        f"on the wire {on_wire:.2f} s: {wall - on_wire:.2f} s beyond its requests",
        flush=True,
    )
    return wall - on_wire


def unlimited(shipments: int, rounds: int, workers: int, workdir: Path) -> None:
    """Records per second with the network out of the way, ours and the peer (dlt's `rest_api`
    source configured for the same API, `benchmarks.peer`) side by side: one sandbox with its
    limits off served by this process, each load in a fresh child process into its own
    warehouse (DuckDB fed with parquet, as ours loads), the same number of child requests in
    flight, the sides alternating first. Records: documents, shipments, contacts and audit
    events loaded; the rate is records over the load's wall time (extract, normalize, load)."""
    config = SandboxConfig(seed=6, shipments=shipments, start_ms=START_MS, limits_enabled=False)
    rates: dict[str, list[float]] = {"ours": [], "peer": []}
    with RunningSandbox(config) as running:
        for number in range(rounds):
            for side in ("ours", "peer") if number % 2 == 0 else ("peer", "ours"):
                warehouse = workdir / f"{side}-{number}" / "signing.duckdb"
                load = run_load(side, warehouse, running.base_url, running.api_key, workers=workers)
                rate = load.records / load.seconds
                rates[side].append(rate)
                print(
                    f"unlimited {side}: {load.records:,} records in {load.seconds:.1f} s = "
                    f"{rate:,.0f} records/s ({sum(load.rows.values()):,} rows; {load.steps}; "
                    f"peak RSS {load.max_rss_mib:,.0f} MiB)",
                    flush=True,
                )
    ours, peer = statistics.median(rates["ours"]), statistics.median(rates["peer"])
    print(
        f"unlimited, median of {rounds}: ours {ours:,.0f} records/s, peer {peer:,.0f} "
        f"records/s: ours / peer = {ours / peer:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=500)
    parser.add_argument("--plan", choices=sorted(PLAN_REQUESTS_PER_MINUTE), default="pro")
    parser.add_argument("--unlimited-shipments", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=2, help="unlimited loads of each side")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--cli-runs", type=int, default=5, help="no-change and incremental runs")
    parser.add_argument("--only-unlimited", action="store_true", help="skip the limited loads")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="signing-bench-"))
    try:
        if not args.only_unlimited:
            limited(args.shipments, args.plan, workdir, args.cli_runs)
        unlimited(args.unlimited_shipments, args.rounds, args.workers, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
