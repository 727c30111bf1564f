"""Our own transactions against a real PostgreSQL server's conflicts: one ended by a lock not
available (another session holds the row) is rolled back, run again from its start and logged,
so its effect lands once; a conflict that does not go away is given up after a bounded number of
attempts; any other error is not retried."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from dlt.destinations.exceptions import DatabaseException

from pipelines.environment import environment_set
from pipelines.warehouse import Warehouse, transaction
from pipelines.warehouse import _conflicts as conflicts
from tests.support.postgres import PostgresDatabase, PostgresServer


@pytest.fixture(scope="module")
def database(postgres_server: PostgresServer) -> PostgresDatabase:
    found = postgres_server.create_database()
    with closing(found.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("create schema raw")
        cursor.execute("create table raw.counter (id int primary key, n int)")
        cursor.execute("insert into raw.counter values (1, 0)")
        cursor.execute("create table raw.attempts (n int)")
        connection.commit()
    return found


@pytest.fixture
def client(database: PostgresDatabase, tmp_path: Path) -> Iterator[Any]:
    with (
        environment_set({"DESTINATION__POSTGRES__CREDENTIALS": database.credentials}),
        Warehouse.at(tmp_path / "pg.duckdb", "postgres").sql_client() as found,
    ):
        yield found


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conflicts, "FIRST_PAUSE_SECONDS", 0.01)


def _counter(database: PostgresDatabase) -> int:
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("select n from raw.counter where id = 1")
        (row,) = cursor.fetchall()
        return int(row[0])


def test_a_transaction_ended_by_a_lock_not_available_runs_again_and_lands_once(
    database: PostgresDatabase, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    before = _counter(database)
    other = database.connect()
    try:
        with other.cursor() as cursor:  # another writer holds the row
            cursor.execute("select n from raw.counter where id = 1 for update")
        attempts = []

        def work() -> None:
            attempts.append(1)
            if len(attempts) == 2:
                other.rollback()  # the other writer is done by the time of the retry
            client.execute_sql("insert into raw.attempts values (%s)", len(attempts))
            client.execute_sql("select n from raw.counter where id = 1 for update nowait")
            client.execute_sql("update raw.counter set n = n + 1 where id = 1")

        with caplog.at_level(logging.WARNING, logger="signing_etl"):
            transaction(client, "counting", work)
    finally:
        other.close()
    # The first attempt's insert was rolled back with it: the effect landed once.
    assert len(attempts) == 2
    assert _counter(database) == before + 1
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("select n from raw.attempts")
        assert cursor.fetchall() == [(2,)]
    (line,) = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert line.startswith("counting ended with a lock not available"), line


def test_a_conflict_that_stays_is_given_up_after_the_bound(
    database: PostgresDatabase, client: Any
) -> None:
    before = _counter(database)
    other = database.connect()
    attempts = []

    def work() -> None:
        attempts.append(1)
        client.execute_sql("set local lock_timeout = '50ms'")
        client.execute_sql("update raw.counter set n = n + 1 where id = 1")

    try:
        with other.cursor() as cursor:
            cursor.execute("select n from raw.counter where id = 1 for update")
        with pytest.raises(DatabaseException, match="lock timeout") as raised:
            transaction(client, "counting", work)
    finally:
        other.close()
    assert conflicts.conflict_of(raised.value) == "a lock not available"
    assert len(attempts) == conflicts.ATTEMPTS
    assert _counter(database) == before


def test_another_error_is_not_retried(client: Any) -> None:
    attempts = []

    def work() -> None:
        attempts.append(1)
        client.execute_sql("select * from raw.no_such_table")

    with pytest.raises(DatabaseException, match="no_such_table") as raised:
        transaction(client, "reading", work)
    assert conflicts.conflict_of(raised.value) is None
    assert attempts == [1]
