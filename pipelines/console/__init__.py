"""How the CLI speaks: `output` (the consoles and log lines, nothing read as markup, control
characters escaped), `progress` (the live line of a run), `tables` (rows as a table, CSV or
JSON), `options` (the options commands share, defined once) and `commands` (a failure as one
line, the warehouse the options name)."""

from __future__ import annotations

from .commands import fail, warehouse_named
from .output import PlainTable, printable
from .progress import Progress
from .tables import out, print_rows

__all__ = ["PlainTable", "Progress", "fail", "out", "print_rows", "printable", "warehouse_named"]
