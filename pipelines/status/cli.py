"""`signing-etl status`: each workspace of a warehouse as its operator needs it, as tables, as
one JSON document for a monitor, or as a freshness check that exits 1."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import typer

from pipelines.configuration import configured_workspaces
from pipelines.console import output
from pipelines.console.commands import fail, warehouse_named
from pipelines.console.options import (
    CheckOption,
    MaxAgeOption,
    StatusFormat,
    WarehouseDestination,
    WarehouseFile,
)
from pipelines.console.output import printable
from pipelines.errors import SigningEtlError
from pipelines.status.alerts import announce, healths
from pipelines.status.display import print_document, print_status, stale_workspaces
from pipelines.status.read import read_status
from pipelines.warehouse import DEFAULT_DESTINATION, DEFAULT_WAREHOUSE


def status_command(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
    output_format: StatusFormat = "table",
    check: CheckOption = False,
    max_age_hours: MaxAgeOption = 26.0,
) -> None:
    """Show each workspace of a warehouse as its operator needs it: last run and last success,
    how recent its data is, its cursors' lag, requests and 429s against the service's limits,
    failed and stopped runs of the last days with their reasons, cursors and rows. `--check`
    exits 1 naming the workspaces not loaded within `--max-age-hours`, and tells `[alerts] urls`
    of each workspace whose health changed since the last check."""
    if output_format not in ("table", "json"):
        raise fail("--format must be table or json")
    warehouse = warehouse_named(duckdb, destination)
    try:
        found = read_status(warehouse)
    except SigningEtlError as error:
        raise fail(str(error)) from None
    except Exception as error:  # a locked or foreign file: say so in one line
        raise fail(f"cannot read {duckdb}: {printable(str(error))}") from None
    if found.running_line:
        output.info(found.running_line)
    if check:
        max_age, configured = timedelta(hours=max_age_hours), _configured_names()
        stale = stale_workspaces(found, max_age, configured)
        for line in stale:
            output.error(line)
        announce(warehouse, healths(found, max_age, configured, datetime.now(UTC)))
        raise typer.Exit(1 if stale else 0)
    if output_format == "json":
        print_document(found)
    else:
        print_status(found, duckdb)


def _configured_names() -> list[str]:
    """The configured workspaces' names, or none when the configuration is incomplete (a
    check of the warehouse alone still runs)."""
    try:
        return [entry.name for entry in configured_workspaces()]
    except SigningEtlError:
        return []
