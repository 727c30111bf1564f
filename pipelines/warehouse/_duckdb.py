"""The DuckDB file, as others read it: its read-only readers, the checks before dbt builds on it,
the report's local snapshot, and the choice of a run's load files. With `_run_file` (what a run
holds and writes), the only modules of the project that open DuckDB."""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from dlt.common.destination import TLoaderFileFormat

from pipelines.errors import QueryRefused, WarehouseError, WarehousePathError, first_line

DUCKDB = "duckdb"

# DuckDB's memory for a load; without it DuckDB may take 80% of the machine. A user's own
# `[destination.duckdb.credentials] global_config` (or its environment variable) wins.
DUCKDB_MEMORY_LIMIT = "512MB"

# Records fetched from which a DuckDB load is written as parquet rather than INSERT statements.
PARQUET_FROM_RECORDS = 1_000


@dataclass
class LoadFileFormat:
    """The load files of a DuckDB run, chosen once its extract has told how much it fetched.

    INSERT statements (dlt's default for DuckDB) make DuckDB's memory grow with the size of a
    load: 1.9 GiB at 2,000 shipments, outside its memory limit. Parquet keeps the load step
    flat and fast, but writing it imports pyarrow and pandas, about 0.8 s of every run. So a
    run that fetched fewer than `PARQUET_FROM_RECORDS` records, a nightly run with little or
    nothing new, writes INSERT statements, and a larger one parquet. Parquet is also the
    answer before anything was fetched (packages an interrupted run left).

    dlt asks this per table while it normalizes (`loader_file_format_selector`)."""

    parquet: bool = True

    def choose_for(self, records: int) -> None:
        self.parquet = records >= PARQUET_FROM_RECORDS

    def __call__(
        self,
        preferred: TLoaderFileFormat,
        supported: Sequence[TLoaderFileFormat],
        /,
        *,
        table_schema: Any,
    ) -> tuple[TLoaderFileFormat, Sequence[TLoaderFileFormat]]:
        return ("parquet" if self.parquet else "insert_values"), supported


# Every DuckDB database file says so at byte 8 (after its header's checksum).
_MAGIC, _MAGIC_AT = b"DUCK", 8
NOT_DUCKDB = "{path} is not a DuckDB file; move it away or choose another --duckdb"


_UNQUOTABLE = re.compile(r"['\"\x00-\x1f\x7f]")


def check_file_name(path: Path) -> None:
    """dbt-duckdb names the database after the file and quotes that name badly: a name with a
    quote or a control character is refused in one line."""
    if _UNQUOTABLE.search(path.stem):
        raise WarehousePathError(
            f"the warehouse file's name {path.name!r} holds a quote or a control "
            "character, which dbt cannot open; choose another name with --duckdb"
        )


def has_duckdb_header(path: Path) -> bool:
    """Whether the file at `path` begins as a DuckDB database does (an unreadable one is left
    to DuckDB to name): told before a run copies it or writes a lock beside it."""
    try:
        with path.open("rb") as file:
            head = file.read(_MAGIC_AT + len(_MAGIC))
    except OSError:
        return True
    return head[_MAGIC_AT:] == _MAGIC


def unusable(warehouse: Path, error: duckdb.Error) -> WarehouseError:
    return WarehouseError(
        f"{warehouse} is not a usable DuckDB file ({first_line(error)}); move it away or choose "
        "another --duckdb"
    )


def models_problem(warehouse: Path, dbt_dir: Path, shown: Path | None = None) -> str | None:
    """Why dbt cannot build the models on an existing `warehouse`, in one line: a folder, a
    folder that cannot be written in (DuckDB writes its `.wal` there, dbt its target and
    logs), or a file DuckDB cannot open (not a database, another process holds it); None when
    it can. Creates dbt's folders on the way. Messages name `shown` (the published file)."""
    named = shown or warehouse
    if not warehouse.is_file():
        return f"{named} is a folder, not a warehouse: point --duckdb at the file"
    try:
        for name in ("target", "logs"):
            (dbt_dir / name).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=warehouse.parent):
            pass
    except OSError as error:
        return (
            f"cannot write in {warehouse.parent} ({error.strerror or error}): the models "
            "write beside the warehouse; make the folder writable, or copy the warehouse to "
            "one that is"
        )
    reason = open_error(warehouse)
    if reason is None:
        return None
    if "not a valid DuckDB database" in reason:
        hint = "it is not a DuckDB file: point --duckdb at the one `signing-etl load` wrote"
    elif "lock" in reason.lower():
        hint = "another process has it open: try again once it has finished"
    else:
        hint = "check the file, or load a new warehouse with `signing-etl load`"
    return f"cannot open the warehouse {named} ({reason}); {hint}"


def open_error(warehouse: Path) -> str | None:
    """Why DuckDB cannot open the file for writing, in one line; None when it can."""
    try:
        duckdb.connect(str(warehouse)).close()
    except duckdb.Error as error:
        return " ".join((str(error).splitlines() or [type(error).__name__])[0].split())
    return None


