"""The CLI against a real PostgreSQL server: two workspaces loading side by side with the models
built there, then `status`, `sql` and `report` reading the same warehouse; the marts equal the
sandbox's own numbers and what the same loads build in DuckDB, again after activity. All over
real HTTP and real SQL."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pandas  # type: ignore[import-untyped]
import pytest

from pipelines.load.run import load_incremental
from pipelines.modeling.build import build_models
from pipelines.report.notebook import snapshot_marts
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox, SandboxConfig
from tests.models.test_marts import assert_marts_match
from tests.models.workspaces import workspace_marts
from tests.support import (
    MARTS,
    START_MS,
    advance_every_workspace,
    describe,
    differences,
    error_lines,
    fast,
    run_cli,
    workspaces_env,
)
from tests.support.postgres import PostgresDatabase, PostgresServer

pytestmark = pytest.mark.slow  # CLI loads and builds on a PostgreSQL server


@pytest.fixture(scope="module")
def loaded(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningSandbox, PostgresDatabase, dict[str, str], Path, Any]]:
    """Two colliding workspaces loaded into one Postgres database by one `load --parallel 2`."""
    database = postgres_server.create_database()
    config = SandboxConfig(seed=41, shipments=120, start_ms=START_MS, limits_enabled=False)
    folder = tmp_path_factory.mktemp("postgres_cli")
    with RunningSandbox(*config.workspaces(2)) as running:
        env = workspaces_env(running, {"east": running.api_keys[0], "west": running.api_keys[1]})
        env["DESTINATION__POSTGRES__CREDENTIALS"] = database.credentials
        args = ["load", "--destination", "postgres", "--parallel", "2"]
        result = run_cli([*args, "--duckdb", str(folder / "unused.duckdb")], cwd=folder, env=env)
        yield running, database, env, folder, result


def _raw_snapshot(database: PostgresDatabase, into: Path) -> Path:
    """The raw tables of the Postgres warehouse, copied as they are into a DuckDB file, so that
    the same comparison with the sandbox (`tests.support.differences`) reads them."""
    tables = [name for (name,) in _query(database, RAW_TABLES_QUERY)]
    with closing(database.connect()) as source, duckdb.connect(str(into)) as target:
        target.execute("create schema raw")
        for table in tables:
            with source.cursor() as cursor:
                cursor.execute(f'select * from raw."{table}"')
                names = [column[0] for column in cursor.description or []]
                frame = pandas.DataFrame.from_records(cursor.fetchall(), columns=names)
            target.register("copied", frame)
            target.execute(f'create table raw."{table}" as select * from copied')
            target.unregister("copied")
    return into


RAW_TABLES_QUERY = (
    "select table_name from information_schema.tables where table_schema = 'raw' "
    "and table_name not like '\\_%'"
)


def _duckdb_twin(running: RunningSandbox, warehouse: Path) -> None:
    """The same workspaces loaded into DuckDB by the same code, models built."""
    for key in running.api_keys:
        loaded = load_incremental(warehouse, settings=fast(running, key))
        assert loaded.exit_code == 0, loaded.stopped
    built = build_models(warehouse)
    assert built.success, built.summary


def _marts_rows(warehouse: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every mart's rows in one comparable form: floats to 6 places, times in UTC."""

    def plain(value: Any) -> Any:
        if isinstance(value, float | Decimal):
            return round(float(value), 6)
        if isinstance(value, datetime):
            return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
        return value

    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return {
            mart: sorted(
                (
                    tuple(plain(v) for v in row)
                    for row in connection.execute(f"select * from marts.{mart}").fetchall()
                ),
                key=str,
            )
            for mart in MARTS
        }


