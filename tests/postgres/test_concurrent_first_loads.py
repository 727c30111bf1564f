"""Several workspaces loading side by side into a fresh PostgreSQL database, where every one of
them finds the shared schemas missing at once: each creates them or waits for the one that does,
none fails, every run is recorded, and each workspace equals the sandbox."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from sandbox import RunningSandbox, SandboxConfig
from tests.support import START_MS, describe, run_cli, workspaces_env
from tests.support.postgres import PostgresDatabase, PostgresServer

pytestmark = pytest.mark.slow  # side-by-side first loads on a PostgreSQL server

WORKSPACES = 6


def _query(database: PostgresDatabase, sql: str) -> list[tuple[Any, ...]]:
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute(sql)
        return [tuple(row) for row in cursor.fetchall()]


def test_six_first_loads_side_by_side_create_the_shared_schemas_once(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """`load --parallel 4` of six workspaces on a fresh database: the first four all reach the
    creation of `raw`, `raw_staging` and the project's own tables at the same moment."""
    database = postgres_server.create_database()
    config = SandboxConfig(seed=43, shipments=15, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(WORKSPACES)) as running:
        names = [f"w{n}" for n in range(WORKSPACES)]
        env = workspaces_env(running, dict(zip(names, running.api_keys, strict=True)))
        env["DESTINATION__POSTGRES__CREDENTIALS"] = database.credentials
        args = ["load", "--destination", "postgres", "--parallel", "4", "--no-models"]
        result = run_cli(
            [*args, "--duckdb", str(tmp_path / "unused.duckdb")], cwd=tmp_path, env=env
        )
        assert result.returncode == 0, describe(result)
        assert "Traceback" not in result.stderr, describe(result)
        runs = _query(database, "select workspace_name, outcome from raw._signing_runs")
        assert sorted(runs) == [(name, "completed") for name in names]
        counts = dict(
            _query(database, "select workspace_id, count(*) from raw.shipments group by 1")
        )
        assert counts == {s.workspace.id: len(s.shipments.by_id) for s in running.stores}
        shown = run_cli(["status", "--destination", "postgres"], cwd=tmp_path, env=env)
        assert shown.returncode == 0, describe(shown)
        for store in running.stores:
            assert store.workspace.id in shown.stdout, shown.stdout


def test_a_database_error_before_the_pipeline_is_one_line_and_a_recorded_run(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A table of ours the database will not write (here a privacy record whose column takes
    no text) fails each workspace's run with one line, records it, and lets the next load."""
    database = postgres_server.create_database()
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("create schema raw")
        cursor.execute("create table raw._signing_privacy (workspace_id varchar, preset integer)")
        connection.commit()
    config = SandboxConfig(seed=44, shipments=10, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(2)) as running:
        env = workspaces_env(running, {"a": running.api_keys[0], "b": running.api_keys[1]})
        env["DESTINATION__POSTGRES__CREDENTIALS"] = database.credentials
        args = ["load", "--destination", "postgres", "--parallel", "2", "--no-models"]
        result = run_cli(
            [*args, "--duckdb", str(tmp_path / "unused.duckdb")], cwd=tmp_path, env=env
        )
    assert result.returncode == 1, describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    runs = _query(database, "select workspace_name, outcome, stop_reason from raw._signing_runs")
    assert sorted((name, outcome) for name, outcome, _ in runs) == [
        ("a", "failed"),
        ("b", "failed"),
    ]
    for _, _, reason in runs:
        assert "\n" not in reason
        assert "column" in reason, reason  # the database's own words, in one line
