"""Creating the warehouse's shared schemas and the project's own tables, safely when several runs
(threads of one process, processes, hosts) do it at once.

PostgreSQL's `create schema if not exists` and `create table if not exists` are not safe against
themselves: two sessions creating the same name at once collide in the catalog
(`UniqueViolation` on `pg_namespace_nspname_index` or `pg_type_typname_nsp_index`). So every such
statement of ours runs inside `catalog_changes`, which holds one advisory lock of the database
for its transaction (released at commit, or when the session dies); DuckDB takes one writer
process, and a lock of this process covers its threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ._conflicts import retried

# The advisory lock every creation of a shared schema or table of ours takes (an arbitrary
# constant of 64 bits: the bytes of "sgnetl01").
CATALOG_LOCK_KEY = int.from_bytes(b"sgnetl01", "big", signed=True)
_IN_PROCESS = threading.RLock()


def is_postgres(client: Any) -> bool:
    """Whether `client` is dlt's SQL client of a PostgreSQL database."""
    return type(client).__name__ == "Psycopg2SqlClient"


def lock_for_transaction(client: Any, key: int) -> None:
    """Hold the advisory lock `key` until the transaction `client` is in ends: on PostgreSQL,
    where other hosts' runs write beside this one; a DuckDB file has one writer already."""
    if is_postgres(client):
        client.execute_sql("select pg_advisory_xact_lock(%s)", key)


@contextlib.contextmanager
def catalog_changes(client: Any) -> Iterator[None]:
    """Hold the warehouse's lock for creating and widening shared schemas and tables while the
    block runs: on PostgreSQL, a transaction holding the advisory lock (the block's statements
    commit with it); elsewhere, a lock of this process."""
    with _IN_PROCESS:
        if not is_postgres(client):
            yield
            return
        if not client.native_connection.autocommit:  # in the caller's transaction: held to its end
            client.execute_sql("select pg_advisory_xact_lock(%s)", CATALOG_LOCK_KEY)
            yield
            return
        with client.begin_transaction():
            client.execute_sql("select pg_advisory_xact_lock(%s)", CATALOG_LOCK_KEY)
            yield


def ensure_schemas(client: Any, schemas: list[str]) -> None:
    """Create the schemas (quoted names of `client`'s database) that do not exist yet."""

    def create() -> None:
        with catalog_changes(client):
            for schema in schemas:
                client.execute_sql(f"create schema if not exists {schema}")

    retried(f"creating {', '.join(schemas)}", create)


@dataclass(frozen=True)
class OwnTable:
    """One of the project's own tables as `ensure_table` left it: its qualified name and the
    columns it has (those asked for, and any an earlier version gave it)."""

    name: str
    columns: frozenset[str]


def ensure_table(client: Any, name: str, columns: Mapping[str, str]) -> OwnTable:
    """One of the project's own tables of the client's dataset, created (schema too) or widened
    to `columns` (name -> SQL type) when it is not yet so. A table that already has every
    column costs one read and takes no lock: the lock is for changing the catalog."""
    table: str = client.make_qualified_table_name(name)
    existing = _columns_of(client, name)
    if set(columns) <= existing:
        return OwnTable(table, frozenset(existing))
    return retried(f"creating {table}", lambda: _create_table(client, name, table, columns))


def _create_table(client: Any, name: str, table: str, columns: Mapping[str, str]) -> OwnTable:
    with catalog_changes(client):
        client.execute_sql(f"create schema if not exists {client.fully_qualified_dataset_name()}")
        listed = ", ".join(f"{column} {kind}" for column, kind in columns.items())
        client.execute_sql(f"create table if not exists {table} ({listed})")
        existing = _columns_of(
            client, name
        )  # again under the lock: another run may have widened it
        for column, kind in columns.items():
            if column not in existing:
                client.execute_sql(f"alter table {table} add column {column} {kind}")
    return OwnTable(table, frozenset(existing | set(columns)))


def _columns_of(client: Any, name: str) -> set[str]:
    rows = client.execute_sql(
        "select column_name from information_schema.columns "
        "where table_schema = %s and table_name = %s",
        client.dataset_name,
        name,
    )
    return {str(row[0]) for row in rows or []}


def ensure_datasets(pipeline: Any) -> None:
    """Create a pipeline's dataset and its staging dataset before dlt's steps, under the lock:
    dlt creates a missing one with a plain `create schema`, which collides with a run doing the
    same in another session."""
    with pipeline.sql_client() as client:
        missing = [] if client.has_dataset() else [client.fully_qualified_dataset_name()]
        with client.with_staging_dataset():
            if not client.has_dataset():
                missing.append(client.fully_qualified_dataset_name())
        if missing:  # a drain every minute finds both and takes no lock
            ensure_schemas(client, missing)


# dlt's staging dataset of the project's pipelines: `raw_staging` on a DuckDB file (one writer),
# `raw_staging_<workspace>` on a destination that takes concurrent writers, since dlt empties
# a staging table before each merge through it and two workspaces merging at once through one
# would lose a merge.
STAGING_INFIX = "_staging"
_MOST_SUFFIX = 40  # PostgreSQL keeps 63 bytes of a name; `raw_staging_` and a hash fit beside


def staging_dataset(dataset: str, workspace_id: str) -> str:
    """The staging dataset of one workspace's merges: `<dataset>_staging_<workspace id>`, in
    the lower-case letters, digits and underscores dlt would make of it (a hash added when the
    id had to change, so two ids never share one)."""
    safe = re.sub(r"[^a-z0-9_]", "_", workspace_id.lower())[:_MOST_SUFFIX]
    if safe != workspace_id:
        safe += "_" + hashlib.sha256(workspace_id.encode()).hexdigest()[:8]
    return f"{dataset}{STAGING_INFIX}_{safe}"


def staging_datasets(client: Any, dataset: str) -> list[str]:
    """Every staging dataset of `dataset` in the client's database: dlt's default one and
    each workspace's, for what must reach every copy of the rows (a privacy change, erasure)."""
    rows = client.execute_sql(
        "select schema_name from information_schema.schemata "
        "where schema_name = %s or schema_name like %s escape '\\'",
        f"{dataset}{STAGING_INFIX}",
        f"{dataset}{STAGING_INFIX}\\_%",
    )
    return sorted(str(row[0]) for row in rows or [])
