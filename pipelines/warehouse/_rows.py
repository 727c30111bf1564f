"""Many rows or ids in statements of a bounded size: one statement per row is slow on a remote
database, and one statement for all of them can outgrow what a driver or a server takes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

Item = TypeVar("Item")

INSERT_BATCH = 500  # rows per INSERT unless the caller says otherwise


def batches(items: Sequence[Item], size: int) -> Iterator[list[Item]]:
    """`items` in consecutive lists of at most `size`."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def insert_rows(
    client: Any,
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    batch: int = INSERT_BATCH,
) -> None:
    """Insert `rows` (each a value per column) into `table`, a qualified name, `batch` rows to
    a statement (`insert ... values (%s, %s), (%s, %s)`), every value bound as a parameter."""
    names = ", ".join(columns)
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    for chunk in batches(rows, batch):
        values = [value for row in chunk for value in row]
        client.execute_sql(
            f"insert into {table} ({names}) values {', '.join([one] * len(chunk))}", *values
        )
