"""`signing-etl sql`: one read-only statement on the warehouse, printed as a table, CSV or
JSON lines; anything else is refused in one line."""

from __future__ import annotations

from typing import Annotated

import typer

from pipelines.console.commands import fail, warehouse_named
from pipelines.console.options import (
    ROW_FORMATS,
    RowLimit,
    RowsFormat,
    WarehouseDestination,
    WarehouseFile,
)
from pipelines.console.tables import print_at_most
from pipelines.errors import SigningEtlError, failure_reason
from pipelines.warehouse import DEFAULT_DESTINATION, DEFAULT_WAREHOUSE


def sql_command(
    query: Annotated[str, typer.Argument(help="SQL to run, read-only.")],
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    output_format: RowsFormat = "table",
    limit: RowLimit = 1000,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
) -> None:
    """Run a read-only SQL query on the warehouse and print the result."""
    if output_format not in ROW_FORMATS:
        raise fail("--format must be table, csv or json", 2)
    warehouse = warehouse_named(duckdb, destination)  # its own one line (typer.Exit)
    try:
        names, rows = warehouse.read_only_query(query, limit + 1)
    except SigningEtlError as error:
        raise fail(str(error)) from None
    except Exception as error:  # the database's own message, in one line
        raise fail(failure_reason(error)) from None
    print_at_most(names, rows, limit, output_format)
