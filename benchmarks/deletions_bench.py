"""What checking for deleted records costs: the cheap check (each list's `total` against the
warehouse's live rows, one request) and a full pass over a list's ids, at 10,000 and 50,000
shipments, against the sandbox over loopback with its limits off.

    uv run python -m benchmarks.deletions_bench
    uv run python -m benchmarks.deletions_bench --shipments 10000 50000 --repeat 3

The warehouse side is real: a DuckDB warehouse that dlt loaded with every shipment's id (the
rows the check reads; their other columns do not change what it costs), read through the
pipeline's own connection as a load reads it (`pipelines.raw.deletions.PipelineRecords`). The
source side is the source's own reconciliation (`sources.signing.reconcile`) on a real
connection, so the figures are the requests it sends and the wall time it takes, the
warehouse's reads included. No record is deleted: the full pass finds nothing, which costs
what finding something costs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import dlt

from pipelines.raw.deletions import PipelineRecords
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import Pacing, RunControl, configured_source, connect
from sources.signing.reconcile import reconcile

START_MS = 1_767_225_600_000
# Limits off, and a pacer that does not hold the source back either.
PACING = Pacing(requests_per_second=5000.0, burst=500)


def warehouse_of(running: RunningSandbox, folder: Path) -> tuple[dlt.Pipeline, str]:
    """A DuckDB warehouse holding every shipment of the sandbox (its id and workspace)."""
    store = running.store
    workspace_id = store.workspace.id
    with store.lock:
        rows = [{"id": i, "workspace_id": workspace_id} for i in store.shipments.by_id]
    pipeline = dlt.pipeline(
        pipeline_name="deletions_bench",
        pipelines_dir=str(folder / "dlt"),
        destination=dlt.destinations.duckdb(str(folder / "bench.duckdb")),
        dataset_name="raw",
    )
    pipeline.run(rows, table_name="shipments", write_disposition="replace")
    return pipeline, workspace_id


def one_check(
    running: RunningSandbox, records: PipelineRecords, *, full: bool
) -> tuple[int, float]:
    """Requests and wall seconds of one check of the shipments list: `full` forces the pass
    over every id (`load --reconcile`), else the last full pass is recent and the counts
    agree, so the cheap check decides."""
    control = RunControl()
    settings = configured_source(api_key=running.api_key, base_url=running.base_url)
    connection = connect(settings.paced(PACING), reconcile=full, control=control)
    try:
        connection.deletions.warehouse = records
        connection.deletions.caught_up("shipments")  # as after the run's pass over its changes
        state: dict[str, Any] = {}
        if not full:
            now = connection.client.get("/me")[1].isoformat()
            state["deletions"] = {"table": "shipments", "at": now, "whole_history": True}
        before = control.stats.requests
        began = time.perf_counter()
        loaded_again = sum(len(page) for page in reconcile(connection, "shipments", state))
        seconds = time.perf_counter() - began
        assert loaded_again == 0, "the warehouse holds every shipment: nothing to load again"
        outcome = connection.deletions.decide()
        assert [d.check for d in outcome] == ["full" if full else "count"], outcome
        assert not outcome[0].found, outcome
        return control.stats.requests - before, seconds
    finally:
        control.finish()


def bench(shipments: int, repeat: int) -> None:
    config = SandboxConfig(seed=3, shipments=shipments, start_ms=START_MS, limits_enabled=False)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder, RunningSandbox(config) as running:
        print(f"{shipments:,} shipments: sandbox and warehouse ready in ", end="", flush=True)
        pipeline, workspace_id = warehouse_of(running, Path(folder))
        print(f"{time.perf_counter() - began:.1f} s")
        records = PipelineRecords(pipeline, workspace_id)
        for label, full in (("cheap check", False), ("full id pass", True)):
            runs = [one_check(running, records, full=full) for _ in range(repeat)]
            requests = {r for r, _ in runs}
            seconds = [s for _, s in runs]
            print(
                f"  {label:12}: {'/'.join(map(str, sorted(requests)))} requests, "
                f"wall {statistics.median(seconds):.2f} s median of {repeat} "
                f"(min {min(seconds):.2f}, max {max(seconds):.2f})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    for shipments in arguments.shipments:
        bench(shipments, arguments.repeat)


if __name__ == "__main__":
    main()
