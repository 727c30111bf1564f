"""Two sessions making the same table at the same moment on a real PostgreSQL server: the
second `create table if not exists` fails on the catalog's unique index (as dlt's load steps
of two workers did, making the shared raw tables). `retried` knows that failure for a race and
runs the work again, which then finds the table made."""

from __future__ import annotations

import threading
import time
from contextlib import closing

import pytest
from psycopg2 import errors

from pipelines.warehouse import retried
from pipelines.warehouse._conflicts import conflict_of
from tests.support.postgres import PostgresDatabase, PostgresServer

CREATE = "create table if not exists raced (id integer)"


def test_a_table_made_at_once_by_another_session_is_a_race_that_a_retry_gets_past(
    postgres_server: PostgresServer,
) -> None:
    database = postgres_server.create_database()
    with closing(database.connect()) as first, closing(database.connect()) as second:
        first.autocommit = False
        second.autocommit = True
        first.cursor().execute(CREATE)  # made, not yet committed
        failed: list[BaseException] = []
        attempts: list[int] = []

        def make_it() -> None:
            attempts.append(1)
            second.cursor().execute(CREATE)  # waits for the first session's transaction

        def raced() -> None:
            try:
                make_it()
            except Exception as error:
                failed.append(error)

        waiting = threading.Thread(target=raced)
        waiting.start()
        blocked_on_the_first(database, second.get_backend_pid())
        first.commit()
        waiting.join(timeout=60)
        assert not waiting.is_alive()
        if not failed:
            pytest.fail("the second session did not meet the first one's table (it ran after)")
        (error,) = failed
        assert isinstance(error, errors.UniqueViolation | errors.DuplicateTable), error
        assert conflict_of(error) is not None

        # The step that lost the race, run again: `retried` runs it a second time.
        attempts.clear()

        def loses_once() -> None:
            attempts.append(1)
            if len(attempts) == 1:
                raise error
            second.cursor().execute(CREATE)

        retried("making the table", loses_once)
        assert attempts == [1, 1]


def blocked_on_the_first(database: PostgresDatabase, pid: int) -> None:
    """Wait until the session `pid` waits for a lock (the first session's new table)."""
    with closing(database.connect()) as watcher:
        watcher.autocommit = True
        for _ in range(600):
            with watcher.cursor() as cursor:
                cursor.execute(
                    "select count(*) from pg_stat_activity where pid = %s "
                    "and wait_event_type = 'Lock'",
                    (pid,),
                )
                (waiting,) = cursor.fetchone() or (0,)
                if waiting:
                    return
            time.sleep(0.1)
    pytest.fail("the second session never waited for the first one's table")
