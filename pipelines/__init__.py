"""The pipelines that load the signing service into a warehouse, and the `signing-etl` CLI.

Folders by concern, in layer order (each imports only those listed before it):
`warehouse/` (where the data lives), `console/` (how the CLI speaks), `raw/` (what every load
keeps beside the rows), `modeling/` (dbt), `privacy/` (the policy, its changes, erasure),
`webhooks/` (the receiver and its drains), `status/` (reading the warehouse's state),
`load/` (one run, and the configured workspaces in turn or side by side), `metrics/` (the
semantic layer's metrics), `report/` (the notebook and its page). Beside them: `errors`,
`outcome`, `configuration`, `environment`, `query` (`sql`), `demo`, `sandbox_cli`, and `cli`,
which only registers the commands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's `__getattr__` that imports a public name's module on first use, for faces
    whose modules are slow to import (dbt, the notebook machinery) and that every command
    would otherwise pay for at start-up."""

    def attribute(name: str) -> Any:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{modules[name]}"), name)

    return attribute