def _check_marts(
    running: RunningSandbox, database: PostgresDatabase, twin: Path, folder: Path
) -> None:
    """Postgres's marts, per workspace, equal the sandbox; all of them equal DuckDB's."""
    os.environ["DESTINATION__POSTGRES__CREDENTIALS"] = database.credentials
    try:
        snapshot = snapshot_marts(
            Warehouse.at(folder / "postgres.duckdb", "postgres"), folder / "postgres_marts.duckdb"
        )
    finally:
        del os.environ["DESTINATION__POSTGRES__CREDENTIALS"]
    for store in running.stores:
        own = workspace_marts(snapshot, store.workspace.id, folder / "own.duckdb")
        assert_marts_match(own, store)
    on_postgres, on_duckdb = _marts_rows(snapshot), _marts_rows(twin)
    for mart in MARTS:
        assert len(on_postgres[mart]) == len(on_duckdb[mart]), mart
        assert on_postgres[mart] == on_duckdb[mart], mart
    snapshot.unlink()


def _query(database: PostgresDatabase, sql: str) -> list[tuple[Any, ...]]:
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute(sql)
        return [tuple(row) for row in cursor.fetchall()]


def test_two_workspaces_load_into_postgres_at_the_same_time(
    loaded: tuple[RunningSandbox, PostgresDatabase, dict[str, str], Path, Any],
) -> None:
    running, database, _, folder, result = loaded
    assert result.returncode == 0, describe(result)
    assert "Workspaces: east completed, west completed" in result.stderr, describe(result)
    # Side by side: each run started before the other finished.
    runs = _query(database, "select started_at, finished_at from raw._signing_runs")
    assert len(runs) == 2
    assert max(start for start, _ in runs) < min(end for _, end in runs)
    counts = dict(_query(database, "select workspace_id, count(*) from raw.shipments group by 1"))
    assert counts == {s.workspace.id: len(s.shipments.by_id) for s in running.stores}
    raw = _raw_snapshot(database, folder / "postgres_raw.duckdb")
    for store in running.stores:
        assert differences(raw, store, by_workspace=True) == {}, store.workspace.id
    # Nothing of a DuckDB warehouse was made for a Postgres load.
    assert not (folder / "unused.duckdb").exists()


def test_status_and_sql_read_the_postgres_warehouse(
    loaded: tuple[RunningSandbox, PostgresDatabase, dict[str, str], Path, Any],
) -> None:
    running, _, env, folder, _ = loaded
    shown = run_cli(["status", "--destination", "postgres"], cwd=folder, env=env)
    assert shown.returncode == 0, describe(shown)
    for store, name in zip(running.stores, ("east", "west"), strict=True):
        assert any(
            name in line and store.workspace.id in line for line in shown.stdout.splitlines()
        ), shown.stdout

    query = "select workspace_id, count(*) as n from raw.shipments group by 1 order by 1"
    asked = run_cli(
        ["sql", "--destination", "postgres", "--format", "csv", query], cwd=folder, env=env
    )
    assert asked.returncode == 0, describe(asked)
    expected = sorted((s.workspace.id, len(s.shipments.by_id)) for s in running.stores)
    assert asked.stdout.splitlines() == ["workspace_id,n", *(f"{w},{n}" for w, n in expected)]

    shown = run_cli(["report", "--destination", "postgres", "--out", "r"], cwd=folder, env=env)
    assert shown.returncode == 0, describe(shown)
    html = Path(shown.stdout.strip()).read_text(encoding="utf-8")
    for store in running.stores:
        assert store.workspace.id in html

    refused = run_cli(
        ["sql", "--destination", "postgres", "delete from raw.shipments"], cwd=folder, env=env
    )
    assert refused.returncode == 1, describe(refused)
    (line,) = error_lines(refused.stderr)
    assert "read-only" in line


