"""The raw tables as Dagster assets: one per dlt resource (specs from dagster-dlt), partitioned
by configured workspace, loaded together as `signing-etl load --workspace <name>` loads them,
with a check that each load ran to its end and one that every workspace is fresh.

How a load ends, in Dagster:

- done (CLI exit 0): every raw asset is materialized and its `load_completed` check passes;
- stopped (exit 75: daily limit, request budget, an over-long Retry-After; or 130/143, a
  signal): the run succeeds, what was fetched is materialized, the run is tagged
  `signing/outcome=stopped` and each raw asset's `load_completed` check warns with the reason;
  the marts are rebuilt from what was loaded (they stay consistent after a stop) and the next
  run continues;
- failed (exit 1): the step fails with the CLI's one-line reason, the run is tagged
  `signing/outcome=failed`, and the models wait for a later run.
"""

# No `from __future__ import annotations`: Dagster reads the asset functions' annotations
# (`context: dg.AssetExecutionContext`) as types when they are defined.

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import dagster as dg
from dagster_dlt import DagsterDltResource, DagsterDltTranslator, build_dlt_asset_specs
from dagster_dlt.constants import META_KEY_PIPELINE, META_KEY_SOURCE, META_KEY_TRANSLATOR
from dagster_dlt.translator import DltResourceTranslatorData
from dlt import Pipeline
from dlt.common.schema import Schema
from dlt.extract.resource import DltResource
from dlt.extract.source import DltSource

import sources.signing as signing
from orchestration.resources import WAREHOUSE_POOL, SigningWarehouse
from pipelines.configuration import WorkspaceEntry, choose, configured_workspaces
from pipelines.errors import SigningEtlError
from pipelines.load.run import LoadResult
from pipelines.load.workspaces import WorkspaceLoad, load_workspace
from pipelines.outcome import Outcome
from pipelines.status.read import read_status
from pipelines.warehouse import DEFAULT_DESTINATION, Warehouse
from sources.signing import RESOURCES

# The dlt source's name and the dbt source's: the raw assets are `signing/<table>`.
SOURCE = "signing"
RAW_GROUP = "raw"
# Tables every load writes besides the resources' own: dlt's load log, which every staging model
# reads (rows of completed loads only), the shipments whose children are still loading, and the
# run records (`dim_workspaces.loaded_at` is the end of the last successful load).
BOOKKEEPING_TABLES = {
    "_dlt_loads": "dlt's load log: one row per load package; staging reads completed loads only.",
    "_signing_incomplete_shipments": (
        "Shipments whose audit trail or fields a stopped run left pending; the marts hold them "
        "back until a later run has loaded them."
    ),
    "_signing_runs": (
        "One record per run of a workspace (failed and stopped ones too), what `signing-etl "
        "status` reads; the marts take each workspace's last successful load from it."
    ),
}
OUTCOME_TAG = "signing/outcome"
LOAD_COMPLETED = "load_completed"
FRESH = "fresh"
FRESH_HOURS = 26  # a daily load, with room for a slow night
# A load that failed on the database's passing conflict (two writers changing one table's
# schema, a deadlock, a lost connection) runs again, later each time and not in step with
# the other workers; any other failure is final at once (`dg.Failure(allow_retries=...)`).
TRANSIENT_RETRIES = dg.RetryPolicy(
    max_retries=3, delay=20, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)


def raw_key(table: str) -> dg.AssetKey:
    """The asset of a raw table: `signing/<table>`, which is also the dbt source's own key."""
    return dg.AssetKey([SOURCE, table])


