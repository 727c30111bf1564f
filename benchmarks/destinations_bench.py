"""The same load into DuckDB and into Postgres, side by side in one run.

One sandbox (limits off) is served by this process; a throwaway PostgreSQL cluster is started
as the tests start it (`tests/support/postgres.py`, Debian's server binaries). Each round loads
the whole sandbox into a fresh DuckDB file and a fresh Postgres database, the sides alternating
first, then builds the models on each; printed: the load's wall time and its dlt steps, and the
dbt build's time.

    uv run python -m benchmarks.destinations_bench                  # 1,000 shipments, 2 rounds
    uv run python -m benchmarks.destinations_bench --shipments 3000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from pipelines.load.run import load_incremental
from pipelines.modeling.build import build_models
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox, SandboxConfig
from tests.support.loading import fast
from tests.support.postgres import PostgresServer, running_postgres

START_MS = 1_767_225_600_000


def one(side: str, running: RunningSandbox, server: PostgresServer, workdir: Path) -> None:
    """Load the sandbox into a fresh warehouse of `side`, then build the models; print both."""
    warehouse = workdir / f"{side}-{time.monotonic_ns()}" / "signing.duckdb"
    if side == "postgres":
        os.environ["DESTINATION__POSTGRES__CREDENTIALS"] = server.create_database().credentials
    began = time.monotonic()
    place = Warehouse.at(warehouse, side)
    result = load_incremental(place, settings=fast(running))
    loaded = time.monotonic() - began
    built = build_models(place)
    steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in result.step_seconds.items())
    print(
        f"{side:8}: load {loaded:5.1f} s ({steps}; {sum(result.rows.values()):,} rows), "
        f"models {built.seconds:5.1f} s ({built.summary})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    config = SandboxConfig(
        seed=8, shipments=args.shipments, start_ms=START_MS, limits_enabled=False
    )
    workdir = Path(tempfile.mkdtemp(prefix="signing-destinations-"))
    try:
        with running_postgres() as server, RunningSandbox(config) as running:
            for number in range(args.rounds):
                sides = ("duckdb", "postgres") if number % 2 == 0 else ("postgres", "duckdb")
                for side in sides:
                    one(side, running, server, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
