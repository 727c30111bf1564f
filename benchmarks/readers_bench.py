"""What analysts cost a scheduled load on the DuckDB default, and what they see during it.

A sandbox of `--shipments` shipments is loaded and modelled once (`signing-etl load`). Then, for
`--rounds` rounds, a day of activity is followed by `signing-etl load` (with the models) as a
scheduler starts it, alternately alone and with readers on the file analysts are told to open:

- a holder: one process that opened a read-only connection before the load and keeps it;
- a poller: a process that opens the file read-only every second during the load, reads the
  shipment ids of `raw.shipments` and of `marts.fct_shipments` and closes it again.

Printed per load: its wall time; with readers, the poller's slowest open-and-read, its count of
reads, and how many saw raw and marts of different runs (ids that differ). Then the medians.

    uv run python -m benchmarks.readers_bench                    # 500 shipments, 2 rounds
    uv run python -m benchmarks.readers_bench --shipments 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import httpx

from benchmarks.child import cli_environment, timed_cli_load
from sandbox import RunningSandbox, SandboxConfig

START_MS = 1_767_225_600_000
HOLDER = """
import sys, duckdb
connection = duckdb.connect(sys.argv[1], read_only=True)
connection.execute("select count(*) from raw.shipments").fetchone()
print("ready", flush=True)
sys.stdin.read()
"""


def poll(path: Path, stop: Path) -> tuple[float, int, int]:
    """Open, read raw and mart ids, close, every second until `stop` exists: the slowest
    open-and-read, the reads, and the reads that saw raw and marts of different runs."""
    slowest, reads, torn = 0.0, 0, 0
    while not stop.exists():
        began = time.perf_counter()
        with duckdb.connect(str(path), read_only=True) as db:
            raw = {r[0] for r in db.execute("select id from raw.shipments").fetchall()}
            marts = {
                r[0] for r in db.execute("select shipment_id from marts.fct_shipments").fetchall()
            }
        slowest = max(slowest, time.perf_counter() - began)
        reads += 1
        torn += raw != marts
        time.sleep(max(0.0, 1.0 - (time.perf_counter() - began)))
    return slowest, reads, torn


def with_readers(warehouse: Path, env: dict[str, str], workdir: Path) -> tuple[float, str]:
    """A load while a holder keeps a connection and a poller opens the file every second."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(warehouse)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "ready"
    stop = workdir / "stop"
    stop.unlink(missing_ok=True)
    poller = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.readers_bench", "--poll", str(warehouse), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        seconds = timed_cli_load(warehouse, env)
    finally:
        stop.touch()
        polled = poller.communicate(timeout=60)[0].strip()
        holder.communicate(input="", timeout=30)
    if holder.returncode != 0:
        raise RuntimeError("the holder's connection failed during the load")
    return seconds, polled


def one_load(kind: str, warehouse: Path, env: dict[str, str], workdir: Path) -> float:
    """One load `alone` or `with readers`, said in a line; its wall time."""
    said = ""
    if kind == "alone":
        seconds = timed_cli_load(warehouse, env)
    else:
        seconds, polled = with_readers(warehouse, env, workdir)
        slowest, reads, torn = polled.split()
        said = f"; slowest read {slowest} s of {reads}, {torn} saw raw and marts of two runs"
    print(f"load {kind}: {seconds:.1f} s{said}", flush=True)
    return seconds


def measure(shipments: int, rounds: int, workdir: Path) -> dict[str, list[float]]:
    """The first load, then `rounds` of a day's activity and a load alone or with readers."""
    warehouse = workdir / "signing.duckdb"
    config = SandboxConfig(seed=12, shipments=shipments, start_ms=START_MS, limits_enabled=False)
    walls: dict[str, list[float]] = {"alone": [], "with readers": []}
    with RunningSandbox(config) as running:
        env = cli_environment(running.base_url, running.api_key)
        print(f"first load: {timed_cli_load(warehouse, env):.1f} s", flush=True)
        for number in range(rounds):
            kinds = ("alone", "with readers") if number % 2 == 0 else ("with readers", "alone")
            for kind in kinds:
                httpx.post(f"{running.root_url}/_sandbox/advance", json={"days": 1})
                walls[kind].append(one_load(kind, warehouse, env, workdir))
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--poll", nargs=2, metavar=("FILE", "STOP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.poll:
        slowest, reads, torn = poll(Path(args.poll[0]), Path(args.poll[1]))
        print(f"{slowest:.3f} {reads} {torn}")
        return
    workdir = Path(tempfile.mkdtemp(prefix="signing-readers-"))
    try:
        walls = measure(args.shipments, args.rounds, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    alone, read = statistics.median(walls["alone"]), statistics.median(walls["with readers"])
    print(f"median load: alone {alone:.1f} s, with readers {read:.1f} s ({read / alone:.2f}x)")


if __name__ == "__main__":
    main()
