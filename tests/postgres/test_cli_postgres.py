"""The CLI against a real PostgreSQL server: two workspaces loading side by side, then
`status`, `sql` and `report` reading the same warehouse, all over real HTTP and real SQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from sandbox import RunningSandbox, SandboxConfig
from tests.support import FAST, START_MS, cli_env, describe, error_lines, run_cli
from tests.support.postgres import PostgresDatabase, PostgresServer


@pytest.fixture(scope="module")
def loaded(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningSandbox, PostgresDatabase, dict[str, str], Path, Any]]:
    """Two colliding workspaces loaded into one Postgres database by one `load --parallel 2`."""
    database = postgres_server.create_database()
    config = SandboxConfig(seed=41, shipments=120, start_ms=START_MS, limits_enabled=False)
    folder = tmp_path_factory.mktemp("postgres_cli")
    with RunningSandbox(*config.workspaces(2)) as running:
        env = {
            **cli_env(None),
            "SOURCES__SIGNING__BASE_URL": running.base_url,
            "SOURCES__SIGNING__WORKSPACES__EAST__API_KEY": running.api_keys[0],
            "SOURCES__SIGNING__WORKSPACES__WEST__API_KEY": running.api_keys[1],
            "SOURCES__SIGNING__REQUESTS_PER_SECOND": str(FAST["requests_per_second"]),
            "SOURCES__SIGNING__BURST": str(FAST["burst"]),
            "DESTINATION__POSTGRES__CREDENTIALS": database.credentials,
        }
        args = ["load", "--destination", "postgres", "--parallel", "2", "--no-models"]
        result = run_cli([*args, "--duckdb", str(folder / "unused.duckdb")], cwd=folder, env=env)
        yield running, database, env, folder, result


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

    refused = run_cli(
        ["sql", "--destination", "postgres", "delete from raw.shipments"], cwd=folder, env=env
    )
    assert refused.returncode == 1, describe(refused)
    (line,) = error_lines(refused.stderr)
    assert "read-only" in line