def test_sql_on_postgres_runs_one_read_only_statement_that_the_text_cannot_end(
    loaded: tuple[RunningSandbox, PostgresDatabase, dict[str, str], Path, Any],
) -> None:
    """The text of `sql` can neither end the read-only transaction it runs in nor run a second
    statement: every table keeps its rows."""
    _, database, env, folder, _ = loaded
    counts = "select count(*) from raw.contacts__group_ids"
    before = _query(database, counts)
    assert before[0][0] > 0
    # A program the server would run (as its own user, which may write in the temp folder).
    ran = Path(tempfile.gettempdir()) / f"signing-etl-ran-{uuid.uuid4().hex}"
    for hostile in (
        "begin read write; delete from raw.contacts__group_ids; commit; select 1",
        "commit; delete from raw.contacts__group_ids",
        "select 1; set session characteristics as transaction read write",
        "delete from raw.contacts__group_ids",
        "create table raw.planted as select 1 as x",
        "with gone as (delete from raw.contacts__group_ids returning 1) select count(*) from gone",
        f"copy (select 1) to program 'touch {ran}'",
        "do $$ begin perform pg_sleep(0); end $$",
    ):
        refused = run_cli(["sql", "--destination", "postgres", hostile], cwd=folder, env=env)
        assert refused.returncode == 1, describe(refused)
        (line,) = error_lines(refused.stderr)
        assert "one read-only statement" in line, describe(refused)
        assert _query(database, counts) == before, hostile
    assert not ran.exists()
    planted = "select count(*) from information_schema.tables where table_name = 'planted'"
    assert _query(database, planted) == [(0,)]
    # A query still ends as a user writes one: with a semicolon, or a comment on its last line.
    for query in (f"{counts};\n", f"{counts} -- contacts' groups"):
        asked = run_cli(
            ["sql", "--destination", "postgres", "--format", "csv", query], cwd=folder, env=env
        )
        assert asked.returncode == 0, describe(asked)
        assert asked.stdout.splitlines() == ["count", str(before[0][0])], describe(asked)


def test_marts_built_on_postgres_equal_the_sandbox_and_duckdb_also_after_activity(
    loaded: tuple[RunningSandbox, PostgresDatabase, dict[str, str], Path, Any],
) -> None:
    running, database, env, folder, result = loaded
    assert result.returncode == 0, describe(result)
    assert "models:" in result.stderr or "Building the models" in result.stderr
    # Named as most of the suite's warehouses are: dbt's parse of the project is keyed on the
    # DuckDB file's name alone, so a test process that built one before reuses its parse.
    twin = folder / "twin" / "signing.duckdb"
    twin.parent.mkdir()
    _duckdb_twin(running, twin)
    _check_marts(running, database, twin, folder)

    advance_every_workspace(running, hours=12)
    again = run_cli(["load", "--destination", "postgres"], cwd=folder, env=env)
    assert again.returncode == 0, describe(again)
    raw = _raw_snapshot(database, folder / "postgres_raw_again.duckdb")
    for store in running.stores:
        assert differences(raw, store, by_workspace=True) == {}, store.workspace.id
    _duckdb_twin(running, twin)
    _check_marts(running, database, twin, folder)


def test_the_report_on_postgres_takes_columns_that_hold_no_value_at_all(
    loaded: tuple[RunningSandbox, PostgresDatabase, dict[str, str], Path, Any],
) -> None:
    """Marts whose timestamp, number and text columns are all null (a warehouse where nothing
    was completed, expired or revoked yet, nor any company named) still make the report: the
    notebook's `epoch(...)` takes them. Last in this module: it empties columns of the marts."""
    running, database, env, folder, _ = loaded
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute(
            "update marts.fct_shipments set completed_at = null, expired_at = null, "
            "revoked_at = null, hours_to_completion = null, document_name = null"
        )
        cursor.execute("update marts.fct_recipients set signed_at = null, recipient_company = null")
        connection.commit()
    shown = run_cli(["report", "--destination", "postgres", "--out", "n"], cwd=folder, env=env)
    assert shown.returncode == 0, describe(shown)
    html = Path(shown.stdout.strip()).read_text(encoding="utf-8")
    for store in running.stores:
        assert store.workspace.id in html
