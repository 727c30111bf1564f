"""What a small DuckDB load costs in CPU beyond its records: the fixed part of every run (dlt's
configuration, DuckDB's connections, the run's records), which nightly runs with little new and
the test suite pay again and again.

Each round loads a small sandbox into a new file (a first load) and then again (a load with
nothing new), in this process; CPU is this process's, the sandbox's serving included (it is
the same in every variant compared). The first round is left out (imports, caches).

    uv run python -m benchmarks.fixed_cost_bench                  # 40 shipments, 10 rounds
    uv run python -m benchmarks.fixed_cost_bench --shipments 200 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.child import UNBOUNDED_BURST, UNBOUNDED_RATE
from pipelines.load.run import load_incremental
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import Pacing, configured_source

START_MS = 1_767_225_600_000
UNBOUNDED = Pacing(requests_per_second=UNBOUNDED_RATE, burst=UNBOUNDED_BURST)


def timed_load(warehouse: Path, running: RunningSandbox) -> float:
    """CPU seconds of one load of `running` into `warehouse`."""
    settings = configured_source(api_key=running.api_key, base_url=running.base_url)
    started = time.process_time()
    result = load_incremental(warehouse, settings=settings.paced(UNBOUNDED))
    if result.exit_code != 0:
        raise SystemExit(f"a load failed (exit {result.exit_code}): {result.stopped}")
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=10)
    options = parser.parse_args()
    config = SandboxConfig(
        seed=7, shipments=options.shipments, start_ms=START_MS, limits_enabled=False
    )
    first, again = [], []
    with RunningSandbox(config) as running, tempfile.TemporaryDirectory() as folder:
        for round_number in range(options.rounds + 1):
            warehouse = Path(folder) / f"round{round_number}" / "signing.duckdb"
            warehouse.parent.mkdir()
            costs = timed_load(warehouse, running), timed_load(warehouse, running)
            if round_number:
                first.append(costs[0])
                again.append(costs[1])
    print(f"{options.shipments} shipments, {options.rounds} rounds, CPU seconds per load:")
    for label, spent in (("first load", first), ("nothing new", again)):
        print(
            f"  {label:12} median {statistics.median(spent):.3f}"
            f"  min {min(spent):.3f}  max {max(spent):.3f}"
        )


if __name__ == "__main__":
    main()
