"""The file a DuckDB run writes: dlt's destination on it, and the hold that keeps it open for the
run, so that dlt's many connections share one database instead of reading and checkpointing the
file each time (10 to 40 ms each; 15 to 40 connections a run). With `_duckdb`, the only modules
of the project that open DuckDB."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dlt
import duckdb
from dlt.common.configuration import configspec, resolve_configuration
from dlt.destinations.impl.duckdb.configuration import DuckDbConnectionPool, DuckDbCredentials

from pipelines.errors import WarehouseError, first_line

from ._duckdb import (
    DUCKDB,
    DUCKDB_MEMORY_LIMIT,
    DuckDBReader,
    LoadFileFormat,
    open_error,
    unusable,
)


@configspec(init=False)
class WarehouseCredentials(DuckDbCredentials):
    """DuckDB's credentials, shown as their path (dlt shows credentials as a SQLAlchemy URL, and
    so imports SQLAlchemy, 0.3 s, in every run for one line of a load's info); their pool
    takes the hold of a run's new file (`_HoldingPool`)."""

    def __str__(self) -> str:
        return str(self.database)

    def on_resolved(self) -> None:
        super().on_resolved()
        self.conn_pool = _HoldingPool(self)


class _HoldingPool(DuckDbConnectionPool):
    """dlt's pool, which also takes the hold of a run's new file once it has created it."""

    def borrow_conn(self, *args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        connection = super().borrow_conn(*args, **kwargs)
        path = Path(str(self.credentials.database))
        if path in _AWAITED:  # read without the lock: only a run's own file is ever awaited
            _hold_if_awaited(path, self)
        return connection


@dataclass(frozen=True)
class _Hold:
    """A connection borrowed from one of dlt's pools, which keeps the pool's database open
    until it is returned. Borrowed, not opened: DuckDB shares a file's database only between
    connections opened with the same settings, and dlt's pool opens with the user's."""

    pool: DuckDbConnectionPool
    connection: duckdb.DuckDBPyConnection

    @classmethod
    def borrowed(cls, pool: DuckDbConnectionPool) -> _Hold:
        return cls(pool, DuckDbConnectionPool.borrow_conn(pool))  # dlt's: not held again

    def release(self) -> None:
        self.pool.return_conn(self.connection)


def warehouse_credentials(warehouse: Path) -> WarehouseCredentials:
    """DuckDB's credentials for `warehouse`, resolved so that the user's
    `[destination.duckdb.credentials]` (or their environment variables) still apply: its
    `global_config` replaces the default memory limit, `DUCKDB_MEMORY_LIMIT`. The file is
    always `warehouse`."""
    credentials = WarehouseCredentials(global_config={"memory_limit": DUCKDB_MEMORY_LIMIT})
    credentials.database = str(warehouse)
    credentials = resolve_configuration(credentials, sections=("destination", DUCKDB))
    credentials.database = str(warehouse)
    return credentials


def duckdb_destination(warehouse: Path) -> Any:
    """DuckDB at `warehouse`, its load files chosen by size (`LoadFileFormat`)."""
    credentials = warehouse_credentials(warehouse)
    return dlt.destinations.duckdb(credentials, loader_file_format_selector=LoadFileFormat())


# The hold of each run's file, which `compact` lets go of and takes again on the new file; the
# runs' files that do not exist yet, held once dlt has created them (`_HoldingPool`).
_HELD: dict[Path, _Hold] = {}
_AWAITED: set[Path] = set()
_HOLDING = threading.Lock()


@contextlib.contextmanager
def held_open(warehouse: Path, shown: Path | None = None) -> Iterator[None]:
    """Hold a run's warehouse open, or fail in one line when DuckDB cannot open it. A new
    warehouse is not created here, so that a run that writes nothing leaves nothing behind:
    it is held from dlt's first connection, which creates it. A hold inside a hold of the same
    file is part of it. Messages name `shown` (the published file)."""
    with _HOLDING:
        nested = warehouse in _HELD or warehouse in _AWAITED
        exists = warehouse.exists()
        if not nested and not exists:
            _AWAITED.add(warehouse)
    if nested:
        yield
        return
    if exists:
        try:
            held = _Hold.borrowed(_pool_of(warehouse))
        except duckdb.Error as error:
            raise _refused(shown or warehouse, warehouse, error) from None
        with _HOLDING:
            _HELD[warehouse] = held
    try:
        yield
    finally:
        _let_go(warehouse)


def _refused(shown: Path, warehouse: Path, error: duckdb.Error) -> WarehouseError:
    """Why the hold was refused: the file itself, or the user's settings that every
    connection of the run applies (an extension that does not load, a statement that fails),
    which moving the file away would not mend."""
    if open_error(warehouse) is not None:
        return unusable(shown, error)
    return WarehouseError(
        f"cannot open {shown} with the DuckDB settings configured ({first_line(error)}); check "
        "[destination.duckdb.credentials] (extensions, global_config, statements)"
    )


def _pool_of(warehouse: Path) -> DuckDbConnectionPool:
    pool = warehouse_credentials(warehouse).conn_pool
    assert pool is not None, "dlt makes the pool as it resolves the credentials"
    return pool


def _hold_if_awaited(warehouse: Path, pool: DuckDbConnectionPool) -> None:
    """Hold a run's file that `pool` has just created (see `held_open`). A hold that cannot be
    taken costs the run speed, never its work: dlt keeps the connection it asked for."""
    with _HOLDING:
        if warehouse in _AWAITED and warehouse not in _HELD:
            _AWAITED.discard(warehouse)
            with contextlib.suppress(duckdb.Error):
                _HELD[warehouse] = _Hold.borrowed(pool)


def _let_go(warehouse: Path) -> None:
    with _HOLDING:
        _AWAITED.discard(warehouse)
        held = _HELD.pop(warehouse, None)
    if held is not None:
        held.release()


def compact(warehouse: Path) -> bool:
    """Write the file afresh (COPY FROM DATABASE into a new file that replaces it), DuckDB's
    documented way to reclaim space: values deleted or updated stay in the old file's free
    blocks, and an erasure or a new privacy policy must not leave them there.

    Only when nothing else in this process has the file open (the run's hold is let go, and
    taken again on the new file, or on the old one when the copy failed); otherwise nothing
    happens and False is returned."""
    fresh = warehouse.with_name(f".{warehouse.name}.compacting")
    fresh.unlink(missing_ok=True)
    with _HOLDING:
        held = _HELD.pop(warehouse, None)
    try:
        copying = held or _Hold.borrowed(_pool_of(warehouse))
        try:
            connection = copying.connection
            found = connection.execute("select current_database()").fetchone()
            name = str(found[0]) if found else warehouse.stem
            target = str(fresh).replace("'", "''")
            connection.execute(f"attach '{target}' as signing_compacted")
            connection.execute(f'copy from database "{name}" to signing_compacted')
            connection.execute("detach signing_compacted")
        finally:
            copying.release()
        alone = _closed_everywhere(warehouse)
        if alone:
            fresh.replace(warehouse)
        return alone
    finally:
        fresh.unlink(missing_ok=True)  # what a failed copy left, or nothing
        if held is not None:
            retaken = _Hold.borrowed(_pool_of(warehouse))
            with _HOLDING:
                _HELD[warehouse] = retaken


def _closed_everywhere(warehouse: Path) -> bool:
    """Whether no connection of this process has the file open any more: DuckDB refuses a
    read-only connection to a file it holds open for writing."""
    if Path(f"{warehouse}.wal").exists():
        return False
    try:
        duckdb.connect(str(warehouse), read_only=True).close()
    except duckdb.Error:
        return False
    return True


@contextlib.contextmanager
def beside_the_run(warehouse: Path, dataset_name: str) -> Iterator[DuckDBReader]:
    """A reader of the file a run holds open: a cursor of the run's own hold (a read-only
    connection would be refused while it is open for writing), opened in microseconds."""
    held = _HELD.get(warehouse)
    with held.connection.cursor() if held else duckdb.connect(str(warehouse)) as connection:
        yield DuckDBReader(connection, dataset_name)