class DuckDBReader:
    """The calls of dlt's SQL client that reading a warehouse uses (`execute_sql` with `%s`
    parameters, `make_qualified_table_name`, `dataset_name`), on a read-only connection: dlt's
    own client would open the file for writing."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, dataset_name: str) -> None:
        self.connection = connection
        self.dataset_name = dataset_name

    def make_qualified_table_name(self, table_name: str) -> str:
        return f'"{self.dataset_name}"."{table_name}"'

    def execute_sql(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return self.connection.execute(sql.replace("%s", "?"), list(args)).fetchall()


@contextlib.contextmanager
def read_only(warehouse: Path, dataset_name: str) -> Iterator[DuckDBReader]:
    """A read-only reader of the file (it may be open for writing elsewhere)."""
    try:
        connection = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.Error as error:
        raise WarehouseError(
            f"cannot read {warehouse}: {' '.join(str(error).splitlines()[:1])}"
        ) from None
    with connection:
        yield DuckDBReader(connection, dataset_name)


# A user's query runs where it can read the warehouse and nothing else: no file, URL or other
# database (`read_csv`, `COPY ... TO`, `ATTACH`), no extension loaded, no setting changed back.
LOCKED_DOWN: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,
}
READING_STATEMENTS = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)


def read_only_statement(
    warehouse: Path, query: str, most: int, *, in_utc: bool = False
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Column names and at most `most` rows of one reading statement, checked by DuckDB's own
    parser before it runs on a read-only connection with external access switched off (and,
    `in_utc`, times cut in UTC whatever the machine's zone).

    Raises:
        QueryRefused: not SQL, several statements, or one that is not a reading one.
        WarehouseError: the file cannot be opened.
    """
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as error:
        raise QueryRefused(f"{QueryRefused.RULE}: {first_line(error)}") from None
    if len(statements) != 1:
        raise QueryRefused(f"{QueryRefused.RULE}; this text holds {len(statements)}")
    kind = statements[0].type
    if kind not in READING_STATEMENTS:
        raise QueryRefused(f"{QueryRefused.RULE}; this one is {kind.name}")
    # The time zone is set before the configuration is locked (DuckDB takes it only once its
    # ICU extension is loaded, not at connect time).
    opening = {name: value for name, value in LOCKED_DOWN.items() if name != "lock_configuration"}
    try:
        connection = duckdb.connect(str(warehouse), read_only=True, config=opening)
    except duckdb.Error as error:
        raise WarehouseError(f"cannot read {warehouse}: {first_line(error)}") from None
    with connection:
        if in_utc:
            connection.execute("set TimeZone = 'UTC'")
        connection.execute("set lock_configuration = true")
        cursor = connection.execute(query)
        return [d[0] for d in cursor.description or []], cursor.fetchmany(most)


def close_dbt_connections() -> None:
    """dbt-duckdb keeps the file open in-process after a run, which would lock out the next
    load in this process (duckdb/dbt-duckdb#616); release it."""
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager

    DuckDBConnectionManager.close_all_connections()  # type: ignore[no-untyped-call]


# The source's column types a copy keeps when a column holds no value at all (a frame cannot
# say its type then, and DuckDB would make it a column of NULL type that no function takes).
_DUCKDB_TYPE_OF = {
    "timestamp with time zone": "timestamptz",
    "timestamp without time zone": "timestamp",
    "date": "date",
    "bigint": "bigint",
    "integer": "bigint",
    "smallint": "bigint",
    "double precision": "double",
    "real": "double",
    "numeric": "double",
    "boolean": "boolean",
}


def copy_tables(client: Any, into: Path, tables: Sequence[tuple[str, str]]) -> None:
    """A new DuckDB file `into` holding each `(schema, table)` as dlt's SQL client of another
    destination reads it; a column with no value at all keeps the source's type."""
    frames, types = {}, {}
    for schema, table in tables:
        with client.execute_query(f"select * from {schema}.{table}") as cursor:
            frames[schema, table] = cursor.df()
        rows = client.execute_sql(
            "select column_name, data_type from information_schema.columns "
            "where table_schema = %s and table_name = %s",
            schema,
            table,
        )
        types[schema, table] = {str(name): str(kind) for name, kind in rows or []}
    with duckdb.connect(str(into)) as local:
        for (schema, table), frame in frames.items():
            local.execute(f'create schema if not exists "{schema}"')
            local.register("copied", frame)
            columns = ", ".join(
                _typed(name, types[schema, table], frame[name].isna().all())
                for name in frame.columns
            )
            local.execute(f'create table "{schema}"."{table}" as select {columns} from copied')
            local.unregister("copied")


def _typed(name: str, source_types: dict[str, str], empty: bool) -> str:
    """One column of a copy: as it is, or cast to the source's type when it holds no value."""
    quoted = '"' + name.replace('"', '""') + '"'
    kind = _DUCKDB_TYPE_OF.get(source_types.get(name, ""))
    return f"cast({quoted} as {kind}) as {quoted}" if empty and kind else quoted
