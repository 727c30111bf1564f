"""Dagster definitions: the raw tables as dlt assets, one partition per configured workspace,
feeding the dbt models' staging views and marts (`dagster dev -m orchestration.dagster_defs`).

A partition is one workspace entry of dlt's configuration (`[sources.signing.workspaces.<name>]`,
or the single key as `default`). Its run loads that workspace as `signing-etl load --workspace
<name>` does, through the same function (`load_incremental`: the warehouse's lock, the
workspace's own state, the run record, the list of shipments still loading), then rebuilds the
models, which cover every workspace. Keys and URLs are read from dlt's configuration when a run
starts; nothing secret is in this module or in Dagster's run config.

How a load ends, in Dagster:

- done (CLI exit 0): every raw asset is materialized and its `load_completed` check passes;
- stopped on purpose (exit 75: daily limit, request budget, an over-long Retry-After): the run
  succeeds, what was fetched is materialized, the run is tagged `signing/outcome=stopped` and
  each raw asset's `load_completed` check warns with the reason; the marts are rebuilt from
  what was loaded (they stay consistent after a stop) and the next run continues;
- failed (exit 1) or interrupted (130/143): the step fails with the CLI's one-line reason, the
  run is tagged `signing/outcome=failed`, and the models wait for a later run.
"""

import os
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import dagster as dg
from dagster_dbt import (
    DagsterDbtTranslator,
    DagsterDbtTranslatorSettings,
    DbtCliResource,
    DbtProject,
    dbt_assets,
)
from dagster_dlt import DagsterDltResource, DagsterDltTranslator, build_dlt_asset_specs
from dagster_dlt.constants import META_KEY_PIPELINE, META_KEY_SOURCE, META_KEY_TRANSLATOR
from dagster_dlt.translator import DltResourceTranslatorData
from dlt import Pipeline
from dlt.common.schema import Schema
from dlt.extract.resource import DltResource
from dlt.extract.source import DltSource

import sources.signing as signing
from pipelines.models import PROJECT_DIR, WAREHOUSE_VARIABLE, dbt_dir_for, environment_set
from pipelines.signing_pipeline import DEFAULT_WAREHOUSE, RESOURCES, LoadResult
from pipelines.workspaces import (
    WorkspaceEntry,
    WorkspaceLoad,
    choose,
    configured_workspaces,
    load_workspace,
)

# The dlt source's name and the dbt source's: the raw assets are `signing/<table>`.
SOURCE = "signing"
RAW_GROUP = "raw"
# Tables every load writes besides the resources' own: dlt's load log, which every staging model
# reads (rows of completed loads only), and the shipments whose children are still loading.
BOOKKEEPING_TABLES = {
    "_dlt_loads": "dlt's load log: one row per load package; staging reads completed loads only.",
    "_signing_incomplete_shipments": (
        "Shipments whose audit trail or fields a stopped run left pending; the marts hold them "
        "back until a later run has loaded them."
    ),
}
WAREHOUSE_POOL = "signing_warehouse"  # DuckDB takes one writer: loads and dbt builds take turns
OUTCOME_TAG = "signing/outcome"
WORKSPACE_TAG = "signing/workspace"
LOAD_COMPLETED = "load_completed"
FRESH = "fresh"
DAILY_CRON = "15 2 * * *"  # as the README's cron line
FRESH_HOURS = 26  # a daily load, with room for a slow night
FRESHNESS_CRON = "0 * * * *"


# ---------------------------------------------------------------------- the warehouse


class SigningWarehouse(dg.ConfigurableResource["SigningWarehouse"]):
    """The DuckDB file both sides write: dlt's `raw` tables, dbt's `staging` and `marts`.

    Defaults to `SIGNING_WAREHOUSE` (the variable the dbt profile reads), else the CLI's
    `warehouse/signing.duckdb` relative to the folder Dagster runs in.
    """

    path: str | None = None

    @property
    def file(self) -> Path:
        chosen = self.path or os.environ.get(WAREHOUSE_VARIABLE) or DEFAULT_WAREHOUSE
        return Path(chosen).expanduser().resolve()

    def for_dbt(self) -> AbstractContextManager[None]:
        """`SIGNING_WAREHOUSE` set to this file while dbt runs (its profile reads it)."""
        return environment_set({WAREHOUSE_VARIABLE: str(self.file)})


# ---------------------------------------------------------------------- the raw tables (dlt)


