"""Which database failures a retry may cure, met on a real PostgreSQL server: a lock not granted
in time and a serialization failure between two writers are transient, however they are
wrapped; a statement that is wrong stays wrong, and is not."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing

import psycopg2
import pytest
from dlt.destinations.exceptions import DatabaseTransientException
from psycopg2.extensions import ISOLATION_LEVEL_SERIALIZABLE, connection

from pipelines.errors import is_transient
from tests.support.postgres import PostgresDatabase, PostgresServer


@pytest.fixture
def database(postgres_server: PostgresServer) -> PostgresDatabase:
    """A new database with one table `t` of one row."""
    made = postgres_server.create_database()
    with closing(made.connect()) as setup, setup.cursor() as cursor:
        cursor.execute("create table t (id integer)")
        cursor.execute("insert into t values (1)")
        setup.commit()
    return made


def raised(statement: Callable[[], object]) -> psycopg2.Error:
    with pytest.raises(psycopg2.Error) as caught:
        statement()
    return caught.value


def test_a_lock_not_granted_in_time_is_transient(database: PostgresDatabase) -> None:
    with closing(database.connect()) as holder, closing(database.connect()) as waiter:
        holder.cursor().execute("lock table t in access exclusive mode")
        cursor = waiter.cursor()
        cursor.execute("set lock_timeout = '50ms'")
        error = raised(lambda: cursor.execute("select * from t"))
        holder.rollback()
    assert error.pgcode == "55P03"
    assert is_transient(error)
    # As dlt's SQL client wraps it, and as a caller chains it again.
    wrapped = DatabaseTransientException(error)
    outer = RuntimeError("the load step failed")
    outer.__cause__ = wrapped
    assert is_transient(outer)


def _serializable(database: PostgresDatabase) -> connection:
    opened = database.connect()
    opened.set_isolation_level(ISOLATION_LEVEL_SERIALIZABLE)
    return opened


def test_two_writers_in_a_serialization_conflict_are_transient(
    database: PostgresDatabase,
) -> None:
    """Write skew: each reads the table, then each inserts what the other read would have
    seen; the second to commit is refused (SQLSTATE 40001)."""
    with closing(_serializable(database)) as one, closing(_serializable(database)) as two:
        first, second = one.cursor(), two.cursor()
        first.execute("select count(*) from t")
        second.execute("select count(*) from t")
        first.execute("insert into t values (2)")
        second.execute("insert into t values (3)")
        one.commit()
        error = raised(two.commit)
    assert error.pgcode == "40001"
    assert is_transient(error)


def test_a_wrong_statement_is_not_transient(database: PostgresDatabase) -> None:
    with closing(database.connect()) as session, session.cursor() as cursor:
        wrong_column = raised(lambda: cursor.execute("select missing from t"))
        session.rollback()
        division = raised(lambda: cursor.execute("select 1 / 0"))
        session.rollback()
    assert (wrong_column.pgcode, division.pgcode) == ("42703", "22012")
    assert not is_transient(wrong_column)
    assert not is_transient(division)
    assert not is_transient(DatabaseTransientException(wrong_column))  # dlt's name is no proof
