"""The resource the Dagster assets share (the warehouse both dlt and dbt write), and what follows
from where it is: the pools the assets take and the executor that runs their steps."""

import os
from contextlib import AbstractContextManager
from pathlib import Path

import dagster as dg
from dagster_celery import celery_executor

from pipelines.warehouse import (
    DEFAULT_DESTINATION,
    DEFAULT_WAREHOUSE,
    WAREHOUSE_VARIABLE,
    DbtTarget,
    Warehouse,
)

WAREHOUSE_POOL = "signing_warehouse"  # one writer at a time on a DuckDB file; one dbt build
DESTINATION_VARIABLE = "SIGNING_DESTINATION"  # the dlt destination, as `load --destination`
# The Celery broker, also its result backend (`redis://host:6379/0`), named by variable so that
# a password in it stays out of Dagster's run config; with one, on a shared destination, steps
# run on the Celery workers (docs/orchestration.md, "Many workers").
BROKER_VARIABLE = "SIGNING_CELERY_BROKER"


class SigningWarehouse(dg.ConfigurableResource["SigningWarehouse"]):
    """The warehouse both sides write: dlt's `raw` tables, dbt's `staging` and `marts`.

    `destination` defaults to `SIGNING_DESTINATION`, else DuckDB; `path` (the DuckDB file, or
    where a database's local working folders live) to `SIGNING_WAREHOUSE` (the variable the
    dbt profile reads), else the CLI's `warehouse/signing.duckdb` relative to the folder
    Dagster runs in.
    """

    path: str | None = None
    destination: str | None = None

    @property
    def warehouse(self) -> Warehouse:
        chosen = self.path or os.environ.get(WAREHOUSE_VARIABLE) or DEFAULT_WAREHOUSE
        return Warehouse.at(Path(chosen).expanduser().resolve(), chosen_destination(self))

    def for_dbt(self) -> AbstractContextManager[DbtTarget]:
        """dbt's target environment (`SIGNING_WAREHOUSE` for the file) while dbt runs."""
        return self.warehouse.for_dbt()


def chosen_destination(resource: SigningWarehouse | None = None) -> str:
    """The resource's destination, else `SIGNING_DESTINATION`, else DuckDB."""
    named = resource.destination if resource is not None else None
    return named or os.environ.get(DESTINATION_VARIABLE) or DEFAULT_DESTINATION


def load_pool(warehouse: Warehouse) -> str | None:
    """The pool a partition's load takes: a DuckDB file's one writer, shared with the dbt
    build; none on a database that takes concurrent writers, where loads of different
    workspaces run side by side (one run per workspace: `dagster.yaml`'s partition limit)."""
    return WAREHOUSE_POOL if warehouse.is_file else None


def executor_for(warehouse: Warehouse) -> dg.ExecutorDefinition:
    """In one process for a DuckDB file, which lives on this machine and takes one writer (a
    run's steps follow one another anyway, and each step in a process of its own would import
    dagster, dlt and dbt again: 20 s of a 65 s run). On a shared database with a Celery broker
    configured, steps run on whichever Celery worker takes them first."""
    if warehouse.is_file or not os.environ.get(BROKER_VARIABLE):
        return dg.in_process_executor
    # The workers' `celery.yaml` names the same two: a worker that stores results elsewhere
    # (dagster-celery's default backend is `rpc://`) leaves the run waiting for ever.
    return celery_executor.configured(
        {"broker": {"env": BROKER_VARIABLE}, "backend": {"env": BROKER_VARIABLE}}, name="celery"
    )
