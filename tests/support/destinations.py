"""One warehouse under test on either backend the project proves end to end: a DuckDB file, or
a database of the test session's PostgreSQL server. Tests written against it run the same on
both (the `each_destination` fixture gives one of each)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.environment import environment_set
from pipelines.warehouse import Warehouse

from .postgres import PostgresDatabase, PostgresServer
from .truth import Rows, actual, actual_in_postgres

DESTINATIONS = ("duckdb", "postgres")


@dataclass(frozen=True)
class WarehouseUnderTest:
    """A DuckDB file at `path`, or the Postgres `database` (then only dlt's and dbt's working
    folders live beside `path`)."""

    path: Path
    database: PostgresDatabase | None = None

    @property
    def destination(self) -> str:
        return "duckdb" if self.database is None else "postgres"

    @property
    def warehouse(self) -> Warehouse:
        return Warehouse.at(self.path, self.destination)

    @property
    def env(self) -> dict[str, str]:
        """What the pipeline needs in its environment to reach it (dlt's documented names)."""
        if self.database is None:
            return {}
        return {"DESTINATION__POSTGRES__CREDENTIALS": self.database.credentials}

    def cli_args(self) -> list[str]:
        """The `signing-etl` options that name it."""
        chosen = ["--duckdb", str(self.path)]
        return chosen if self.database is None else [*chosen, "--destination", "postgres"]

    @contextmanager
    def configured(self) -> Iterator[Warehouse]:
        """The warehouse, with the environment a library call needs to reach it."""
        with environment_set(self.env):
            yield self.warehouse

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """The rows of one read-only query (`?` placeholders on both backends)."""
        if self.database is None:
            with duckdb.connect(str(self.path), read_only=True) as local:
                return local.execute(sql, list(params)).fetchall()
        with closing(self.database.connect()) as remote, remote.cursor() as cursor:
            cursor.execute(sql.replace("?", "%s"), params)
            rows = [tuple(row) for row in cursor.fetchall()]
            remote.rollback()
            return rows

    def actual(
        self, workspace_id: str | None = None, *, deleted: bool | None = None
    ) -> dict[str, Rows]:
        """`truth.actual` of this warehouse: its raw rows in the sandbox's form."""
        if self.database is None:
            return actual(self.path, workspace_id, deleted=deleted)
        with closing(self.database.connect()) as connection:
            return actual_in_postgres(connection, workspace_id, deleted=deleted)


def warehouse_under_test(
    destination: str, folder: Path, request: pytest.FixtureRequest
) -> WarehouseUnderTest:
    """An empty warehouse in `folder` on `destination`: a DuckDB file, or a new database of the
    session's PostgreSQL server (the `postgres_server` fixture, started only when asked for)."""
    if destination == "duckdb":
        return WarehouseUnderTest(folder / "signing.duckdb")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return WarehouseUnderTest(folder / "postgres" / "signing.duckdb", server.create_database())
