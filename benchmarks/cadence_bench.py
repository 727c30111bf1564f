"""What the checks for deleted records cost on a schedule, and an incremental run beside the peer.

1. A day of hourly runs with nothing new, at the default cadence (`count_check_every_hours`,
   `full_check_max_age_hours`): the sandbox's clock is moved an hour between runs without any
   activity, and each run's requests are counted by endpoint. Printed: requests per run, their
   average over the day, and the runs whose checks were due.
2. Incremental runs as a scheduler starts them, ours (`signing-etl load --no-models`, no
   setting changed but the pacer's ceiling) and the peer (dlt's `rest_api` source,
   `benchmarks.peer`, which checks nothing for deleted records), each in a process of its own
   and into its own warehouse, after the same hour of activity, the sides alternating first.
   Printed: each run's wall time (start-up included) and the median ratio ours / peer.

    uv run python -m benchmarks.cadence_bench                  # 2,000 shipments, 5 rounds
    uv run python -m benchmarks.cadence_bench --shipments 500 --rounds 3 --hours 12
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import httpx

from benchmarks.child import (
    UNBOUNDED_BURST,
    UNBOUNDED_RATE,
    cli_environment,
    run_load,
    timed_cli_load,
)
from pipelines.environment import environment_set, source_environment
from pipelines.load.run import load_incremental
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import configured_source

START_MS = 1_767_225_600_000
HOUR_MS = 3_600_000


def quiet_day(shipments: int, hours: int, workdir: Path) -> None:
    """Hourly runs with nothing new, the default cadence: requests per run and on average."""
    config = SandboxConfig(seed=8, shipments=shipments, start_ms=START_MS, limits_enabled=False)
    warehouse = workdir / "quiet" / "signing.duckdb"
    with (
        RunningSandbox(config) as running,
        environment_set(source_environment(running.base_url, running.api_key)),
    ):
        unbounded = replace(
            configured_source(), requests_per_second=UNBOUNDED_RATE, burst=UNBOUNDED_BURST
        )
        first = load_incremental(warehouse, settings=unbounded)
        print(f"first load: {first.stats.requests:,} requests, {sum(first.rows.values()):,} rows")
        spent: list[int] = []
        for hour in range(1, hours + 1):
            running.store.clock.advance(HOUR_MS)  # time passes, nothing happens
            run = load_incremental(warehouse, settings=unbounded)
            spent.append(run.stats.requests)
            endpoints = ", ".join(f"{k} {v}" for k, v in sorted(run.stats.by_endpoint.items()))
            print(f"hour {hour:2d}: {run.stats.requests} requests ({endpoints})", flush=True)
    print(
        f"{hours} hourly runs with nothing new: {sum(spent)} requests, "
        f"{statistics.mean(spent):.2f} per run on average (at most {max(spent)}); "
        f"runs by requests: {dict(sorted(Counter(spent).items()))}"
    )


def beside_the_peer(shipments: int, rounds: int, workdir: Path) -> None:
    """Incremental runs of ours and the peer after the same hour of activity."""
    config = SandboxConfig(seed=9, shipments=shipments, start_ms=START_MS, limits_enabled=False)
    ours_at, peer_at = workdir / "ours" / "signing.duckdb", workdir / "peer" / "signing.duckdb"
    walls: dict[str, list[float]] = {"ours": [], "peer": []}
    with RunningSandbox(config) as running:
        env = cli_environment(running.base_url, running.api_key)

        def one(side: str) -> float:
            if side == "ours":
                return timed_cli_load(ours_at, env, "--no-models")
            load = run_load("peer", peer_at, running.base_url, running.api_key)
            return load.process_seconds

        print(f"first loads: ours {one('ours'):.1f} s, peer {one('peer'):.1f} s", flush=True)
        for number in range(rounds):
            advanced = httpx.post(f"{running.root_url}/_sandbox/advance", json={"hours": 1})
            advanced.raise_for_status()
            order = ("ours", "peer") if number % 2 == 0 else ("peer", "ours")
            for side in order:
                walls[side].append(one(side))
            print(
                f"round {number + 1}: {advanced.json()['steps']} activity steps; "
                f"ours {walls['ours'][-1]:.2f} s, peer {walls['peer'][-1]:.2f} s",
                flush=True,
            )
    ours, peer = statistics.median(walls["ours"]), statistics.median(walls["peer"])
    print(
        f"incremental runs, median of {rounds}: ours {ours:.2f} s, peer {peer:.2f} s: "
        f"ours / peer = {ours / peer:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=2_000)
    parser.add_argument("--hours", type=int, default=24, help="hourly runs with nothing new")
    parser.add_argument("--rounds", type=int, default=5, help="incremental runs of each side")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="signing-cadence-"))
    try:
        quiet_day(args.shipments, args.hours, workdir)
        beside_the_peer(args.shipments, args.rounds, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
