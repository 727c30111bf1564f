"""The resource the Dagster assets share: the warehouse both dlt and dbt write."""

import os
from contextlib import AbstractContextManager
from pathlib import Path

import dagster as dg

from pipelines.warehouse import DEFAULT_WAREHOUSE, WAREHOUSE_VARIABLE, DbtTarget, Warehouse

WAREHOUSE_POOL = "signing_warehouse"  # DuckDB takes one writer: loads and dbt builds take turns


class SigningWarehouse(dg.ConfigurableResource["SigningWarehouse"]):
    """The DuckDB file both sides write: dlt's `raw` tables, dbt's `staging` and `marts`.

    Defaults to `SIGNING_WAREHOUSE` (the variable the dbt profile reads), else the CLI's
    `warehouse/signing.duckdb` relative to the folder Dagster runs in.
    """

    path: str | None = None

    @property
    def warehouse(self) -> Warehouse:
        chosen = self.path or os.environ.get(WAREHOUSE_VARIABLE) or DEFAULT_WAREHOUSE
        return Warehouse.at(Path(chosen).expanduser().resolve())

    def for_dbt(self) -> AbstractContextManager[DbtTarget]:
        """dbt's target environment (`SIGNING_WAREHOUSE` for the file) while dbt runs."""
        return self.warehouse.for_dbt()
