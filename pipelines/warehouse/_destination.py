"""Destinations by name: one line for a name dlt does not know, before any command reaches
dlt's own traceback."""

from __future__ import annotations

from dlt.common.destination import Destination

from pipelines.errors import WarehousePathError


def known_destination(name: str) -> None:
    """Nothing when dlt knows destination `name`; else one line (a typo of `postgres`, say).

    Raises:
        WarehousePathError: dlt has no destination of that name (or its module fails to
            import).
    """
    try:
        Destination.from_reference(name)
    except Exception:  # dlt's UnknownDestinationModule, or a module that fails to import
        raise WarehousePathError(
            f"no dlt destination is named {name!r}: give one dlt knows to --destination "
            "(postgres, say), configured as dlt configures it"
        ) from None
