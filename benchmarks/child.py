"""One load in a fresh interpreter, for benchmarks that compare loads or measure their memory.

The parent calls `run_load`: it starts `python -m benchmarks.child`, waits for it with
`os.wait4` (so the peak RSS read is that child's own, not the largest of every child so far)
and returns what the child printed as its last line (JSON) with the child's peak RSS. The child
runs one load: ours (`load_incremental`) or the peer (`benchmarks.peer`), against a sandbox the
parent serves, and times the load call itself (imports at start-up excluded; the imports dlt
makes during the load are part of it, for both sides alike).

    python -m benchmarks.child ours --warehouse /tmp/w.duckdb --base-url URL --api-key KEY
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The pacer's ceiling when the sandbox's limits are off: high enough never to wait.
UNBOUNDED_RATE = 100_000.0
UNBOUNDED_BURST = 1_000
# Child requests in flight: ours (`concurrency`) and the peer (`extract.workers`) alike.
DEFAULT_WORKERS = 8
# Tables with one row per API record, named alike by both sides: their rows are the records a
# load read (recipients, fields and custom properties are parts of these, not counted again).
RECORD_TABLES = ("documents", "shipments", "contacts", "audit_events")


@dataclass(frozen=True)
class ChildLoad:
    """What one child process reported, with its peak resident memory."""

    report: dict[str, Any]
    max_rss_mib: float
    process_seconds: float  # start-up and imports included

    @property
    def seconds(self) -> float:
        return float(self.report["seconds"])

    @property
    def rows(self) -> dict[str, int]:
        return dict(self.report["rows"])

    @property
    def records(self) -> int:
        """API records loaded (see RECORD_TABLES)."""
        return sum(self.rows.get(table, 0) for table in RECORD_TABLES)

    @property
    def steps(self) -> str:
        """dlt's steps and their seconds, as one short text."""
        return ", ".join(f"{step} {s:.1f} s" for step, s in self.report["steps"].items())


def run_load(
    side: str,
    warehouse: Path,
    base_url: str,
    api_key: str,
    *,
    workers: int = DEFAULT_WORKERS,
) -> ChildLoad:
    """Run one load of `side` ("ours" or "peer") in a child process and wait for it."""
    args = [
        sys.executable,
        "-m",
        "benchmarks.child",
        side,
        "--warehouse",
        str(warehouse),
        "--base-url",
        base_url,
        "--api-key",
        api_key,
        "--workers",
        str(workers),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOURCES__")}
    started = time.perf_counter()
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"{side} load failed with exit code {process.returncode}")
    return ChildLoad(json.loads(lines[-1]), usage.ru_maxrss / 1024, seconds)


def cli_environment(base_url: str, api_key: str) -> dict[str, str]:
    """This process's environment for `signing-etl` against a limit-free sandbox: no source
    setting of the caller's, the sandbox's URL and key, the pacer unbounded."""
    from pipelines.environment import source_environment

    env = {k: v for k, v in os.environ.items() if not k.startswith("SOURCES__")}
    env |= source_environment(base_url, api_key)
    env["SOURCES__SIGNING__REQUESTS_PER_SECOND"] = str(UNBOUNDED_RATE)
    env["SOURCES__SIGNING__BURST"] = str(UNBOUNDED_BURST)
    return env


def timed_cli(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """`signing-etl ARGS` as a scheduler starts it, in a process of its own: its wall and CPU
    seconds (start-up included) and its standard error; a failed command stops the benchmark."""
    cpu_before, began = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall, cpu = time.perf_counter() - began, _children_cpu() - cpu_before
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr[-800:]}")
    return wall, cpu, done.stderr


def timed_cli_load(warehouse: Path, env: dict[str, str], *options: str) -> float:
    """`signing-etl load` (with `options`) as a scheduler starts it: its wall time."""
    return timed_cli(["load", "--duckdb", str(warehouse), *options], env)[0]


def _children_cpu() -> float:
    """CPU seconds (user and system) of every child process waited for so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _ours(warehouse: Path, base_url: str, api_key: str, workers: int) -> dict[str, Any]:
    from dataclasses import replace

    from pipelines.load.run import load_incremental
    from sources.signing import configured_source

    started = time.perf_counter()
    settings = configured_source(api_key=api_key, base_url=base_url)
    unbounded = replace(
        settings, requests_per_second=UNBOUNDED_RATE, burst=UNBOUNDED_BURST, concurrency=workers
    )
    result = load_incremental(warehouse, settings=unbounded)
    seconds = time.perf_counter() - started
    if result.exit_code:
        raise RuntimeError(f"our load stopped: {result.stopped}")
    return {
        "seconds": seconds,
        "rows": result.rows,
        "steps": result.step_seconds,
        "requests": result.stats.requests,
    }


def _peer(warehouse: Path, base_url: str, api_key: str, workers: int) -> dict[str, Any]:
    import dlt

    from benchmarks.peer import peer_source
    from pipelines.warehouse import Warehouse

    os.environ["EXTRACT__WORKERS"] = str(workers)
    started = time.perf_counter()
    pipeline = dlt.pipeline(
        pipeline_name="signing_peer",
        pipelines_dir=str(Warehouse.at(warehouse).pipelines_dir),
        destination=Warehouse.at(warehouse).dlt_destination(),
        dataset_name="raw",
    )
    pipeline.run(peer_source(base_url, api_key))
    seconds = time.perf_counter() - started
    trace = pipeline.last_trace
    counts = trace.last_normalize_info.row_counts if trace and trace.last_normalize_info else {}
    steps = {
        step.step: (step.finished_at - step.started_at).total_seconds()
        for step in (trace.steps if trace else [])
        if step.finished_at is not None and step.step != "run"
    }
    return {
        "seconds": seconds,
        "rows": {t: n for t, n in counts.items() if not t.startswith("_dlt")},
        "steps": steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("side", choices=["ours", "peer"])
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    args = parser.parse_args()
    load = _ours if args.side == "ours" else _peer
    report = load(args.warehouse, args.base_url, args.api_key, args.workers)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
