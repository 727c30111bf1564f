"""What every command module of the CLI shares: a failure as one line and an exit code, the
warehouse its options name, and the models built with their outcome said. Kept apart from
`cli.py` so that command modules (`forget`, `webhooks`) need not import the app that imports
them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from pipelines import output
from pipelines.errors import SigningEtlError
from pipelines.warehouse import DEFAULT_DESTINATION, Warehouse

if TYPE_CHECKING:
    from pipelines.models import ModelsResult


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print a one-line reason on stderr and leave with `code`."""
    output.error(message)
    return typer.Exit(code)


def warehouse_named(path: Path, destination: str = DEFAULT_DESTINATION) -> Warehouse:
    """The warehouse the options name, or a one-line failure."""
    try:
        return Warehouse.at(path, destination)
    except SigningEtlError as error:
        raise fail(str(error)) from None


def build_models_or_fail(warehouse: Warehouse, select: str | None = None) -> ModelsResult:
    """Run dbt on the warehouse (its dbt target follows the destination); a failure is one line
    on stderr and exit 1, and the raw data stays as loaded."""
    from pipelines.models import build_models  # dbt's imports cost seconds: only when building

    try:
        warehouse.check_for_models()
        output.info("Building the models (dbt)…")
        result = build_models(warehouse, select=select)
    except SigningEtlError as error:
        raise fail(f"models: {error}") from None
    if not result.success:
        raise fail(f"models failed (raw data is loaded and kept): {result.summary}")
    output.info(result.summary)
    return result
