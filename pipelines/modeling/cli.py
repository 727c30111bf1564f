"""`signing-etl models`: rebuild the dbt models of a warehouse, said in one line; and the same
build as every command that changes rows ends with it (`load`, `forget`, the demo)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from pipelines.console import output
from pipelines.console.commands import fail, warehouse_named, warehouse_run_errors
from pipelines.console.options import WarehouseDestination, WarehouseFile
from pipelines.errors import SigningEtlError
from pipelines.warehouse import DEFAULT_DESTINATION, DEFAULT_WAREHOUSE, Warehouse

if TYPE_CHECKING:
    from pipelines.modeling.build import ModelsResult


def models_command(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    select: Annotated[str | None, typer.Option(help="dbt selection, e.g. marts.")] = None,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
    unit_tests: Annotated[
        bool,
        typer.Option(
            "--unit-tests",
            help="Also run the models' unit tests (their SQL on fixed inputs): after changing a "
            "model. Loads skip them.",
        ),
    ] = False,
) -> None:
    """Rebuild the dbt models (staging views, marts tables) on the loaded raw data."""
    build_models_or_fail(warehouse_named(duckdb, destination), select, unit_tests=unit_tests)


def build_models_or_fail(
    warehouse: Warehouse, select: str | None = None, *, unit_tests: bool = False
) -> ModelsResult:
    """Run dbt on the warehouse (its dbt target follows the destination); a failure is one line
    on stderr and exit 1, and the raw data stays as loaded (and, on a DuckDB file, unpublished:
    analysts keep the last consistent copy)."""
    from pipelines.modeling.build import (
        build_models,  # dbt's imports cost seconds: only when building
    )

    # One run: published only when the build succeeded (an outer run, a load's, publishes).
    with warehouse_run_errors("models: "), warehouse.publishing():
        try:  # a warehouse dbt cannot use is refused, and on record, by `recorded_build`
            result = build_models(
                warehouse,
                select=select,
                unit_tests=unit_tests,
                on_start=lambda: output.info("Building the models (dbt)…"),
            )
        except SigningEtlError as error:
            raise fail(f"models: {error}") from None
        if not result.success:
            raise fail(f"models failed (raw data is loaded and kept): {result.summary}")
    output.info(result.summary)
    if select and result.nodes == 0:  # dbt itself only says it has nothing to do
        raise fail(
            f"--select {select!r} matches no model, snapshot or test of the project (unit "
            "tests run with --unit-tests)",
            2,
        )
    return result
