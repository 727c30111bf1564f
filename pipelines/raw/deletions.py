"""Deleted records in the warehouse: what it holds of one workspace, read for the source (which
decides what the service deleted, `sources.signing.deletions`), and, once a run has loaded,
what those decisions do to it: `_deleted_at` on the record's rows and on its nested and child
rows (soft), or none of its rows left, its history included (hard).

Written with plain SQL through the pipeline's own connection, as the run records are, so every
destination is read and written the same way; ids are always parameters.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import dlt

from pipelines.warehouse import SqlClient, batches, columns_by_table, ensure_table, transaction
from sources.signing import CHILD_TABLES, DELETABLE_TABLES, DELETED_AT, TableDeletions

# dbt's snapshots of the records (models/snapshots): their history goes too on a hard delete,
# found by the column that names the record (`shipment_id`, ...) beside `workspace_id`.
SNAPSHOTS_SCHEMA = "snapshots"
ID_COLUMNS = {"documents": "document_id", "shipments": "shipment_id", "contacts": "contact_id"}
CHUNK = 500  # ids per statement


class PipelineRecords:
    """The warehouse's rows of one workspace, as the source asks for them during a run
    (`sources.signing.WarehouseRecords`), read through the pipeline's connection: the run
    holds a DuckDB file open, so nothing else could open it."""

    def __init__(self, pipeline: dlt.Pipeline, workspace_id: str) -> None:
        self._pipeline = pipeline
        self._workspace_id = workspace_id

    def live_count(self, table: str) -> int:
        with self._pipeline.sql_client() as client:
            columns = self._columns(client, table)
            if columns is None:
                return 0
            live = f" and {DELETED_AT} is null" if DELETED_AT in columns else ""
            rows = client.execute_sql(
                f"select count(*) from {client.make_qualified_table_name(table)} "
                f"where workspace_id = %s{live}",
                self._workspace_id,
            )
        return int(rows[0][0]) if rows else 0

    def ids(self, table: str) -> tuple[set[str], set[str]]:
        live: set[str] = set()
        deleted: set[str] = set()
        with self._pipeline.sql_client() as client:
            columns = self._columns(client, table)
            if columns is None:
                return live, deleted
            marked = f"{DELETED_AT} is not null" if DELETED_AT in columns else "false"
            rows = client.execute_sql(
                f"select id, {marked} from {client.make_qualified_table_name(table)} "
                "where workspace_id = %s",
                self._workspace_id,
            )
        for record_id, is_deleted in rows or []:
            (deleted if is_deleted else live).add(str(record_id))
        return live, deleted

    @staticmethod
    def _columns(client: SqlClient, table: str) -> set[str] | None:
        """The table's columns; None before it exists."""
        return columns_by_table(client).get(table)


def mark_deletions(
    pipeline: dlt.Pipeline,
    workspace_id: str,
    decided: Sequence[TableDeletions],
    mode: str,
    noticed_at: datetime,
) -> dict[str, int]:
    """Mark what a run found deleted, in one transaction: `soft` sets `_deleted_at` (when the
    pipeline noticed) on the record's rows, nested and child rows that have none yet; `hard`
    removes them, and the record's rows in dbt's snapshots. Returns the records marked per
    table (rows of a record already marked count once, as before)."""
    marking = [d for d in decided if d.marked and d.table in DELETABLE_TABLES]
    if not marking:
        return {}
    with pipeline.sql_client() as client:
        tables = columns_by_table(client)

        def mark() -> dict[str, int]:
            done: dict[str, int] = {}
            for deletion in marking:
                if deletion.table not in tables:
                    continue
                statements = _Statements(client, tables, deletion.table, workspace_id)
                ids = sorted(deletion.marked)
                if mode == "hard":
                    done[deletion.table] = statements.remove(ids)
                else:
                    done[deletion.table] = statements.mark(ids, noticed_at)
            return done

        return transaction(client, "marking deleted records", mark)


