"""`signing-etl metrics`: the funnel metrics by name, grouped by dimensions by name, printed as
a table, CSV or JSON lines like `sql`; a name the semantic layer does not define is refused in
one line (exit 2)."""

from __future__ import annotations

from datetime import date
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


def metrics_command(
    metrics: Annotated[
        str,
        typer.Option(
            "--metrics",
            help="Comma-separated metrics: sent, delivered, opened, signed, completed, expired, "
            "revoked, completion_rate, median_hours_to_sign, waiting_now, signers_waiting_now.",
        ),
    ],
    group_by: Annotated[
        str,
        typer.Option(
            "--group-by",
            help="Comma-separated dimensions, e.g. metric_time__week,workspace "
            "(also workspace__workspace_name, shipment__document_name, "
            "shipment__signature_level); none: one row of totals.",
        ),
    ] = "",
    start: Annotated[
        str | None, typer.Option(help="First day of the period (YYYY-MM-DD, UTC), included.")
    ] = None,
    end: Annotated[
        str | None, typer.Option(help="Last day of the period (YYYY-MM-DD, UTC), included.")
    ] = None,
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    output_format: RowsFormat = "table",
    limit: RowLimit = 1000,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
) -> None:
    """Compute the funnel metrics (defined once, in the dbt project's semantic layer)."""
    if output_format not in ROW_FORMATS:
        raise fail("--format must be table, csv or json", 2)
    warehouse = warehouse_named(duckdb, destination)
    # MetricFlow costs seconds to import: only when metrics are asked for.
    from pipelines.metrics.semantic import MetricsRequest, query_metrics

    request = MetricsRequest(
        metrics=_names(metrics),
        group_by=_names(group_by),
        start=_day(start, "--start"),
        end=_day(end, "--end"),
    )
    try:
        table = query_metrics(warehouse, request, most=limit + 1)
    except SigningEtlError as error:
        raise fail(str(error), error.exit_code) from None
    except Exception as error:  # the database's own message, in one line
        raise fail(failure_reason(error)) from None
    print_at_most(table.names, table.rows, limit, output_format)


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _day(text: str | None, option: str) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise fail(f"{option} must be a day, YYYY-MM-DD", 2) from None