def raw_key(table: str) -> dg.AssetKey:
    """The asset of a raw table: `signing/<table>`, which is also the dbt source's own key."""
    return dg.AssetKey([SOURCE, table])


class SigningDltTranslator(DagsterDltTranslator):
    """dagster-dlt's asset of each resource, keyed as dbt names its source tables, in group
    `raw`, with no upstream (the service is not an asset here)."""

    def get_asset_spec(self, data: DltResourceTranslatorData) -> dg.AssetSpec:
        spec = super().get_asset_spec(data)
        return spec.replace_attributes(
            key=raw_key(data.resource.name), deps=[], group_name=RAW_GROUP, kinds={"dlt", "duckdb"}
        )


def resource_shapes() -> DltSource:
    """The signing source's resources as the pipeline loads them (`RESOURCES`), unbound: enough
    for dagster-dlt to name and describe the assets without the `/me` request that building
    `signing_source` makes, so definitions load without a key or a reachable service."""
    resources = [getattr(signing, name) for name in RESOURCES]
    return DltSource(Schema(SOURCE), SOURCE, resources)


def raw_specs() -> list[dg.AssetSpec]:
    """One asset per dlt resource (built by dagster-dlt), then the bookkeeping tables."""
    from_dlt = [
        spec.replace_attributes(
            metadata={
                k: v
                for k, v in spec.metadata.items()
                if k not in (META_KEY_SOURCE, META_KEY_PIPELINE, META_KEY_TRANSLATOR)
            }
        )
        # No pipeline: each partition has its own (named after the workspace id its key's `/me`
        # answers with), and dagster-dlt would read only its destination.
        for spec in build_dlt_asset_specs(
            resource_shapes(), cast(Any, None), dagster_dlt_translator=SigningDltTranslator()
        )
    ]
    bookkeeping = [
        dg.AssetSpec(raw_key(table), description=text, group_name=RAW_GROUP, kinds={"duckdb"})
        for table, text in BOOKKEEPING_TABLES.items()
    ]
    # A load stopped at its first request writes nothing: then no asset is materialized.
    return [spec.replace_attributes(skippable=True) for spec in from_dlt + bookkeeping]


def workspace_entry(name: str) -> WorkspaceEntry:
    """The configured workspace a partition names, read from dlt's configuration now."""
    (entry,) = choose(configured_workspaces(), [name])
    return entry


def _tables_of(spec: dg.AssetSpec, rows: Mapping[str, int]) -> dict[str, int]:
    """Rows loaded per table of one asset: the resource's table and its nested tables."""
    table = spec.key.path[-1]
    return {t: n for t, n in sorted(rows.items()) if t == table or t.startswith(f"{table}__")}


def _materialization_metadata(
    context: dg.AssetExecutionContext,
    dlt: DagsterDltResource,
    spec: dg.AssetSpec,
    resource: DltResource | None,
    outcome: WorkspaceLoad,
    result: LoadResult,
) -> dict[str, Any]:
    """dagster-dlt's account of a resource's load (columns, jobs), then the run's own: its
    outcome, rows per table, requests per endpoint."""
    table = spec.key.path[-1]
    metadata: dict[str, Any] = {}
    if resource is not None and result.load_info is not None:
        pipeline = cast(Pipeline, result.load_info.pipeline)
        metadata.update(
            dlt.extract_resource_metadata(context, resource, result.load_info, pipeline)
        )
    tables = _tables_of(spec, result.rows)
    metadata.update(
        {
            "outcome": outcome.kind,
            "workspace_id": result.workspace_id or "",
            "rows_loaded": dg.MetadataValue.int(sum(tables.values())),
            "rows_by_table": dg.MetadataValue.json(tables),
            "requests_by_endpoint": dg.MetadataValue.json(dict(result.stats.by_endpoint)),
            "dagster/table_name": f"raw.{table}",
        }
    )
    if outcome.reason:
        metadata["stop_reason"] = outcome.reason
    return metadata


