"""A rewrite of the rows already loaded (a new privacy policy, an erasure) on a PostgreSQL
warehouse waits for a model build that another host runs, as load steps do: a build that read
`raw` before the rewrite committed would write the marts and their history from the values the
rewrite took away. Before, neither waited: the new policy or the erasure was committed while
the build held the models' lock.

The build here is the test itself holding the lock every build takes, the models' advisory lock
alone, for as long as it checks; the truth is what the warehouse records meanwhile."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from pipelines.warehouse import DATASET
from pipelines.warehouse._advisory import _halves, models_key
from sandbox import RunningSandbox, SandboxConfig
from tests.support import (
    POSTGRES_LOAD,
    START_MS,
    Background,
    cli_env,
    describe,
    finish,
    run_cli,
    start_cli,
)
from tests.support.postgres import PostgresDatabase, PostgresServer
from tests.support.privacy import KEEP_WITH_KEY, MINIMAL

pytestmark = pytest.mark.slow  # a PostgreSQL server, loads and an erasure

PATIENCE_SECONDS = 120  # for a command to reach the lock; never reached when things work
# A session of ours waiting for the models' lock (the server's view: granted false).
WAITING = (
    "select count(*) from pg_locks where locktype = 'advisory' and not granted "
    "and classid = %s::bigint::oid and objid = %s::bigint::oid"
)


@contextmanager
def a_build_running(database: PostgresDatabase) -> Iterator[Any]:
    """The models' lock held alone, as a model build holds it, on a session of its own; yields
    a cursor of another session, to look with."""
    key = models_key(DATASET)
    with closing(database.connect()) as build, closing(database.connect()) as look:
        build.autocommit = look.autocommit = True
        build.cursor().execute("select pg_advisory_lock(%s)", (key,))
        yield look.cursor()


def wait_until_waiting(cursor: Any, command: Background) -> None:
    """Until `command` waits for the models' lock, or fail if it ends first."""
    halves = _halves(models_key(DATASET))  # as `pg_locks` names the lock
    deadline = time.monotonic() + PATIENCE_SECONDS
    while True:
        cursor.execute(WAITING, halves)
        if cursor.fetchone()[0]:
            return
        if command.poll() is not None:
            _, stderr = command.communicate()
            raise AssertionError(f"it ended while a build held the models' lock:\n{stderr}")
        assert time.monotonic() < deadline, "it never asked for the models' lock"
        time.sleep(0.05)


@pytest.fixture
def loaded(
    postgres_server: PostgresServer, tmp_path: Path
) -> Iterator[tuple[RunningSandbox, PostgresDatabase, dict[str, str]]]:
    """A sandbox, loaded under `keep` into a database of its own."""
    config = SandboxConfig(seed=61, shipments=15, start_ms=START_MS, limits_enabled=False)
    database = postgres_server.create_database()
    with RunningSandbox(config) as running:
        env = {**cli_env(running), "DESTINATION__POSTGRES__CREDENTIALS": database.credentials}
        kept = run_cli(POSTGRES_LOAD, cwd=tmp_path, env={**env, **KEEP_WITH_KEY})
        assert kept.returncode == 0, describe(kept)
        yield running, database, env


def recorded(cursor: Any, query: str) -> list[tuple[Any, ...]]:
    cursor.execute(query)
    return list(cursor.fetchall())


def test_a_new_policy_is_not_written_while_a_build_runs(
    loaded: tuple[RunningSandbox, PostgresDatabase, dict[str, str]], tmp_path: Path
) -> None:
    _, database, env = loaded
    with a_build_running(database) as look:
        switching = start_cli(POSTGRES_LOAD, cwd=tmp_path, env={**env, **MINIMAL})
        wait_until_waiting(look, switching)
        assert recorded(look, "select preset from raw._signing_privacy") == [("keep",)]
    switched = finish(switching, timeout=300)
    assert switched.returncode == 0, describe(switched)
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        assert recorded(cursor, "select preset from raw._signing_privacy") == [("minimal",)]


def test_an_erasure_is_not_written_while_a_build_runs(
    loaded: tuple[RunningSandbox, PostgresDatabase, dict[str, str]], tmp_path: Path
) -> None:
    running, database, env = loaded
    with running.store.lock:
        person = next(iter(running.store.contacts.by_id.values())).email
    forget = ["forget", "--email", person, "--destination", "postgres", "--no-models"]
    with a_build_running(database) as look:
        forgetting = start_cli(forget, cwd=tmp_path, env={**env, **KEEP_WITH_KEY})
        wait_until_waiting(look, forgetting)
        assert erasures(look) == 0
        assert contacts_named(look, person) == 1  # still there
    forgot = finish(forgetting, timeout=300)
    assert forgot.returncode == 0, describe(forgot)
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        assert erasures(cursor) == 1
        assert contacts_named(cursor, person) == 0


def erasures(cursor: Any) -> int:
    """Erasures recorded (none before the table is made, with the first)."""
    cursor.execute("select to_regclass('raw._signing_erasures') is not null")
    if not cursor.fetchone()[0]:
        return 0
    cursor.execute("select count(*) from raw._signing_erasures")
    return int(cursor.fetchone()[0])


def contacts_named(cursor: Any, email: str) -> int:
    cursor.execute("select count(*) from raw.contacts where lower(email) = lower(%s)", (email,))
    return int(cursor.fetchone()[0])
