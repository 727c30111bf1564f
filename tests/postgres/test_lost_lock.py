"""A run whose workspace lock in PostgreSQL is lost while it runs (its session ended: a server
restart, an operator, a network cut) stops before its next write instead of writing beside the
run that may hold the lock now: our transactions roll back, dlt's load step never starts, the
CLI exits 75 with one line, the run is on record, and the next run loads the workspace whole;
a webhook drain stops alike, its deliveries waiting.
The session is ended for real, by `pg_terminate_backend` from another connection."""

from __future__ import annotations

import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pipelines.environment import environment_set
from pipelines.errors import RunLockLost
from pipelines.load.run import load_incremental
from pipelines.status.read import read_status
from pipelines.warehouse import Warehouse, confirm_run_locks, transaction
from pipelines.warehouse._advisory import workspace_key
from pipelines.webhooks.drain import drain_workspace
from pipelines.webhooks.inbox import Inbox
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import RunControl
from tests.support import (
    FAST,
    START_MS,
    cli_env,
    describe,
    fast,
    finish,
    problem_lines,
    run_cli,
    start_cli,
    wait_for_requests,
)
from tests.support.postgres import PostgresDatabase, PostgresServer
from tests.support.truth import postgres_differences
from tests.webhooks.test_drain import deliveries, entry, new_records

pytestmark = pytest.mark.slow  # a PostgreSQL server, and a CLI load over real HTTP

WORKSPACE = "ws_lost"
# The sessions of ours in this database holding an advisory lock.
LOCK_SESSIONS = (
    "from pg_stat_activity where pid in (select pid from pg_locks where locktype = 'advisory') "
    "and datname = current_database() and application_name like 'signing-etl %%'"
)


def _end_lock_sessions(database: PostgresDatabase) -> int:
    """End every session of ours holding an advisory lock in `database`, as an operator's
    `pg_terminate_backend` (or a server restart) would; how many there were."""
    with closing(database.connect()) as admin, admin.cursor() as cursor:
        # Waits up to 5 s for each session to be gone.
        cursor.execute(f"select pg_terminate_backend(pid, 5000) {LOCK_SESSIONS}")
        ended = [row[0] for row in cursor.fetchall()]
        admin.commit()
    assert all(ended), "a session outlived pg_terminate_backend's wait"
    return len(ended)


def _lock_taken_at(database: PostgresDatabase) -> Any:
    """`pg_stat_activity.query_start` of the session holding our advisory lock: when it took
    it, which `status` and a waiting run show as `since`."""
    with closing(database.connect()) as admin, admin.cursor() as cursor:
        cursor.execute(f"select query_start {LOCK_SESSIONS}")
        (row,) = cursor.fetchall()
        admin.commit()
    return row[0]


def _lock_is_free(database: PostgresDatabase, workspace_id: str) -> bool:
    """Whether another session could take the workspace's run lock now (and lets it go)."""
    key = workspace_key("raw", workspace_id)
    with closing(database.connect()) as other, other.cursor() as cursor:
        cursor.execute("select pg_try_advisory_lock(%s)", (key,))
        row = cursor.fetchone()
        taken = bool(row and row[0])
        if taken:
            cursor.execute("select pg_advisory_unlock(%s)", (key,))
        other.commit()
    return taken


