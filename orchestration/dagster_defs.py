"""Dagster definitions: the raw tables as dlt assets, one partition per configured workspace,
feeding the dbt models' staging views and marts (`dagster dev -m orchestration.dagster_defs`).

A partition is one workspace entry of dlt's configuration (`[sources.signing.workspaces.<name>]`,
or the single key as `default`). Its run loads that workspace as `signing-etl load --workspace
<name>` does, through the same function (the warehouse's lock, the workspace's own state, the
run record, the list of shipments still loading), then rebuilds the models, which cover every
workspace. Keys and URLs are read from dlt's configuration when a run starts; nothing secret is
in these modules or in Dagster's run config. The layers are modules of their own:
`orchestration.ingestion` (raw assets, checks), `orchestration.modeling` (dbt assets) and
`orchestration.resources` (the warehouse); this one only assembles them.
"""

from collections.abc import Sequence
from pathlib import Path

import dagster as dg
from dagster_dbt import DbtCliResource
from dagster_dlt import DagsterDltResource

from orchestration.ingestion import raw_assets, raw_freshness
from orchestration.modeling import dbt_executable, dbt_project, model_assets, prepare
from orchestration.resources import SigningWarehouse, executor_for, load_pool
from pipelines.configuration import configured_workspaces
from sources.signing import RESOURCES

WORKSPACE_TAG = "signing/workspace"
DAILY_CRON = "15 2 * * *"  # as the README's cron line
FRESHNESS_CRON = "0 * * * *"


def build_definitions(
    workspaces: Sequence[str] | None = None,
    warehouse: Path | None = None,
    destination: str | None = None,
) -> dg.Definitions:
    """The Definitions: raw assets partitioned by `workspaces` (default: the names configured
    in dlt's configuration now), the models, the daily job and its schedule, the freshness
    checks and their hourly schedule, and the resources writing to `warehouse` (default:
    `SIGNING_WAREHOUSE`, else `warehouse/signing.duckdb`) on `destination` (default:
    `SIGNING_DESTINATION`, else DuckDB). The loads' pool and the executor follow the
    destination (`orchestration.resources`)."""
    names = (
        list(workspaces)
        if workspaces is not None
        else [entry.name for entry in configured_workspaces()]
    )
    partitions = dg.StaticPartitionsDefinition(names)
    project = dbt_project()
    prepare(project)
    warehouse_resource = SigningWarehouse(
        path=str(warehouse) if warehouse is not None else None, destination=destination
    )
    chosen = warehouse_resource.warehouse
    raw = raw_assets(partitions, load_pool(chosen))
    models = model_assets(project)
    freshness = raw_freshness([key for key in raw.keys if key.path[-1] in RESOURCES], partitions)
    daily = dg.define_asset_job(
        "signing_daily",
        selection=dg.AssetSelection.assets(raw, models) - dg.AssetSelection.checks(freshness),
        description="Load one workspace (the partition), then rebuild the models.",
    )
    fresh_job = dg.define_asset_job(
        "signing_freshness", selection=dg.AssetSelection.checks(freshness)
    )
    return dg.Definitions(
        executor=executor_for(chosen),
        assets=[raw, models],
        asset_checks=[freshness],
        jobs=[daily, fresh_job],
        schedules=[
            daily_schedule(daily.name, partitions),
            dg.ScheduleDefinition(job=fresh_job, cron_schedule=FRESHNESS_CRON),
        ],
        resources={
            "signing_warehouse": warehouse_resource,
            "dlt": DagsterDltResource(),
            "dbt": DbtCliResource(project_dir=project, dbt_executable=dbt_executable()),
        },
    )


def daily_schedule(
    job_name: str, partitions: dg.PartitionsDefinition[str]
) -> dg.ScheduleDefinition:
    """Every configured workspace each night (`DAILY_CRON`, UTC), one run each."""

    @dg.schedule(
        job_name=job_name,
        cron_schedule=DAILY_CRON,
        execution_timezone="UTC",
        description="Every configured workspace each night, one run each.",
    )
    def signing_daily_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        day = context.scheduled_execution_time.date().isoformat()
        return [
            dg.RunRequest(run_key=f"{name}:{day}", partition_key=name, tags={WORKSPACE_TAG: name})
            for name in partitions.get_partition_keys()
        ]

    return signing_daily_schedule


@dg.definitions
def defs() -> dg.Definitions:
    """What `dagster dev -m orchestration.dagster_defs` loads: the configured workspaces."""
    return build_definitions()
