"""Destinations by name: one line for a name dlt does not know, before any command reaches
dlt's own traceback."""

from __future__ import annotations

from dlt.common.destination import Destination

from pipelines.errors import WarehousePathError


class UnknownDestination(WarehousePathError):
    """`--destination` names none dlt knows: a value of the wrong kind."""

    exit_code = 2


def known_destination(name: str) -> None:
    """Nothing when dlt knows destination `name`; else one line (a typo of `postgres`, say).

    Raises:
        UnknownDestination: dlt has no destination of that name (or its module fails to
            import).
    """
    try:
        Destination.from_reference(name)
    except Exception:  # dlt's UnknownDestinationModule, or a module that fails to import
        raise UnknownDestination(
            f"no dlt destination is named {name!r}: give one dlt knows to --destination "
            "(postgres, say), configured as dlt configures it"
        ) from None