def raw_assets(partitions: dg.PartitionsDefinition[str]) -> dg.AssetsDefinition:
    """The raw tables, loaded together one workspace (partition) at a time.

    Not subsettable: the shipment tables come from one pass over the list, and a partial load
    would move cursors past changes whose children were never fetched.
    """
    specs = raw_specs()
    checked = [spec.key for spec in specs if spec.key.path[-1] in RESOURCES]
    check_specs = [
        dg.AssetCheckSpec(
            LOAD_COMPLETED,
            asset=key,
            description="The workspace's last load ran to its end; it warns when the load "
            "stopped early on purpose (daily limit, request budget): the next run continues.",
        )
        for key in checked
    ]

    @dg.multi_asset(
        name="signing_raw",
        specs=specs,
        check_specs=check_specs,
        partitions_def=partitions,
        pool=WAREHOUSE_POOL,
        can_subset=False,
    )
    def signing_raw(
        context: dg.AssetExecutionContext,
        signing_warehouse: SigningWarehouse,
        dlt: DagsterDltResource,
    ) -> Iterator[dg.MaterializeResult[Any] | dg.AssetCheckResult]:
        entry = workspace_entry(context.partition_key)
        context.log.info(f"workspace {entry.name}: loading from {entry.base_url}")
        # As `signing-etl load --workspace` loads it.
        outcome = load_workspace(entry, signing_warehouse.file, signing.RunControl())
        context.instance.add_run_tags(context.run.run_id, {OUTCOME_TAG: outcome.kind})
        if outcome.kind == "failed":
            reason = str(outcome.reason)
            if outcome.result is not None:
                reason = f"{reason}; what was fetched is loaded, the next run continues"
            raise dg.Failure(
                description=reason,
                metadata={"workspace": entry.name, "exit_code": outcome.code},
            )
        if outcome.kind == "stopped":
            context.log.warning(f"workspace {entry.name}: stopped early: {outcome.reason}")
        else:
            context.log.info(f"workspace {entry.name}: completed")
        result = outcome.result
        if result is not None:
            resources = resource_shapes().resources
            for spec in specs:
                resource = resources.get(spec.key.path[-1])
                metadata = _materialization_metadata(context, dlt, spec, resource, outcome, result)
                yield dg.MaterializeResult(asset_key=spec.key, metadata=metadata)
        for key in checked:
            yield dg.AssetCheckResult(
                asset_key=key,
                check_name=LOAD_COMPLETED,
                passed=outcome.kind == "completed",
                severity=dg.AssetCheckSeverity.WARN,
                description=(
                    f"stopped early: {outcome.reason}" if outcome.reason else "loaded to the end"
                ),
                metadata={"outcome": outcome.kind, "workspace": entry.name},
            )

    return signing_raw


def raw_freshness(
    keys: Sequence[dg.AssetKey], partitions: dg.PartitionsDefinition[str]
) -> dg.AssetChecksDefinition:
    """One `fresh` check per raw table: every workspace (partition) was materialized within
    `FRESH_HOURS`. A stopped load counts (it loaded what it could); a failed one does not."""

    @dg.multi_asset_check(
        name="signing_raw_freshness",
        specs=[
            dg.AssetCheckSpec(
                FRESH,
                asset=key,
                description=f"Every workspace loaded within the last {FRESH_HOURS} h.",
            )
            for key in keys
        ],
    )
    def freshness(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        now = datetime.now(UTC)
        names = partitions.get_partition_keys()
        for check_key in context.selected_asset_check_keys:
            last: dict[str, float | None] = {}
            for name in names:
                found = context.instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=check_key.asset_key, asset_partitions=[name]),
                    limit=1,
                ).records
                last[name] = found[0].timestamp if found else None
            bound = (now - timedelta(hours=FRESH_HOURS)).timestamp()
            stale = [name for name, at in last.items() if at is None or at < bound]
            yield dg.AssetCheckResult(
                asset_key=check_key.asset_key,
                check_name=FRESH,
                passed=not stale,
                severity=dg.AssetCheckSeverity.WARN,
                description=(
                    f"not loaded within {FRESH_HOURS} h: {', '.join(stale)}"
                    if stale
                    else f"every workspace loaded within {FRESH_HOURS} h"
                ),
                metadata={
                    "last_loaded": dg.MetadataValue.json(
                        {
                            name: datetime.fromtimestamp(at, UTC).isoformat() if at else None
                            for name, at in last.items()
                        }
                    )
                },
            )

    return freshness


# ---------------------------------------------------------------------- the models (dbt)


def dbt_executable() -> str:
    """The `dbt` beside this Python (the project's environment), else the one on PATH."""
    beside = Path(sys.executable).with_name("dbt")
    return str(beside) if beside.exists() else shutil.which("dbt") or "dbt"


def dbt_project() -> DbtProject:
    """`models/`, its manifest for Dagster kept apart from the CLI's builds (`target/dagster`)."""
    return DbtProject(project_dir=PROJECT_DIR, target_path=Path("target") / "dagster")


