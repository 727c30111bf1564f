"""Which resources a load takes: the source's own names, and the ones that travel together."""

from __future__ import annotations

from collections.abc import Sequence

from .columns import TABLES
from .errors import SourceConfigError
from .settings import RESOURCES, SHIPMENT_RESOURCES

# Every raw table the source writes (nested tables included), from the one list of columns.
SOURCE_TABLES = tuple(TABLES)


def chosen_resources(names: Sequence[str]) -> list[str]:
    """The chosen resources, with the shipment resources completed (one list pass feeds all
    three), or a one-line error naming the unknown ones, before anything is asked of the
    service."""
    unknown = sorted(set(names) - set(RESOURCES))
    if unknown:
        raise SourceConfigError(
            f"unknown resources {', '.join(unknown)}; choose from {', '.join(RESOURCES)}"
        )
    chosen = list(dict.fromkeys(names))
    if set(chosen) & set(SHIPMENT_RESOURCES):
        chosen += [name for name in SHIPMENT_RESOURCES if name not in chosen]
    return chosen