class _Statements:
    """The statements that mark or remove one record table's rows, in chunks of ids."""

    def __init__(
        self, client: Any, tables: dict[str, set[str]], table: str, workspace_id: str
    ) -> None:
        self.client = client
        self.tables = tables
        self.table = table
        self.workspace_id = workspace_id
        self.root = client.make_qualified_table_name(table)

    def mark(self, ids: list[str], noticed_at: datetime) -> int:
        """`_deleted_at` on every row of the records that has none; the records newly marked."""
        marked = 0
        for table in self._related():
            self._add_column(table)
        for chunk in batches(ids, CHUNK):
            marks = ", ".join(["%s"] * len(chunk))
            marked += self._count(f"id in ({marks}) and {DELETED_AT} is null", chunk)
            for table, condition, args in self._conditions(chunk):
                self.client.execute_sql(
                    f"update {table} set {DELETED_AT} = %s where {condition} "
                    f"and {DELETED_AT} is null",
                    noticed_at,
                    *args,
                )
        return marked

    def remove(self, ids: list[str]) -> int:
        """No row of the records left, nested, child and snapshot rows included."""
        removed = 0
        for chunk in batches(ids, CHUNK):
            marks = ", ".join(["%s"] * len(chunk))
            removed += self._count(f"id in ({marks})", chunk)
            for table, condition, args in self._conditions(chunk):
                self.client.execute_sql(f"delete from {table} where {condition}", *args)
            self._remove_history(chunk)
        return removed

    def _related(self) -> list[str]:
        """The tables holding the records' rows: nested tables, children, the table itself."""
        nested = [
            t
            for t in self.tables
            if t.startswith(f"{self.table}__") and "_dlt_root_id" in self.tables[t]
        ]
        children = [t for t in CHILD_TABLES.get(self.table, {}) if t in self.tables]
        return [*nested, *children, self.table]

    def _conditions(self, chunk: list[str]) -> Iterator[tuple[str, str, list[Any]]]:
        """Each related table with the condition that picks the records' rows: nested rows
        through their root row (first, while the root rows still exist), then child rows by
        the column that names the record, then the records themselves."""
        marks = ", ".join(["%s"] * len(chunk))
        ws = self.workspace_id
        for table in self._related():
            qualified = self.client.make_qualified_table_name(table)
            if table == self.table:
                yield qualified, f"workspace_id = %s and id in ({marks})", [ws, *chunk]
            elif table in CHILD_TABLES.get(self.table, {}):
                column = CHILD_TABLES[self.table][table]
                yield qualified, f"workspace_id = %s and {column} in ({marks})", [ws, *chunk]
            else:
                roots = (
                    f"select _dlt_id from {self.root} where workspace_id = %s and id in ({marks})"
                )
                yield qualified, f"_dlt_root_id in ({roots})", [ws, *chunk]

    def _count(self, condition: str, chunk: list[str]) -> int:
        rows = self.client.execute_sql(
            f"select count(*) from {self.root} where workspace_id = %s and {condition}",
            self.workspace_id,
            *chunk,
        )
        return int(rows[0][0]) if rows else 0

    def _add_column(self, table: str) -> None:
        """A table dlt has not widened yet (its warehouse predates `_deleted_at`)."""
        if DELETED_AT not in self.tables[table]:
            ensure_table(self.client, table, {DELETED_AT: "timestamp with time zone"})
            self.tables[table].add(DELETED_AT)

    def _remove_history(self, chunk: list[str]) -> None:
        """The records' versions in dbt's snapshots (a hard delete is an erasure)."""
        column = ID_COLUMNS[self.table]
        rows = self.client.execute_sql(
            "select table_name from information_schema.columns where table_schema = %s "
            "and column_name = %s",
            SNAPSHOTS_SCHEMA,
            column,
        )
        marks = ", ".join(["%s"] * len(chunk))
        for (table,) in rows or []:
            path = self.client.make_qualified_table_name_path(
                str(table), dataset_name=SNAPSHOTS_SCHEMA
            )
            self.client.execute_sql(
                f"delete from {'.'.join(path)} where workspace_id = %s and {column} in ({marks})",
                self.workspace_id,
                *chunk,
            )


def deleted_rows(client: SqlClient, columns: dict[str, set[str]]) -> dict[str, dict[str, int]]:
    """Per workspace, the records of each table marked deleted (`signing-etl status`)."""
    found: dict[str, dict[str, int]] = {}
    for table in DELETABLE_TABLES:
        if DELETED_AT not in columns.get(table, set()):
            continue
        rows = client.execute_sql(
            f"select workspace_id, count(*) from {client.make_qualified_table_name(table)} "
            f"where {DELETED_AT} is not null group by workspace_id"
        )
        for workspace_id, count in rows or []:
            found.setdefault(str(workspace_id), {})[table] = int(count)
    return found
