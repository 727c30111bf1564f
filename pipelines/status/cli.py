"""`signing-etl status`: each workspace of a warehouse as its operator needs it, as tables, as
one JSON document for a monitor, or as a freshness check that exits 1."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from pipelines.configuration import configured_workspaces
from pipelines.console import output
from pipelines.console.commands import fail, warehouse_named, warehouse_run_errors
from pipelines.console.options import (
    CheckOption,
    MaxAgeOption,
    StatusFormat,
    WarehouseDestination,
    WarehouseFile,
)
from pipelines.console.output import printable
from pipelines.errors import SigningEtlError, failure_reason
from pipelines.raw.retired import retire_workspace
from pipelines.status.alerts import announce
from pipelines.status.display import print_document, print_status
from pipelines.status.health import Health, healths
from pipelines.status.read import Status, read_status
from pipelines.warehouse import DEFAULT_DESTINATION, DEFAULT_WAREHOUSE, Warehouse


def status_command(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
    output_format: StatusFormat = "table",
    check: CheckOption = False,
    max_age_hours: MaxAgeOption = 26.0,
    retire: Annotated[
        str | None,
        typer.Option(
            "--retire",
            metavar="NAME",
            help="Leave a workspace taken out of the configuration out of status and --check "
            "(its rows stay; a later run of it brings it back).",
        ),
    ] = None,
) -> None:
    """Show each workspace of a warehouse as its operator needs it: last run and last success,
    how recent its data is, its cursors' lag, requests and 429s against the service's limits,
    failed and stopped runs of the last days with their reasons, cursors and rows. `--check`
    exits 1 naming each workspace not loaded within `--max-age-hours`, whose last run failed,
    or whose marts lag because the last model build failed, and tells `[alerts] urls` of each
    workspace whose health changed since the last check."""
    if output_format not in ("table", "json"):
        raise fail("--format must be table or json", 2)
    warehouse = warehouse_named(duckdb, destination)
    try:
        found = read_status(warehouse)
    except SigningEtlError as error:
        raise fail(str(error)) from None
    except Exception as error:  # a locked or foreign file: say so in one line
        raise fail(f"cannot read {warehouse.label}: {printable(failure_reason(error))}") from None
    if retire is not None:
        _retire(warehouse, found, retire)
        return
    if found.running_line:
        output.info(found.running_line)
    max_age = timedelta(hours=max_age_hours)
    if check:
        current = healths(found, max_age, _configured_names(), datetime.now(UTC))
        unwell = [each for each in current.values() if each.health is not Health.OK]
        for each in unwell:
            output.error(each.line)
        announce(warehouse, current)
        raise typer.Exit(1 if unwell else 0)
    if output_format == "json":
        print_document(found, max_age)
    else:
        print_status(found, duckdb)


def _retire(warehouse: Warehouse, found: Status, name: str) -> None:
    """Retire the workspace `status` calls `name` (its configured name, or its id), unless
    the configuration still names it: then the next run would only bring it back."""
    if name in _configured_names():
        raise fail(
            f"workspace {name!r} is still configured: take it out of the configuration "
            "(.dlt/secrets.toml or the environment) first, then retire it"
        )
    chosen = next((w for w in found.workspaces if name in (w.label, w.workspace_id)), None)
    if chosen is None:
        raise fail(f"no workspace {name!r} in this warehouse's status (status names them)")
    with warehouse_run_errors("status --retire: "):
        retire_workspace(warehouse, chosen.workspace_id, datetime.now(UTC))
    output.info(
        f"workspace {chosen.label} retired: status and --check leave it out; its rows stay, "
        "and a later run of it brings it back"
    )


def _configured_names() -> list[str]:
    """The configured workspaces' names, or none when the configuration is incomplete (a
    check of the warehouse alone still runs)."""
    try:
        return [entry.name for entry in configured_workspaces()]
    except SigningEtlError:
        return []
