"""A run of several workspaces into PostgreSQL finding one of them held by another run (another
host's worker) stops that workspace alone and loads the others, so workers given the same
workspaces share them out; the next run loads the one it passed over."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from pipelines.environment import environment_set
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox, SandboxConfig
from tests.support import (
    POSTGRES_LOAD,
    START_MS,
    advance_every_workspace,
    describe,
    problem_lines,
    run_cli,
    workspaces_env,
)
from tests.support.postgres import PostgresServer
from tests.support.truth import postgres_differences

pytestmark = pytest.mark.slow  # a PostgreSQL server and two CLI loads of two workspaces


def test_a_run_of_several_workspaces_passes_over_one_that_another_run_holds(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    database = postgres_server.create_database()
    credentials = {"DESTINATION__POSTGRES__CREDENTIALS": database.credentials}
    config = SandboxConfig(seed=61, shipments=40, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(2)) as running:
        east, west = (store.workspace.id for store in running.stores)
        env = workspaces_env(running, {"east": running.api_keys[0], "west": running.api_keys[1]})
        env.update(credentials, SIGNING_ETL_LOCK_WAIT_SECONDS="0")
        first = run_cli(POSTGRES_LOAD, cwd=tmp_path, env=env)
        assert first.returncode == 0, describe(first)
        advance_every_workspace(running, hours=24)  # a day of activity in each workspace

        # `east` comes first again (it began first last time), held as another worker's run
        # would hold it.
        held_by_another = Warehouse.at(tmp_path / "other.duckdb", "postgres")
        with environment_set(credentials), held_by_another.workspace_locks([east]):
            passed_over = run_cli(POSTGRES_LOAD, cwd=tmp_path, env=env)

        assert passed_over.returncode == 75, describe(passed_over)  # a stop: tried again later
        assert "Traceback" not in passed_over.stderr, describe(passed_over)
        busy = [line for line in problem_lines(passed_over.stderr) if "another load" in line]
        assert len(busy) == 1, describe(passed_over)
        assert f"workspace {east} of the postgres destination" in busy[0]
        with closing(database.connect()) as connection, connection.cursor() as cursor:
            cursor.execute(
                "select workspace_id, outcome from raw._signing_runs order by started_at"
            )
            runs = cursor.fetchall()
            assert runs[2:] == [(east, "stopped"), (west, "completed")], runs
            assert postgres_differences(connection, running.stores[1], by_workspace=True) == {}
            # East's day of activity waits for the next run.
            assert postgres_differences(connection, running.stores[0], by_workspace=True) != {}

        again = run_cli(POSTGRES_LOAD, cwd=tmp_path, env=env)
        assert again.returncode == 0, describe(again)
        with closing(database.connect()) as connection:
            for store in running.stores:
                assert postgres_differences(connection, store, by_workspace=True) == {}
