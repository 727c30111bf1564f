"""How a DuckDB run hands its rows to DuckDB: INSERT statements for small runs, parquet for
large ones (`LoadFileFormat`), DuckDB's memory limit, and the packages an interrupted run left.

Every load runs the real pipeline over loopback HTTP against its own sandbox; the expected side
is the sandbox's store (`differences`) or the other file format's warehouse, never the pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.load.run import LoadResult, load_incremental
from pipelines.raw.pipeline import make_pipeline
from pipelines.warehouse import PARQUET_FROM_RECORDS, Warehouse, _duckdb
from sandbox import RunningSandbox
from sources.signing import RunControl, connect, signing_source
from tests.support import SandboxFactory, admin, differences, fast, pointed_at

pytestmark = pytest.mark.slow  # several loads per test


def load(running: RunningSandbox, warehouse: Path) -> LoadResult:
    with pointed_at(running):
        return load_incremental(warehouse, settings=fast())


def formats_loaded(warehouse: Path) -> set[str]:
    """The file formats of the data jobs dlt completed for this warehouse (state aside)."""
    jobs = Warehouse.at(warehouse).pipelines_dir.glob("*/load/loaded/*/completed_jobs/*")
    return {
        job.name.split(".")[-2] if job.name.endswith(".gz") else job.name.split(".")[-1]
        for job in jobs
        if not job.name.startswith("_dlt") and not job.name.endswith(".sql")
    }


def raw_contents(warehouse: Path) -> dict[str, tuple[list[tuple[str, str]], list[tuple[Any, ...]]]]:
    """Every raw table's columns with their types, and its rows sorted; columns that differ
    between any two loads (dlt's ids, the order responses arrived in) aside."""
    contents = {}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        tables = connection.execute(
            "select table_name from information_schema.tables where table_schema = 'raw' "
            "and not starts_with(table_name, '_')"
        ).fetchall()
        for (table,) in tables:
            columns = [
                (str(name), str(kind))
                for name, kind in connection.execute(
                    "select column_name, data_type from information_schema.columns "
                    "where table_schema = 'raw' and table_name = ? order by column_name",
                    [table],
                ).fetchall()
                if not name.startswith("_")  # dlt's ids; `_fetch_seq` follows arrival order
            ]
            listed = ", ".join(f'"{name}"' for name, _ in columns)
            rows = connection.execute(f'select {listed} from raw."{table}"').fetchall()
            contents[table] = (columns, sorted(rows, key=repr))
    return contents


def test_insert_statements_and_parquet_load_the_same_rows_and_types(
    make_sandbox: SandboxFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = make_sandbox(shipments=150, limits_enabled=False)
    by_inserts = tmp_path / "inserts" / "signing.duckdb"
    by_parquet = tmp_path / "parquet" / "signing.duckdb"

    monkeypatch.setattr(_duckdb, "PARQUET_FROM_RECORDS", 10**9)
    assert load(running, by_inserts).exit_code == 0
    monkeypatch.setattr(_duckdb, "PARQUET_FROM_RECORDS", 0)
    assert load(running, by_parquet).exit_code == 0

    assert formats_loaded(by_inserts) == {"insert_values"}
    assert formats_loaded(by_parquet) == {"parquet"}
    assert differences(by_inserts, running.store) == {}
    assert differences(by_parquet, running.store) == {}
    inserted, from_parquet = raw_contents(by_inserts), raw_contents(by_parquet)
    assert inserted.keys() == from_parquet.keys()
    for table, (columns, rows) in inserted.items():
        assert columns == from_parquet[table][0], table
        assert rows == from_parquet[table][1], table


def test_a_run_chooses_its_load_files_by_what_it_fetched(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """At the default threshold a first load (thousands of records) goes as parquet and a
    nightly run with a few changes as INSERT statements; both leave the sandbox's data."""
    running = make_sandbox(shipments=150, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"

    first = load(running, warehouse)
    assert sum(first.stats.rows.values()) >= PARQUET_FROM_RECORDS
    assert formats_loaded(warehouse) == {"parquet"}

    admin(running, "POST", "/advance", {"days": 1})
    nightly = load(running, warehouse)
    assert 0 < sum(nightly.stats.rows.values()) < PARQUET_FROM_RECORDS
    assert formats_loaded(warehouse) == {"parquet", "insert_values"}
    assert differences(warehouse, running.store) == {}


def memory_limit(warehouse: Path) -> str:
    pipeline = make_pipeline(warehouse, "ws_memory")
    with pipeline.sql_client() as client:
        rows = client.execute_sql("select current_setting('memory_limit')")
    assert rows
    return str(rows[0][0])


def test_duckdb_memory_is_limited_by_default_and_the_users_setting_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert memory_limit(tmp_path / "default.duckdb") == "488.2 MiB"  # 512 MB as DuckDB says it
    monkeypatch.setenv("DESTINATION__DUCKDB__CREDENTIALS__GLOBAL_CONFIG", '{"memory_limit": "1GB"}')
    assert memory_limit(tmp_path / "configured.duckdb") == "953.6 MiB"
    # The file is always the named warehouse's (the working copy the pipeline writes and
    # publishes onto it), whatever the configuration says.
    monkeypatch.setenv("DESTINATION__DUCKDB__CREDENTIALS__DATABASE", str(tmp_path / "other.duckdb"))
    named = Warehouse.at(tmp_path / "named.duckdb")
    destination = named.dlt_destination()
    assert destination.config_params["credentials"].database == str(named.working_path)
    assert named.working_path == tmp_path / ".named.work" / "named.duckdb"


@pytest.mark.parametrize("left", ["extracted", "normalized"])
def test_a_run_after_an_interrupted_one_loads_what_it_fetched_then_its_own(
    make_sandbox: SandboxFactory, tmp_path: Path, left: str
) -> None:
    """A run killed between fetching and loading leaves a package in dlt's folder. The next
    run loads it, then fetches and loads what changed since: no full reload, nothing missed."""
    running = make_sandbox(shipments=120, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    first = load(running, warehouse)
    admin(running, "POST", "/advance", {"days": 1})
    with pointed_at(running):
        control = RunControl()
        connection = connect(fast(), control=control)
        workspace_id = connection.workspace_id
        interrupted = make_pipeline(warehouse, workspace_id)
        source = signing_source(connection)
        interrupted.extract(source)  # killed here, or after normalizing
        if left == "normalized":
            interrupted.normalize()
        control.finish()
    assert interrupted.has_pending_data
    assert control.stats.rows  # the interrupted run fetched changes of its own

    admin(running, "POST", "/advance", {"days": 1})
    result = load(running, warehouse)

    assert result.exit_code == 0
    assert any("interrupted run" in warning for warning in result.stats.warnings)
    assert result.stats.rows  # and this run fetched the changes made after it
    assert result.stats.requests < first.stats.requests / 4  # no full reload
    assert differences(warehouse, running.store) == {}
    assert not make_pipeline(warehouse, workspace_id).has_pending_data
