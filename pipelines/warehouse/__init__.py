"""The warehouse: one object, made once from the CLI's or Dagster's options, that owns where the
data lives and what is done to the place itself (working folders, lock, writability, dlt's
destination, one read-only reader for every backend, the local copy the report reads). A DuckDB
file takes one writer: runs write a working file and publish a copy of it where analysts read
(`_published`); other dlt destinations take concurrent writers and keep their state in the
database. Nothing else in the project opens DuckDB or asks which destination it is."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dlt
from dlt.common.destination import Destination

from pipelines.errors import (
    QueryRefused,
    WarehouseMissing,
    WarehousePathError,
)

from . import _duckdb, _journal, _published, _run_file
from ._advisory import PRIVACY_KEY, confirm_run_locks
from ._catalog import (
    LoadedWorkspace,
    SqlClient,
    columns_by_table,
    has_table,
    loaded_workspaces,
    tables_in,
)
from ._conflicts import retried, transaction
from ._ddl import (
    catalog_changes,
    ensure_datasets,
    ensure_table,
    lock_for_transaction,
    staging_dataset,
    staging_datasets,
)
from ._destination import known_destination
from ._homes import record_home, recorded_home
from ._lock import BRIEF_HOLD_WAIT_SECONDS
from ._locks import DATASET, LockPlace, load_step
from ._models import WAREHOUSE_VARIABLE, DbtTarget, ModelsPlace
from ._postgres import POSTGRES, read_only_statement
from ._report import ReportPlace
from ._rows import batches, insert_rows

DEFAULT_DESTINATION = _duckdb.DUCKDB
DEFAULT_WAREHOUSE = Path("warehouse/signing.duckdb")
PARQUET_FROM_RECORDS = _duckdb.PARQUET_FROM_RECORDS
LoadFileFormat = _duckdb.LoadFileFormat

__all__ = [
    "BRIEF_HOLD_WAIT_SECONDS",
    "DATASET",
    "DEFAULT_DESTINATION",
    "DEFAULT_WAREHOUSE",
    "PARQUET_FROM_RECORDS",
    "PRIVACY_KEY",
    "WAREHOUSE_VARIABLE",
    "DbtTarget",
    "LoadFileFormat",
    "LoadedWorkspace",
    "SqlClient",
    "Warehouse",
    "batches",
    "catalog_changes",
    "columns_by_table",
    "confirm_run_locks",
    "ensure_datasets",
    "ensure_table",
    "has_table",
    "insert_rows",
    "load_step",
    "loaded_workspaces",
    "lock_for_transaction",
    "retried",
    "staging_dataset",
    "staging_datasets",
    "tables_in",
    "transaction",
]


@dataclass(frozen=True)
class Warehouse(LockPlace, ModelsPlace, ReportPlace):
    """Where a team's signing data lives: a DuckDB file (`path`), or another dlt destination
    whose local working folders live beside `path`."""

    path: Path
    destination: str = DEFAULT_DESTINATION

    @classmethod
    def at(
        cls, path: Path | str = DEFAULT_WAREHOUSE, destination: str = DEFAULT_DESTINATION
    ) -> Warehouse:
        """The warehouse at `path`: the file it names, symbolic links resolved, is what counts
        (its lock, its working folders), whatever path led to it.

        Raises:
            WarehousePathError: `path` is a symbolic link to nothing (a load would write wherever
                it points), or `destination` names no dlt destination.
        """
        if destination != DEFAULT_DESTINATION:
            known_destination(destination)
        named = Path(path).expanduser()
        if destination == DEFAULT_DESTINATION and named.is_symlink() and not named.exists():
            raise WarehousePathError(
                f"{named} is a symbolic link to {os.readlink(named)}, which does not exist; "
                "point --duckdb at the warehouse file itself"
            )
        resolved = named.resolve()
        if destination == DEFAULT_DESTINATION:
            _duckdb.check_file_name(resolved)
        return cls(resolved, destination)

    @classmethod
    def of(cls, place: Warehouse | Path | str) -> Warehouse:
        """`place` itself, or the DuckDB warehouse at a path."""
        return place if isinstance(place, Warehouse) else cls.at(place)

    # ------------------------------------------------------------------ what it is

    @property
    def is_file(self) -> bool:
        """A DuckDB file: one writer at a time, everything on this machine."""
        return self.destination == DEFAULT_DESTINATION

    @property
    def takes_concurrent_writers(self) -> bool:
        return not self.is_file

    @property
    def label(self) -> str:
        """How messages name it."""
        return str(self.path) if self.is_file else f"the {self.destination} destination"

    @property
    def pipelines_dir(self) -> Path:
        """dlt's working folder of a DuckDB warehouse: beside it, so two never share state."""
        return self.path.parent / f".{self.path.stem}.dlt"

    @property
    def working_path(self) -> Path:
        """The file runs write: a DuckDB warehouse's working file, which only the pipeline
        opens (`path` is the published copy analysts read); `path` for other destinations."""
        return _published.working_file(self.path) if self.is_file else self.path

    def journal(self, name: str, row: Mapping[str, Any]) -> None:
        """Keep `row` in the journal `name` beside the warehouse (`_journal`: in the user's
        state folder when that disk is full), where `status` reads it."""
        _journal.append(self._journal_file(name), dict(row))

    def journaled(self, name: str) -> list[dict[str, Any]]:
        """The rows of the journal `name` (a line that cannot be read is skipped)."""
        return _journal.read(self._journal_file(name))

    def _journal_file(self, name: str) -> Path:
        """Beside the DuckDB file; a destination's in a file of its own, named after it."""
        return _published.working_folder(self.path) / (
            name if self.is_file else f"{self.destination}.{name}"
        )

    @property
    def webhooks_dir(self) -> Path:
        """The webhook receiver's inbox and secrets: beside the warehouse, never in it."""
        return self.path.parent / f".{self.path.stem}.webhooks"

    def record_webhooks_dir(self) -> None:
        """On a shared database, record `webhooks_dir` as this host's receiver's folder, for
        loads run from other folders (`webhooks_dir_of_record`); nothing for a DuckDB file."""
        if not self.is_file:
            with self.sql_client() as client:
                record_home(client, self.webhooks_dir)

    def webhooks_dir_of_record(self) -> Path:
        """Where a load looks for the receiver's inbox and secrets: beside a DuckDB file; for
        a shared database, the folder it records for this host, else `webhooks_dir`."""
        if self.is_file:
            return self.webhooks_dir
        try:
            with self.reader() as client:
                recorded = recorded_home(client)
        except Exception:  # no dataset yet, or a database that cannot be read: none recorded
            recorded = None
        return recorded or self.webhooks_dir

    @property
    def dbt_dir(self) -> Path:
        """dbt's `target/` and `logs/`, beside the warehouse and never in `models/`."""
        return self.path.parent / f".{self.path.stem}.dbt"

    # ------------------------------------------------------------------ writing

    def check_is_file(self) -> None:
        """Fail in one line when `path` names something that is not a DuckDB file (a folder,
        a device such as /dev/null, a text): nothing is written beside it, no lock either."""
        if not self.is_file or not self.path.exists():
            return
        if not self.path.is_file():
            raise WarehousePathError(
                f"{self.path} is not a file (a folder or a device); point --duckdb at a "
                "DuckDB file, or at a path where one may be created"
            )
        if not _duckdb.has_duckdb_header(self.path):
            raise WarehousePathError(_duckdb.NOT_DUCKDB.format(path=self.path))

    def check_writable(self) -> None:
        """Fail in one line, before anything is written, when `path` is not a file or the
        warehouse's folder (or, while it does not exist, the nearest folder above it) cannot
        be written in."""
        self.check_is_file()
        folder = self.path.parent
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        try:
            with tempfile.TemporaryFile(dir=existing):
                pass
        except OSError as error:
            raise WarehousePathError(
                f"cannot write in {existing} ({error.strerror}); choose a writable folder "
                "with --duckdb"
            ) from None

    @contextlib.contextmanager
    def publishing(self, *, brief: str | None = None) -> Iterator[None]:
        """One run of a DuckDB file, the one place every writing path goes through: its folder
        checked, its lock taken (`brief`: `exclusive`), the working file made what the
        published one says, and, when the block ends without an exception, the working file
        published (`_published`). A hold nested in the same thread is part of the outer run:
        a load's workspaces and its models are published once, together. Others: nothing."""
        if not self.is_file:
            yield
            return
        with _published.run_held(self.path) as nested:
            if nested:
                yield
                return
            self.check_writable()
            _published.check_own_folders(self.path)
            with self.exclusive(brief=brief):
                _published.seed(self.path, self.pipelines_dir)
                yield
                _published.publish(self.path)

    @contextlib.contextmanager
    def writer(self, *, brief: str | None = None) -> Iterator[None]:
        """What a run holds before it asks the service anything: its run (`publishing`), and
        its working file held open for it, a new one from dlt's first connection (`_run_file`:
        dlt's connections then share one database)."""
        with self.publishing(brief=brief):
            if self.is_file:
                with _run_file.held_open(self.working_path, shown=self.path):
                    yield
            else:
                yield

    @contextlib.contextmanager
    def sql_client(self) -> Iterator[Any]:
        """dlt's SQL client of the `raw` dataset for writing the project's own tables, such as
        the record of a run that ended before it had a pipeline (a refused key). A DuckDB file
        that does not exist yet is created: the record is the run's account."""
        with tempfile.TemporaryDirectory() as folder:
            writer = dlt.pipeline(
                pipeline_name="signing_records",
                pipelines_dir=folder,
                destination=self.dlt_destination(),
                dataset_name=DATASET,
            )
            with writer.sql_client() as client:
                yield client

    def dlt_destination(self, workspace_id: str | None = None) -> Any:
        """dlt's destination: DuckDB at `path` with its load files chosen by size, or the
        named destination configured as dlt configures it, where one workspace's pipeline
        (`workspace_id`) merges through a staging dataset of its own (`staging_dataset`)."""
        if not self.is_file:
            if workspace_id is None:
                return self.destination
            layout = staging_dataset(DATASET, workspace_id).replace(DATASET, "%s", 1)
            return Destination.from_reference(self.destination, staging_dataset_name_layout=layout)
        self.working_path.parent.mkdir(parents=True, exist_ok=True)
        return _run_file.duckdb_destination(self.working_path)

    def run_reader(self) -> contextlib.AbstractContextManager[SqlClient]:
        """A SQL client for what a run reads while it holds the warehouse (before its pipeline
        exists): the DuckDB file through the connection the run holds, else dlt's client."""
        if self.is_file:
            return _run_file.beside_the_run(self.working_path, DATASET)
        return self.sql_client()

    def writing_client(self) -> contextlib.AbstractContextManager[Any]:
        """dlt's SQL client of `raw` for writing beside the pipelines (privacy, erasures), on
        the destination a load uses (a DuckDB file shares the connection a run holds open)."""
        return self.sql_client()

    def compact(self) -> bool:
        """Rewrite a DuckDB file so that deleted and overwritten values are gone from its free
        blocks (after an erasure or a new privacy policy); False when another connection of
        this process had it open. A database server keeps old row versions until its own
        VACUUM, which its administrator runs."""
        if self.is_file and self.working_path.exists():
            return _run_file.compact(self.working_path)
        return True

    def clear_working_folders(self) -> None:
        """Delete dlt's working folder of a DuckDB warehouse, whose packages keep rows as they
        were loaded (a new privacy policy or an erasure must not leave them); each workspace's
        next load restores its state from the warehouse. Other destinations' are temporary."""
        if self.is_file:
            shutil.rmtree(self.pipelines_dir, ignore_errors=True)

    def remove(self) -> None:
        """Delete a DuckDB warehouse, its working, dlt and webhook folders (the demo starts
        afresh)."""
        if self.is_file:
            self.path.unlink(missing_ok=True)
            shutil.rmtree(_published.working_folder(self.path), ignore_errors=True)
            shutil.rmtree(self.pipelines_dir, ignore_errors=True)
            shutil.rmtree(self.webhooks_dir, ignore_errors=True)

    # ------------------------------------------------------------------ reading

    def loaded_before(self) -> bool:
        """Whether a load has written the warehouse already (its `raw` dataset exists)."""
        if self.is_file:
            return self.working_path.is_file() or self.path.is_file()
        try:
            with self.reader():
                return True
        except Exception:  # no dataset yet, or a database that cannot be reached
            return False

    @contextlib.contextmanager
    def reader(self) -> Iterator[SqlClient]:
        """A SQL client of the `raw` dataset for reading: a read-only DuckDB connection (the
        file may be open elsewhere), or dlt's SQL client of the destination, configured as a
        load is (e.g. `DESTINATION__POSTGRES__CREDENTIALS`)."""
        if self.is_file:
            if not self.path.exists():
                raise WarehouseMissing(f"no warehouse at {self.path}; run `signing-etl load` first")
            self.check_is_file()
            with _duckdb.read_only(self.path, DATASET) as reader:
                yield reader
            return
        with self.sql_client() as client:
            if not client.has_dataset():
                raise WarehouseMissing(
                    f"no dataset {DATASET} in the {self.destination} destination; "
                    f"run `signing-etl load --destination {self.destination}` first"
                )
            yield client

    def read_only_query(
        self, query: str, most: int, *, in_utc: bool = False
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The column names and at most `most` rows of exactly one reading statement (`sql`,
        and the metrics' SQL with `in_utc`: weeks and days cut in UTC, as the marts cut them),
        checked by the database's own parser and run where nothing can be written: DuckDB
        read-only with external access off, or a read-only Postgres transaction the text
        cannot end.

        Raises:
            QueryRefused: anything but one reading statement, or another destination.
            WarehouseMissing: no warehouse yet.
        """
        if self.is_file:
            if not self.path.exists():
                raise WarehouseMissing(f"no warehouse at {self.path}; run `signing-etl load` first")
            self.check_is_file()
            return _duckdb.read_only_statement(self.path, query, most, in_utc=in_utc)
        if self.destination == POSTGRES:
            return read_only_statement(query, most, in_utc=in_utc)
        raise QueryRefused(f"sql reads DuckDB and Postgres warehouses, not {self.destination}")

    def workspaces(self) -> list[LoadedWorkspace]:
        """The workspaces loaded into it; none when it cannot be read yet."""
        try:
            with self.reader() as client:
                return loaded_workspaces(client)
        except Exception:  # no warehouse, no dataset, a file that is not DuckDB: nothing loaded
            return []

    @contextlib.contextmanager
    def local_copy(self, tables: Sequence[tuple[str, str]]) -> Iterator[Warehouse]:
        """A DuckDB warehouse holding `tables` (schema, name) for local readers such as the
        report's notebook: this file itself, or a temporary copy (`copy_into`)."""
        if self.is_file:
            yield self
            return
        with tempfile.TemporaryDirectory() as folder:
            yield Warehouse.at(self.copy_into(Path(folder) / self.path.name, tables))