def prepare(project: DbtProject, *, force: bool = False) -> None:
    """Write the project's manifest (`dbt parse`): always under `dagster dev` or when `force`d
    (it then follows edits to the models), else only when it is missing (a deployment that
    prepared it at build time starts at once)."""
    if force or project.preparer.using_dagster_dev() or not project.manifest_path.exists():
        dbt = DbtCliResource(project_dir=project, dbt_executable=dbt_executable())
        dbt.cli(["parse", "--quiet"], target_path=project.target_path).wait()


class SigningDbtTranslator(DagsterDbtTranslator):
    """dagster-dbt's assets of the models, grouped by layer (`staging`, `marts`). The dbt
    sources keep dbt's default key `signing/<table>`, the raw assets' own, so each model
    depends on the dlt assets; nested tables name their resource's asset (`meta.dagster`)."""

    def __init__(self) -> None:
        super().__init__(DagsterDbtTranslatorSettings(enable_duplicate_source_asset_keys=True))

    def get_asset_spec(
        self, manifest: Mapping[str, Any], unique_id: str, project: DbtProject | None
    ) -> dg.AssetSpec:
        spec = super().get_asset_spec(manifest, unique_id, project)
        props = self.get_resource_props(manifest, unique_id)
        if props["resource_type"] == "model" and len(props["fqn"]) > 2:
            return spec.replace_attributes(group_name=str(props["fqn"][1]))
        return spec


def model_assets(project: DbtProject) -> dg.AssetsDefinition:
    """Every model and test of `models/`, built with `dbt build` (dbt's tests become checks)."""

    @dbt_assets(
        manifest=project.manifest_path,
        project=project,
        dagster_dbt_translator=SigningDbtTranslator(),
        name="signing_models",
        pool=WAREHOUSE_POOL,
    )
    def signing_models(
        context: dg.AssetExecutionContext, dbt: DbtCliResource, signing_warehouse: SigningWarehouse
    ) -> Iterator[Any]:
        target = dbt_dir_for(signing_warehouse.file) / "dagster"
        with signing_warehouse.for_dbt():
            yield from dbt.cli(["build"], context=context, target_path=target).stream()

    return signing_models


# ---------------------------------------------------------------------- the definitions


def build_definitions(
    workspaces: Sequence[str] | None = None, warehouse: Path | None = None
) -> dg.Definitions:
    """The Definitions: raw assets partitioned by `workspaces` (default: the names configured
    in dlt's configuration now), the models, the daily job and its schedule, the freshness
    checks and their hourly schedule, and the resources writing to `warehouse` (default:
    `SIGNING_WAREHOUSE`, else `warehouse/signing.duckdb`)."""
    names = (
        list(workspaces)
        if workspaces is not None
        else [entry.name for entry in configured_workspaces()]
    )
    partitions = dg.StaticPartitionsDefinition(names)
    project = dbt_project()
    prepare(project)
    raw = raw_assets(partitions)
    models = model_assets(project)
    freshness = raw_freshness([key for key in raw.keys if key.path[-1] in RESOURCES], partitions)
    daily = dg.define_asset_job(
        "signing_daily",
        selection=dg.AssetSelection.assets(raw, models) - dg.AssetSelection.checks(freshness),
        description="Load one workspace (the partition), then rebuild the models.",
    )

    @dg.schedule(
        job=daily,
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

    fresh_job = dg.define_asset_job(
        "signing_freshness", selection=dg.AssetSelection.checks(freshness)
    )
    warehouse_resource = (
        SigningWarehouse(path=str(warehouse)) if warehouse is not None else SigningWarehouse()
    )
    return dg.Definitions(
        # A run's steps follow one another anyway (the models need the load, and both take the
        # warehouse's pool): in one process each run saves a Python start with dagster, dlt and
        # dbt imported per step (20 s of a 65 s `dagster asset materialize` here).
        executor=dg.in_process_executor,
        assets=[raw, models],
        asset_checks=[freshness],
        jobs=[daily, fresh_job],
        schedules=[
            signing_daily_schedule,
            dg.ScheduleDefinition(job=fresh_job, cron_schedule=FRESHNESS_CRON),
        ],
        resources={
            "signing_warehouse": warehouse_resource,
            "dlt": DagsterDltResource(),
            "dbt": DbtCliResource(project_dir=project, dbt_executable=dbt_executable()),
        },
    )


@dg.definitions
def defs() -> dg.Definitions:
    """What `dagster dev -m orchestration.dagster_defs` loads: the configured workspaces."""
    return build_definitions()
