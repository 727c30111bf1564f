"""Which resources a load takes: the source's own names, and the ones that travel together."""

from __future__ import annotations

from collections.abc import Sequence

from .columns import TABLES
from .errors import SourceConfigError
from .settings import LIST_ENDPOINTS, RESOURCES, SHIPMENT_RESOURCES

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


# What `load --reload` reads: the lists with a change time, and the shipments' children.
RELOADED_RESOURCES = tuple(
    name for name in RESOURCES if name in LIST_ENDPOINTS or name in SHIPMENT_RESOURCES
)


def reloaded_resources(chosen: Sequence[str] | None) -> list[str]:
    """The resources a reload of a window reads: the lists (the shipments with their
    children), or those of `chosen`; a one-line error when `chosen` names none of them."""
    names = [name for name in chosen or RESOURCES if name in RELOADED_RESOURCES]
    if not names:
        raise SourceConfigError(
            f"--reload reads the lists only; choose from {', '.join(RELOADED_RESOURCES)}"
        )
    return chosen_resources(names)
