"""Workers that share nothing but a PostgreSQL database and the service, as hosts of a team's
scheduler would: each `signing-etl load` runs in a folder of its own with a state folder of its
own. One workspace is loaded by one run at a time (the second waits, or stops with exit 75
naming the holder); two workspaces load side by side, round after round, without losing a
merge; and a worker with an empty folder continues incrementally from the database."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipelines.warehouse import staging_dataset
from sandbox import RunningSandbox, SandboxConfig
from tests.support import (
    POSTGRES_LOAD,
    START_MS,
    Background,
    advance_every_workspace,
    cli_env,
    describe,
    finish,
    problem_lines,
    run_cli,
    served,
    start_cli,
)
from tests.support.postgres import PostgresDatabase, PostgresServer
from tests.support.sandboxes import holding, new_key, wait_until_held
from tests.support.truth import postgres_differences
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # several first loads and rounds of side-by-side loads

SHIPMENTS = 120
KEYED = {  # top-level tables and their keys: a key twice is a duplicate
    "shipments": "workspace_id, id",
    "documents": "workspace_id, id",
    "contacts": "workspace_id, id",
    "audit_events": "workspace_id, id",
    "shipment_fields": "workspace_id, shipment_id, recipient_id, field_id",
}


@dataclass
class Team:
    running: RunningSandbox
    database: PostgresDatabase
    base: Path
    workers: int = 0

    def worker(self, key: str, **settings: str) -> tuple[Path, dict[str, str]]:
        """A new worker: an empty folder and state folder of its own, the database's
        credentials and one workspace's key."""
        self.workers += 1
        folder = self.base / f"worker{self.workers}"
        folder.mkdir()
        env = {
            **cli_env(self.running, key=key),
            "DESTINATION__POSTGRES__CREDENTIALS": self.database.credentials,
            "XDG_STATE_HOME": str(folder / "state"),
            "DLT_DATA_DIR": str(folder / "dlt"),
            **settings,
        }
        return folder, env

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with closing(self.database.connect()) as connection, connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [tuple(row) for row in cursor.fetchall()]

    def assert_equals_the_sandbox(self, loaded: int = 2) -> None:
        """Each of the first `loaded` workspaces' raw rows equal the sandbox's, and no key is
        there twice."""
        with closing(self.database.connect()) as connection:
            for store in self.running.stores[:loaded]:
                found = postgres_differences(connection, store, by_workspace=True)
                assert found == {}, store.workspace.id
        for table, key in KEYED.items():
            twice = self.query(
                f"select count(*) from (select {key} from raw.{table} group by {key} "
                "having count(*) > 1) as d"
            )
            assert twice == [(0,)], table

    def wait_for_a_queued_lock(self, process: Background) -> None:
        """Block until a session of the database waits for an advisory lock (a run queued
        behind another's), while `process` is alive."""

        def queued() -> bool:
            waiting = self.query(
                "select count(*) from pg_locks where locktype = 'advisory' and not granted"
            )
            if waiting != [(0,)]:
                return True
            assert process.poll() is None, describe(finish(process))
            return False

        wait_until(queued, 120, "a run queued for the lock")

    def advance(self, hours: int) -> None:
        advance_every_workspace(self.running, hours=hours)


@pytest.fixture(scope="module")
def team(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Team]:
    config = SandboxConfig(seed=53, shipments=SHIPMENTS, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(2)) as running:
        yield Team(running, postgres_server.create_database(), tmp_path_factory.mktemp("team"))


def test_one_workspace_is_loaded_by_one_worker_at_a_time(team: Team) -> None:
    """While one worker loads a workspace, a second that will not wait stops with exit 75
    naming the holder (pid, since, host), and a third waits for it and then continues; the
    workspace equals the sandbox with no row twice."""
    key = team.running.api_keys[0]
    workspace_id = team.running.stores[0].workspace.id
    # The first worker, with a key of its own, holds the lock while the sandbox holds its
    # 21st request; the other two are answered meanwhile.
    first_key = new_key(team.running)
    with holding(team.running, workspace_id, after=20, key=first_key):
        folder, env = team.worker(first_key)
        first = start_cli(POSTGRES_LOAD, cwd=folder, env=env)
        wait_until_held(team.running, workspace_id, lambda: first.poll() is None)
        folder, env = team.worker(key, SIGNING_ETL_LOCK_WAIT_SECONDS="0")
        impatient = start_cli(POSTGRES_LOAD, cwd=folder, env=env)
        folder, env = team.worker(key)
        patient = start_cli(POSTGRES_LOAD, cwd=folder, env=env)
        stopped = finish(impatient, 300)
        team.wait_for_a_queued_lock(patient)
    waited, loaded = finish(patient, 300), finish(first, 300)

    assert loaded.returncode == 0, describe(loaded)
    assert stopped.returncode == 75, describe(stopped)
    (line,) = [x for x in problem_lines(stopped.stderr) if "another load is running" in x]
    assert f"workspace {workspace_id} of the postgres destination" in line, line
    assert f"(pid {first.pid} since " in line, line
    assert f" on {socket.gethostname()})" in line, line
    assert waited.returncode == 0, describe(waited)
    runs = team.query(
        "select outcome, finished_at from raw._signing_runs where workspace_id = %s "
        "order by finished_at",
        workspace_id,
    )
    # The busy worker is on record in the database (no local journal is read by others).
    assert [outcome for outcome, _ in runs] == ["stopped", "completed", "completed"]
    team.assert_equals_the_sandbox(loaded=1)
    # The busy stop ended before the runs that loaded: the workspace is healthy.
    folder, env = team.worker(key)
    check = run_cli(["status", "--destination", "postgres", "--check"], cwd=folder, env=env)
    assert check.returncode == 0, describe(check)


def test_two_workspaces_load_side_by_side_round_after_round(team: Team) -> None:
    """Two workers, one workspace each, start together three times (the service changing in
    between): both end with 0 each time, and no merge is lost or doubled, since each merges
    through a staging dataset of its own."""
    for round_ in range(3):
        if round_:
            team.advance(hours=6)
        started = []
        for key in team.running.api_keys:
            folder, env = team.worker(key)
            started.append(start_cli(POSTGRES_LOAD, cwd=folder, env=env))
        for process in started:
            done = finish(process, 400)
            assert done.returncode == 0, f"round {round_}: {describe(done)}"
        team.assert_equals_the_sandbox()
    schemas = {
        name
        for (name,) in team.query(
            "select schema_name from information_schema.schemata where schema_name like 'raw%%'"
        )
    }
    own = {staging_dataset("raw", store.workspace.id) for store in team.running.stores}
    assert own <= schemas, schemas
    assert "raw_staging" not in schemas


def test_a_worker_with_an_empty_folder_continues_from_the_database(team: Team) -> None:
    """After the service changed, a worker that never ran before (empty folder, state folder
    and dlt folder) loads only what changed: the state comes from the database."""
    team.advance(hours=1)
    key, store = team.running.api_keys[1], team.running.stores[1]
    folder, env = team.worker(key)
    before = served(team.running)
    done = run_cli(POSTGRES_LOAD, cwd=folder, env=env, timeout=400)
    requests = served(team.running) - before
    assert done.returncode == 0, describe(done)
    # A first load reads every shipment's audit trail and fields: two requests a shipment.
    assert requests < len(store.shipments.by_id) / 2, requests
    team.assert_equals_the_sandbox()