def test_a_write_after_the_lock_was_lost_is_rolled_back_with_one_line(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    database = postgres_server.create_database()
    warehouse = Warehouse.at(tmp_path / "signing.duckdb", "postgres")
    credentials = {"DESTINATION__POSTGRES__CREDENTIALS": database.credentials}
    with environment_set(credentials), warehouse.sql_client() as client:
        client.create_dataset()
        table = client.make_qualified_table_name("lock_fence")
        client.execute_sql(f"create table {table} (written text)")

        def write(value: str) -> None:
            client.execute_sql(f"insert into {table} values (%s)", value)

        with warehouse.workspace_locks([WORKSPACE]):
            assert not _lock_is_free(database, WORKSPACE)
            taken_at = _lock_taken_at(database)
            transaction(client, "a write while held", lambda: write("held"))
            confirm_run_locks()
            # Asked from a session of its own: the holder still shows since when it holds it.
            assert _lock_taken_at(database) == taken_at
            assert _end_lock_sessions(database) == 1
            assert _lock_is_free(database, WORKSPACE)  # another run could load it now
            with pytest.raises(RunLockLost) as lost:
                transaction(client, "a write after the loss", lambda: write("lost"))
            # A run's own record is written all the same.
            transaction(client, "the run's record", lambda: write("record"), fenced=False)
        transaction(client, "a write holding no lock", lambda: write("unlocked"))
        written = client.execute_sql(f"select written from {table} order by written")

    assert sorted(row[0] for row in written) == ["held", "record", "unlocked"]
    message = str(lost.value)
    assert "\n" not in message
    assert f"the run lock of workspace {WORKSPACE} of the postgres destination" in message
    assert lost.value.exit_code == 75


def test_a_load_that_lost_its_lock_writes_no_row_exits_75_and_the_next_run_loads_it_whole(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    database = postgres_server.create_database()
    config = SandboxConfig(seed=53, shipments=150, start_ms=START_MS, limits_enabled=False)
    warehouse = tmp_path / "unused.duckdb"
    args = ["load", "--destination", "postgres", "--duckdb", str(warehouse), "--no-models"]
    with RunningSandbox(config) as running:
        env = cli_env(running)
        env["DESTINATION__POSTGRES__CREDENTIALS"] = database.credentials
        slow = cli_env(running, requests_per_second=40, burst=5)
        slow["DESTINATION__POSTGRES__CREDENTIALS"] = database.credentials
        process = start_cli(args, cwd=tmp_path, env=slow)
        wait_for_requests(running, 80, process)  # fetching, the lock held since /me answered
        assert _end_lock_sessions(database) == 1
        lost = finish(process, timeout=120)

        assert lost.returncode == 75, describe(lost)
        assert "Traceback" not in lost.stderr, describe(lost)
        (line,) = problem_lines(lost.stderr)  # a stop to try again later: a warning
        workspace_id = running.store.workspace.id
        assert f"the run lock of workspace {workspace_id} of the postgres destination" in line
        assert "stopped before the next write" in line
        with closing(database.connect()) as connection, connection.cursor() as cursor:
            cursor.execute(
                "select count(*) from information_schema.tables "
                "where table_schema = 'raw' and table_name in ('documents', 'shipments')"
            )
            assert cursor.fetchone() == (0,), "dlt's load step ran after the lock was lost"
        with environment_set({"DESTINATION__POSTGRES__CREDENTIALS": database.credentials}):
            last = read_status(Warehouse.at(warehouse, "postgres")).last_run
        assert last is not None
        assert last.outcome == "stopped"  # exit 75: tried again later, as a busy lock is
        assert "the run lock of workspace" in (last.stop_reason or "")

        again = run_cli(args, cwd=tmp_path, env=env, timeout=600)
        assert again.returncode == 0, describe(again)
        with closing(database.connect()) as connection:
            assert postgres_differences(connection, running.store) == {}


def test_a_drain_that_lost_its_lock_is_stopped_and_its_deliveries_wait(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receiver's drain goes through the same lock and check as a load: ended the same
    way, it writes no row and is on record as `stopped` (not `failed`), like the load above."""
    database = postgres_server.create_database()
    config = SandboxConfig(seed=59, shipments=40, start_ms=START_MS, limits_enabled=False)
    warehouse = Warehouse.at(tmp_path / "signing.duckdb", "postgres")
    credentials = {"DESTINATION__POSTGRES__CREDENTIALS": database.credentials}
    with RunningSandbox(config) as running, environment_set(credentials):
        assert load_incremental(warehouse, settings=fast(running)).exit_code == 0
        shipment_id, contact_id = new_records(running)
        waiting = deliveries(running, shipment_id, contact_id)
        inbox = Inbox.open(warehouse.webhooks_dir)
        for each in waiting:
            inbox.accept(each)

        # The sandbox holds back its answer for the shipment (the drain holds its lock by then)
        # until the lock's session has been ended.
        asked, ended = threading.Event(), threading.Event()
        find_shipment = running.store.find_shipment

        def answered_after_the_loss(found_id: str) -> Any:
            asked.set()
            ended.wait(60)
            return find_shipment(found_id)

        sessions: list[int] = []
        failures: list[BaseException] = []

        def end_the_lock_once_asked() -> None:
            try:
                if asked.wait(60):
                    sessions.append(_end_lock_sessions(database))
            except BaseException as error:  # shown by the test, not lost in the thread
                failures.append(error)
            finally:
                ended.set()

        monkeypatch.setattr(running.store, "find_shipment", answered_after_the_loss)
        ending = threading.Thread(target=end_the_lock_once_asked)
        ending.start()
        lost = drain_workspace(warehouse, entry(running), inbox, control=RunControl(), pacing=FAST)
        ending.join(60)
        monkeypatch.undo()

        if failures:
            raise failures[0]
        assert sessions == [1], "the drain asked for no shipment while holding its lock"
        assert lost.outcome == "stopped", lost.reason
        workspace_id = running.store.workspace.id
        assert f"the run lock of workspace {workspace_id} of the postgres destination" in (
            lost.reason or ""
        )
        last = inbox.status()["default"].last_drain
        assert last is not None
        assert (last.outcome, last.reason) == ("stopped", lost.reason)  # `webhooks status`
        assert inbox.waiting("default", 100) == waiting
        with closing(database.connect()) as connection, connection.cursor() as cursor:
            cursor.execute("select count(*) from raw.shipments where id = %s", (shipment_id,))
            assert cursor.fetchone() == (0,), "the drain wrote after its lock was lost"

        done = drain_workspace(warehouse, entry(running), inbox, control=RunControl(), pacing=FAST)
        assert done.outcome == "completed", done.reason
        assert inbox.waiting("default", 100) == []
        with closing(database.connect()) as connection:
            assert postgres_differences(connection, running.store) == {}
