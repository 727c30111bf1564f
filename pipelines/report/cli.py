"""`signing-etl report`: run the funnel notebook on a warehouse's marts and write the HTML page;
a failure is one line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipelines.console import output
from pipelines.console.commands import fail, warehouse_named
from pipelines.console.options import WarehouseDestination, WarehouseFile
from pipelines.console.tables import out
from pipelines.errors import SigningEtlError
from pipelines.warehouse import DEFAULT_DESTINATION, DEFAULT_WAREHOUSE, Warehouse


def report_command(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Folder of the HTML report (created if missing).")
    ] = Path("reports"),
    workspace: Annotated[
        str | None,
        typer.Option(
            "--workspace",
            help="Report on one workspace: its configured name, its id, or its name at the "
            "service. Default: every workspace, each apart.",
        ),
    ] = None,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
) -> None:
    """Run the funnel notebook on the warehouse's marts and write a self-contained HTML report."""
    path = write_report_or_fail(warehouse_named(duckdb, destination), out_dir, workspace)
    out.print(path.resolve(), highlight=False, soft_wrap=True)


def write_report_or_fail(
    warehouse: Warehouse, out_dir: Path | None = None, workspace: str | None = None
) -> Path:
    """Write the report (to `reports/` by default); a failure is one line on stderr, exit 1."""
    # Imported here: the notebook machinery takes half a second that other commands don't need.
    from pipelines.report.notebook import DEFAULT_REPORTS_DIR, write_report

    output.info("Writing the report (runs notebooks/signing_funnel.ipynb)…")
    try:
        return write_report(warehouse, out_dir or DEFAULT_REPORTS_DIR, workspace)
    except SigningEtlError as error:
        raise fail(f"report: {error}") from None
