"""Many workspaces into one PostgreSQL database from 1, 2 and 4 workers at once, limits on.

A sandbox with `--workspaces` workspaces (each its own key, the sandbox's limits on: 10
requests/s per key with a burst of 40, the plan's 300 requests a minute, and one bucket per
client IP) is served by this process, and a throwaway PostgreSQL cluster is started as the
tests start it (`tests/support/postgres.py`). For each worker count, a fresh sandbox and a
fresh database: the workspaces are dealt round-robin to that many `signing-etl load
--destination postgres --no-models --workspace ...` processes, each in an empty folder of its
own (they share nothing but the database and the service), started at once. A worker here is
what a cron host or a Celery worker is in a deployment: a process with its own set of keys.

Printed per worker count: the wall time from the first start to the last end, the requests the
sandbox served, the 429s the loads earned (the limits', not injected faults), the workers'
exit codes, and the workspaces whose raw tables equal the sandbox; then the speed-up of the
most workers over one.

    uv run python -m benchmarks.scale_pg_bench                           # 24 workspaces
    uv run python -m benchmarks.scale_pg_bench --workspaces 8 --shipments 60
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from sandbox import RunningSandbox, SandboxConfig
from tests.support.cli import cli_env
from tests.support.postgres import PostgresDatabase, PostgresServer, running_postgres
from tests.support.sandboxes import admin
from tests.support.truth import postgres_differences

START_MS = 1_767_225_600_000


@dataclass(frozen=True)
class Round:
    """One worker count's run."""

    workers: int
    seconds: float
    requests: int
    refused: int
    exit_codes: list[int]
    equal: int
    workspaces: int
    cpu_seconds: float  # the workers' user and system time, children included
    database_bytes: int
    rows: int  # raw rows written, every table

    def line(self) -> str:
        codes = ",".join(str(code) for code in self.exit_codes)
        return (
            f"{self.workers:>7}  {self.seconds:>8.1f}  {self.requests:>8,}  {self.refused:>11,}  "
            f"{self.equal:>3} of {self.workspaces:<3}  {codes:<8}  {self.cpu_seconds:>7.1f}  "
            f"{self.rows:>9,}  {self.database_bytes / 2**20:>7.1f}"
        )


HEADER = (
    "workers  wall (s)  requests  earned 429s  workspaces equal  exits     CPU (s)  raw rows"
    "  DB (MiB)"
)


def environment(running: RunningSandbox, names: list[str], credentials: str) -> dict[str, str]:
    """Every workspace configured as a user does (one key each), the source's default pacing
    (the service's own 10/s), the database as dlt names it."""
    env = cli_env(None)
    env["SOURCES__SIGNING__BASE_URL"] = running.base_url
    for name, key in zip(names, running.api_keys, strict=True):
        env[f"SOURCES__SIGNING__WORKSPACES__{name.upper()}__API_KEY"] = key
    env["DESTINATION__POSTGRES__CREDENTIALS"] = credentials
    return env


def run_workers(
    shares: list[list[str]], env: dict[str, str], folder: Path
) -> tuple[list[int], float]:
    """One `signing-etl load` per share of the workspaces, all at once, each in an empty folder
    of its own (each workspace merges through a staging dataset of its own); their exit codes
    and CPU seconds (read with `os.wait4`, each its own)."""
    processes = []
    with contextlib.ExitStack() as logs:
        for number, share in enumerate(shares):
            place = folder / f"{len(shares)}-{number}"
            place.mkdir(parents=True)
            chosen = [part for name in share for part in ("--workspace", name)]
            command = [sys.executable, "-m", "pipelines.cli", "load", "--destination", "postgres"]
            processes.append(
                subprocess.Popen(
                    [*command, "--no-models", "--duckdb", str(place / "unused.duckdb"), *chosen],
                    cwd=place,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=logs.enter_context((place / "stderr.log").open("w")),
                )
            )
        codes, cpu = [], 0.0
        for process in processes:
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            codes.append(process.returncode)
            cpu += usage.ru_utime + usage.ru_stime
    return codes, cpu


def _database_figures(database: PostgresDatabase) -> tuple[int, int]:
    """The database's size in bytes and the rows of its `raw` tables."""
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("select pg_database_size(current_database())")
        (size,) = cursor.fetchone() or (0,)
        cursor.execute("analyze")
        cursor.execute(
            "select coalesce(sum(n_live_tup), 0) from pg_stat_user_tables where schemaname = 'raw'"
        )
        (rows,) = cursor.fetchone() or (0,)
        connection.rollback()
    return int(size), int(rows)


def one_round(
    workers: int,
    config: SandboxConfig,
    count: int,
    server: PostgresServer,
    folder: Path,
) -> Round:
    """Load `count` workspaces of a fresh sandbox into a fresh database with `workers` loads
    at once, and compare each workspace with the sandbox."""
    database = server.create_database()
    names = [f"w{number:03}" for number in range(count)]
    with RunningSandbox(*config.workspaces(count)) as running:
        env = environment(running, names, database.credentials)
        began = time.perf_counter()
        shares = [names[n::workers] for n in range(workers)]
        codes, cpu = run_workers(shares, env, folder)
        seconds = time.perf_counter() - began
        state = admin(running, "GET", "/state")
        with closing(database.connect()) as connection:
            equal = sum(
                not postgres_differences(connection, store, by_workspace=True)
                for store in running.stores
            )
    size, rows = _database_figures(database)
    served, refused = int(state["requests_served"]), int(state["requests_refused"])
    return Round(workers, seconds, served, refused, codes, equal, count, cpu, size, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspaces", type=int, default=24)
    parser.add_argument("--shipments", type=int, default=100, help="per workspace")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    config = SandboxConfig(seed=9, shipments=args.shipments, start_ms=START_MS, limits_enabled=True)
    print(
        f"{args.workspaces} workspaces of {args.shipments} shipments, sandbox limits on "
        f"(plan {config.plan}: {config.effective_requests_per_minute} requests/min, "
        f"{config.requests_per_second:g}/s burst {config.burst} per key; "
        f"{config.ip_requests_per_second:g}/s per client IP), one PostgreSQL database per round",
        flush=True,
    )
    folder = Path(tempfile.mkdtemp(prefix="signing-scale-pg-"))
    rounds: list[Round] = []
    try:
        with running_postgres() as server:
            print(HEADER, flush=True)
            for workers in args.workers:
                done = one_round(workers, config, args.workspaces, server, folder)
                rounds.append(done)
                print(rounds[-1].line(), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    first, last = rounds[0], rounds[-1]
    print(
        f"speed-up of {last.workers} workers over {first.workers}: "
        f"{first.seconds / last.seconds:.2f}x",
        flush=True,
    )


if __name__ == "__main__":
    main()
