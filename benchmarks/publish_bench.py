"""What publishing a DuckDB warehouse costs at a size: the file copy the pipeline uses, against
DuckDB's own `COPY FROM DATABASE` into a new file.

A sandbox of `--shipments` shipments is loaded and modelled into a warehouse (through
`signing-etl load`'s code: the working file, then its published copy); its raw and mart
tables are then doubled in the working file until it holds at least `--scale-to` shipments
(rows repeated, so the file grows as a bigger workspace's would), and each way of publishing
is timed `--repeat` times. Printed: the file's size and, per way, the best and worst seconds.

    uv run python -m benchmarks.publish_bench                       # 1,000 shipments to 100,000
    uv run python -m benchmarks.publish_bench --shipments 2000 --scale-to 200000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from pipelines.environment import environment_set
from pipelines.load.run import load_incremental
from pipelines.modeling.build import build_models
from pipelines.warehouse import Warehouse
from pipelines.warehouse._published import publish
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import Pacing, configured_source

START_MS = 1_767_225_600_000


def scaled(working: Path, at_least: int) -> int:
    """Double every raw and mart table of `working` until it holds `at_least` shipments."""
    with duckdb.connect(str(working)) as connection:
        tables = connection.execute(
            "select schema_name, table_name from duckdb_tables() "
            "where schema_name in ('raw', 'marts')"
        ).fetchall()
        shipments = int(connection.execute("select count(*) from raw.shipments").fetchone()[0])  # type: ignore[index]
        while shipments < at_least:
            for schema, table in tables:
                connection.execute(
                    f'insert into "{schema}"."{table}" select * from "{schema}"."{table}"'
                )
            shipments *= 2
        connection.execute("checkpoint")
    return shipments


def copy_from_database(working: Path, published: Path) -> None:
    """DuckDB's way: every table written afresh into a new file, renamed onto the published."""
    fresh = published.with_name(f".{published.name}.copying")
    fresh.unlink(missing_ok=True)
    with duckdb.connect(str(working)) as connection:
        connection.execute(f"attach '{fresh}' as fresh")
        connection.execute(f'copy from database "{working.stem}" to fresh')
        connection.execute("detach fresh")
    fresh.replace(published)


def timed(label: str, step: Callable[[], None], repeat: int) -> None:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - started)
    print(f"{label:<34} best {min(seconds):6.2f} s   worst {max(seconds):6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=1_000)
    parser.add_argument("--scale-to", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    config = SandboxConfig(
        seed=7, shipments=args.shipments, start_ms=START_MS, limits_enabled=False
    )
    with tempfile.TemporaryDirectory() as folder, RunningSandbox(config) as running:
        warehouse = Warehouse.at(Path(folder) / "signing.duckdb")
        source = {
            "SOURCES__SIGNING__API_KEY": running.api_key,
            "SOURCES__SIGNING__BASE_URL": running.base_url,
        }
        with environment_set(source):
            load_incremental(warehouse, settings=configured_source().paced(Pacing(500.0, 500)))
        assert build_models(warehouse).success
        shipments = scaled(warehouse.working_path, args.scale_to)
        size = warehouse.working_path.stat().st_size
        print(f"{shipments:,} shipments (rows doubled), file {size / 2**20:,.0f} MiB")
        timed("publish (checkpoint, copy, rename)", lambda: publish(warehouse.path), args.repeat)
        timed(
            "COPY FROM DATABASE, rename",
            lambda: copy_from_database(warehouse.working_path, warehouse.path),
            args.repeat,
        )
        print(f"copied file {warehouse.path.stat().st_size / 2**20:,.0f} MiB")


if __name__ == "__main__":
    main()
