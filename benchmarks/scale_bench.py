"""How the load scales with the workspace: time, memory, state and warehouse size per size.

For each size, a sandbox with that many shipments (contacts and documents in the proportion the
sandbox generates them) and its limits off is served by this process; every load runs in a
child process of its own (`benchmarks.child`), whose peak RSS is read when it ends. A first
(full) load is followed by `--runs` incremental loads, the sandbox clock advanced by
`--advance-minutes` of activity before each. Printed per size, after the first load and after
the last incremental one:

- wall seconds of the load and API records per second (documents, shipments, contacts and audit
  events loaded, divided by the load's wall time); for the incremental runs, their total;
- peak RSS of the loading process (the largest of the incremental runs);
- the state: bytes of the newest compressed row in `raw._dlt_pipeline_state` and of its JSON,
  summed over pipelines (one per workspace), and the bytes of every state row kept so far;
- the warehouse file's size.

    uv run python -m benchmarks.scale_bench                          # quick: 3,000 shipments
    uv run python -m benchmarks.scale_bench --sizes 10000 50000 200000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import httpx
from dlt.common.versioned_state import decompress_state

from benchmarks.child import run_load
from sandbox import RunningSandbox, SandboxConfig

START_MS = 1_767_225_600_000


@dataclass(frozen=True)
class StateSize:
    """The sync state as the warehouse holds it."""

    row_bytes: int  # the newest compressed state row of each pipeline, summed
    json_bytes: int  # the same rows' state as JSON
    all_rows_bytes: int  # every state row kept in the warehouse
    rows: int


def state_size(warehouse: Path) -> StateSize:
    """Read the state rows of every pipeline (one per workspace) from the warehouse."""
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        rows = connection.execute(
            "select pipeline_name, state from raw._dlt_pipeline_state order by _dlt_load_id desc"
        ).fetchall()
    newest: dict[str, str] = {}
    for name, blob in rows:
        newest.setdefault(name, blob)
    return StateSize(
        row_bytes=sum(len(blob) for blob in newest.values()),
        json_bytes=sum(
            len(json.dumps(decompress_state(blob), separators=(",", ":")))
            for blob in newest.values()
        ),
        all_rows_bytes=sum(len(blob) for _, blob in rows),
        rows=len(rows),
    )


def warehouse_bytes(warehouse: Path) -> int:
    """The DuckDB file and its write-ahead log, if one is left."""
    wal = warehouse.with_name(warehouse.name + ".wal")
    return warehouse.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


@dataclass
class Measured:
    label: str
    seconds: float
    records: int
    max_rss_mib: float
    state: StateSize
    warehouse_bytes: int

    def line(self) -> str:
        rate = self.records / self.seconds if self.seconds else 0.0
        state = self.state
        return (
            f"  {self.label:<22} wall {self.seconds:7.1f} s  {self.records:>9,} records "
            f"{rate:>7,.0f}/s  peak RSS {self.max_rss_mib:6,.0f} MiB  state row "
            f"{state.row_bytes:>11,} B (JSON {state.json_bytes:>11,} B, all {state.rows} rows "
            f"{state.all_rows_bytes:>12,} B)  warehouse {self.warehouse_bytes / 2**20:8,.1f} MiB"
        )


def measure_size(shipments: int, runs: int, advance_minutes: int, workers: int) -> None:
    config = SandboxConfig(seed=7, shipments=shipments, start_ms=START_MS, limits_enabled=False)
    started = time.perf_counter()
    with RunningSandbox(config) as running:
        store = running.store
        print(
            f"{shipments:,} shipments, {len(store.contacts):,} contacts, "
            f"{len(store.documents):,} documents (sandbox ready in "
            f"{time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        folder = Path(tempfile.mkdtemp(prefix="signing-scale-"))
        warehouse = folder / "signing.duckdb"
        try:
            first = run_load("ours", warehouse, running.base_url, running.api_key, workers=workers)
            print(
                Measured(
                    "first load",
                    first.seconds,
                    first.records,
                    first.max_rss_mib,
                    state_size(warehouse),
                    warehouse_bytes(warehouse),
                ).line(),
                flush=True,
            )
            total_seconds, total_records, peak = 0.0, 0, 0.0
            for _ in range(runs):
                advanced = httpx.post(
                    f"{running.root_url}/_sandbox/advance",
                    json={"minutes": advance_minutes},
                    timeout=600,
                )
                advanced.raise_for_status()
                load = run_load(
                    "ours", warehouse, running.base_url, running.api_key, workers=workers
                )
                total_seconds += load.seconds
                total_records += load.records
                peak = max(peak, load.max_rss_mib)
            if runs:
                print(
                    Measured(
                        f"+{runs} incremental runs",
                        total_seconds,
                        total_records,
                        peak,
                        state_size(warehouse),
                        warehouse_bytes(warehouse),
                    ).line(),
                    flush=True,
                )
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[3_000], help="shipments per sandbox"
    )
    parser.add_argument("--runs", type=int, default=10, help="incremental runs after the first")
    parser.add_argument(
        "--advance-minutes", type=int, default=60, help="sandbox activity before each run"
    )
    parser.add_argument("--workers", type=int, default=8, help="child requests in flight")
    args = parser.parse_args()
    for shipments in args.sizes:
        measure_size(shipments, args.runs, args.advance_minutes, args.workers)


if __name__ == "__main__":
    main()
