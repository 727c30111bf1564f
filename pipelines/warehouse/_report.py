"""The report's side of `Warehouse`: whether the marts can be reported on, and a DuckDB copy of
another destination's tables for the report's notebook. `Warehouse` inherits it."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.errors import WarehouseError, first_line

from . import _duckdb
from ._catalog import SqlClient, tables_in


class ReportPlace:
    """The report's side of `Warehouse`, which provides what it names here."""

    path: Path
    destination: str

    @property
    def is_file(self) -> bool:
        raise NotImplementedError

    @property
    def label(self) -> str:
        raise NotImplementedError

    def reader(self) -> contextlib.AbstractContextManager[SqlClient]:
        raise NotImplementedError

    def sql_client(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def marts_missing(self, marts: Sequence[str]) -> str | None:
        """Why the marts cannot be reported on, in one line; None when every one exists."""
        if self.is_file and not self.path.is_file():
            return f"no warehouse at {self.path}; run `signing-etl load` (or `signing-etl demo`)"
        try:
            with self.reader() as client:
                found = tables_in(client, "marts")
        except WarehouseError as error:
            return str(error)
        missing = [name for name in marts if name not in found]
        if missing:
            where = f"--duckdb {self.path}" if self.is_file else f"--destination {self.destination}"
            return (
                f"{self.label} has no marts ({', '.join(missing)} missing); "
                f"run `signing-etl models {where}`"
            )
        return None

    def copy_into(self, into: Path, tables: Sequence[tuple[str, str]]) -> Path:
        """A new DuckDB file `into` with `tables` (schema, name) of this warehouse, read
        through the destination's own connection; they are small, aggregated tables.

        Raises:
            WarehouseError: the destination cannot be read or lacks a table (one line).
        """
        try:
            with self.sql_client() as client:
                _duckdb.copy_tables(client, into, tables)
        except Exception as error:  # the destination's own message, in one line
            raise WarehouseError(
                f"cannot read the marts of the {self.destination} destination: "
                f"{first_line(error)}; run `signing-etl models --destination "
                f"{self.destination}` after a load"
            ) from None
        return into
