"""The local DuckDB copy of a PostgreSQL warehouse's marts (what the report's notebook reads)
keeps each column's type, also for a column that holds no value at all: a timestamp column of
nulls stays a timestamp that DuckDB's functions take."""

from __future__ import annotations

import os
from contextlib import closing
from pathlib import Path

import duckdb

from pipelines.warehouse import Warehouse
from tests.support.postgres import PostgresServer


def test_an_all_null_column_keeps_its_type_in_the_local_copy(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    database = postgres_server.create_database()
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("create schema marts")
        cursor.execute(
            "create table marts.fct_example (id varchar, done_at timestamptz, hours double "
            "precision, n bigint, note varchar)"
        )
        cursor.execute("insert into marts.fct_example values ('a', null, null, null, null)")
        cursor.execute("insert into marts.fct_example values ('b', null, 1.5, null, 'x')")
        connection.commit()
    os.environ["DESTINATION__POSTGRES__CREDENTIALS"] = database.credentials
    try:
        copy = Warehouse.at(tmp_path / "pg.duckdb", "postgres").copy_into(
            tmp_path / "copy.duckdb", [("marts", "fct_example")]
        )
    finally:
        del os.environ["DESTINATION__POSTGRES__CREDENTIALS"]
    with duckdb.connect(str(copy), read_only=True) as local:
        kinds = dict(
            local.execute(
                "select column_name, data_type from information_schema.columns "
                "where table_name = 'fct_example'"
            ).fetchall()
        )
        assert kinds["done_at"] == "TIMESTAMP WITH TIME ZONE"
        assert kinds["n"] == "BIGINT"
        assert kinds["hours"] == "DOUBLE"
        rows = local.execute(
            "select id, epoch(done_at), hours from marts.fct_example order by id"
        ).fetchall()
    assert rows == [("a", None, None), ("b", None, 1.5)]
