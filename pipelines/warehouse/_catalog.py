"""What a warehouse's dataset holds, asked the same way of every backend: through a dlt-style
SQL client (`execute_sql` with `%s` parameters, `make_qualified_table_name`, `dataset_name`),
which dlt's own clients and the read-only DuckDB reader all are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class SqlClient(Protocol):
    """The few calls of dlt's SQL client the project reads and writes its own tables with."""

    @property
    def dataset_name(self) -> str: ...

    def make_qualified_table_name(self, table_name: str) -> str: ...

    def execute_sql(self, sql: Any, *args: Any, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class LoadedWorkspace:
    """A workspace loaded into a warehouse (`raw.workspaces`): its id and the service's name."""

    id: str
    name: str | None

    def __str__(self) -> str:
        return f"{self.name} ({self.id})" if self.name else self.id


def columns_by_table(client: SqlClient, schema: str | None = None) -> dict[str, set[str]]:
    """Every table of the client's dataset (or of `schema`) with its column names."""
    rows = client.execute_sql(
        "select table_name, column_name from information_schema.columns where table_schema = %s",
        schema or client.dataset_name,
    )
    tables: dict[str, set[str]] = {}
    for table, column in rows or []:
        tables.setdefault(str(table), set()).add(str(column))
    return tables


def tables_in(client: SqlClient, schema: str) -> set[str]:
    """The tables (and views) of one schema of the client's database."""
    rows = client.execute_sql(
        "select table_name from information_schema.tables where table_schema = %s", schema
    )
    return {str(row[0]) for row in rows or []}


def has_table(client: SqlClient, table: str) -> bool:
    return table in tables_in(client, client.dataset_name)


def loaded_workspaces(client: SqlClient) -> list[LoadedWorkspace]:
    """The workspaces of `raw.workspaces`, one per id, ordered by name then id; none before the
    first load."""
    if not has_table(client, "workspaces"):
        return []
    table = client.make_qualified_table_name("workspaces")
    rows = client.execute_sql(
        f"select id, max(name) from {table} where id is not null group by id order by max(name), id"
    )
    return [LoadedWorkspace(str(id_), name) for id_, name in rows or []]
