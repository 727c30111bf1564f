"""Rows as the CLI prints them (`sql`, `metrics`): a table for people, CSV or JSON lines for
programs, on the one stdout console every command prints to."""

from __future__ import annotations

import csv
import json
import math
import sys
from decimal import Decimal
from typing import Any

from pipelines.console import output
from pipelines.console.output import PlainTable

out = output.stdout_console()


def print_at_most(
    names: list[str], rows: list[tuple[Any, ...]], limit: int, output_format: str
) -> None:
    """The first `limit` rows (`print_rows`), and a warning when there were more (the caller
    asks for `limit + 1` to know)."""
    print_rows(names, rows[:limit], output_format)
    if len(rows) > limit:
        output.warning(f"the result has more than {limit:,} rows; the first {limit:,} are shown")


def print_rows(names: list[str], rows: list[tuple[Any, ...]], output_format: str) -> None:
    """Rows as a table, as CSV (with a header), or as JSON lines, on stdout. CSV keeps every
    value as it is for a program or a file, but a terminal is shown control characters as their
    escapes (`output.printable`), as in a table: a value cannot move the cursor or recolour the
    screen. JSON escapes them itself."""
    if output_format == "csv":
        shown = _csv_value if sys.stdout.isatty() else _as_is
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(map(shown, names))
        writer.writerows([shown("" if v is None else v) for v in row] for row in rows)
    elif output_format == "json":
        for row in rows:
            values = map(_json_value, row)
            sys.stdout.write(json.dumps(dict(zip(names, values, strict=True)), default=str) + "\n")
    else:
        table = PlainTable(*names)
        for row in rows:
            table.add_row(*map(for_display, row))
        out.print(table)


def _json_value(value: Any) -> Any:
    """NaN and the infinities as null: JSON has no such number (Python's `NaN` breaks a strict
    parser)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _csv_value(value: Any) -> Any:
    return output.printable(value) if isinstance(value, str) else value


def _as_is(value: Any) -> Any:
    return value


def for_display(value: Any) -> Any:
    """A number as a person reads it in a table: a fraction rounded (2 places from 1 up, else 4
    significant digits), whole numbers and everything else as they are. CSV and JSON keep the
    full precision."""
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return value
    if isinstance(value, float | Decimal) and math.isfinite(value):
        number = float(value)
        return f"{number:.2f}" if abs(number) >= 1 else f"{number:.4g}"
    return value
