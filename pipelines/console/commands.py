"""What every command module of the CLI shares: a failure as one line and an exit code, and the
warehouse its options name. Kept apart from `cli.py` so that command modules need not import
the app that registers them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer

from pipelines.console import output
from pipelines.errors import AlreadyRunning, SigningEtlError, WarehouseError
from pipelines.warehouse import DEFAULT_DESTINATION, Warehouse


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print a one-line reason on stderr and leave with `code`."""
    output.error(message)
    return typer.Exit(code)


def warehouse_named(path: Path, destination: str = DEFAULT_DESTINATION) -> Warehouse:
    """The warehouse the options name, or a one-line failure."""
    try:
        return Warehouse.at(path, destination)
    except SigningEtlError as error:
        raise fail(str(error), error.exit_code) from None


@contextlib.contextmanager
def warehouse_run_errors(prefix: str = "") -> Iterator[None]:
    """What holding a warehouse for a run can end with, in one line: another run held it for
    longer than this one waits (a stop, exit 75, naming the holder, so that the scheduler tries
    again later), or it cannot be used or published (a failure, after `prefix`)."""
    try:
        yield
    except AlreadyRunning as error:
        output.warning(f"stopped: {error}", exit_code=error.exit_code)
        raise typer.Exit(error.exit_code) from None
    except WarehouseError as error:
        raise fail(f"{prefix}{error}") from None