class SigningDltTranslator(DagsterDltTranslator):
    """dagster-dlt's asset of each resource, keyed as dbt names its source tables, in group
    `raw`, with no upstream (the service is not an asset here)."""

    def get_asset_spec(self, data: DltResourceTranslatorData) -> dg.AssetSpec:
        spec = super().get_asset_spec(data)
        return spec.replace_attributes(
            key=raw_key(data.resource.name),
            deps=[],
            group_name=RAW_GROUP,
            kinds={"dlt", DEFAULT_DESTINATION},
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
        dg.AssetSpec(
            raw_key(table), description=text, group_name=RAW_GROUP, kinds={DEFAULT_DESTINATION}
        )
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
            "outcome": str(outcome.outcome),
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


def raw_assets(
    partitions: dg.PartitionsDefinition[str], pool: str | None = WAREHOUSE_POOL
) -> dg.AssetsDefinition:
    """The raw tables, loaded together one workspace (partition) at a time, in `pool` (None:
    no pool, for a destination that takes concurrent writers).

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
        pool=pool,
        can_subset=False,
        retry_policy=TRANSIENT_RETRIES,
    )
    def signing_raw(
        context: dg.AssetExecutionContext,
        signing_warehouse: SigningWarehouse,
        dlt: DagsterDltResource,
    ) -> Iterator[dg.MaterializeResult[Any] | dg.AssetCheckResult]:
        outcome = _load_partition(context, signing_warehouse)
        entry = outcome.entry
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
                passed=outcome.outcome is Outcome.COMPLETED,
                severity=dg.AssetCheckSeverity.WARN,
                description=(
                    f"stopped early: {outcome.reason}" if outcome.reason else "loaded to the end"
                ),
                metadata={"outcome": str(outcome.outcome), "workspace": entry.name},
            )

    return signing_raw


def _load_partition(
    context: dg.AssetExecutionContext, signing_warehouse: SigningWarehouse
) -> WorkspaceLoad:
    """The partition's workspace loaded as `signing-etl load --workspace` loads it, the run
    tagged with its outcome; a failure fails the step with the CLI's one line."""
    entry = workspace_entry(context.partition_key)
    context.log.info(f"workspace {entry.name}: loading from {entry.base_url}")
    outcome = load_workspace(entry, signing_warehouse.warehouse, signing.RunControl())
    context.instance.add_run_tags(context.run.run_id, {OUTCOME_TAG: str(outcome.outcome)})
    if outcome.outcome is Outcome.FAILED:
        raise dg.Failure(
            description=outcome.failure_line,
            metadata={"workspace": entry.name, "exit_code": outcome.code},
            allow_retries=outcome.transient,
        )
    if outcome.outcome is Outcome.STOPPED:
        context.log.warning(f"workspace {entry.name}: stopped early: {outcome.reason}")
    else:
        context.log.info(f"workspace {entry.name}: completed")
    return outcome


def raw_freshness(
    keys: Sequence[dg.AssetKey], partitions: dg.PartitionsDefinition[str]
) -> dg.AssetChecksDefinition:
    """One `fresh` check per raw table: every workspace (partition) was loaded within
    `FRESH_HOURS`, as the warehouse's run records say, so a load by the CLI (cron) counts as
    well as one by Dagster. A stopped load counts (it loaded what it could); a failed one
    does not."""

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
    def freshness(
        context: dg.AssetCheckExecutionContext, signing_warehouse: SigningWarehouse
    ) -> Iterator[dg.AssetCheckResult]:
        now = datetime.now(UTC)
        last = last_loaded(signing_warehouse.warehouse, partitions.get_partition_keys())
        bound = now - timedelta(hours=FRESH_HOURS)
        stale = [name for name, at in last.items() if at is None or at < bound]
        for check_key in context.selected_asset_check_keys:
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
                        {name: at.isoformat() if at else None for name, at in last.items()}
                    )
                },
            )

    return freshness


def last_loaded(warehouse: Warehouse, names: Sequence[str]) -> dict[str, datetime | None]:
    """When each configured workspace last loaded (completed, or stopped with rows), from the
    warehouse's run records; None for one that never did or a warehouse not loaded yet."""
    try:
        found = read_status(warehouse).by_configured_name()
    except SigningEtlError:
        found = {}
    last: dict[str, datetime | None] = {}
    for name in names:
        run = found[name].last_loaded if name in found else None
        last[name] = (run.finished_at or run.started_at) if run else None
    return last
