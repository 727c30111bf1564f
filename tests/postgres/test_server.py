"""The throwaway PostgreSQL server the Postgres tests share; dlt and dbt-postgres against it."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import dlt

from tests.support.postgres import PostgresServer


def test_server_accepts_a_connection_to_a_fresh_database(postgres_server: PostgresServer) -> None:
    database = postgres_server.create_database()
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("select current_database(), current_setting('server_version_num')")
        name, version_num = cursor.fetchone() or (None, "0")
    assert name == database.name
    assert version_num.startswith(postgres_server.version)


def test_dlt_loads_rows_into_the_raw_dataset_and_they_read_back(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    database = postgres_server.create_database()
    rows = [{"id": 1, "name": "first"}, {"id": 2, "name": "second"}]
    pipeline = dlt.pipeline(
        pipeline_name="postgres_smoke",
        pipelines_dir=str(tmp_path),
        destination=dlt.destinations.postgres(database.credentials),
        dataset_name="raw",
    )
    pipeline.run(rows, table_name="things")
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("select id, name from raw.things order by id")
        assert cursor.fetchall() == [(1, "first"), (2, "second")]


def test_dbt_postgres_adapter_is_installed() -> None:
    from dbt.adapters.postgres import Plugin

    assert Plugin.adapter.type() == "postgres"
