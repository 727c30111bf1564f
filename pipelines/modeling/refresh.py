"""The marts brought up to date after a webhook drain: their SQL as the last dbt build compiled
it, run again in one transaction (docs/design.md, "After a webhook drain"), or `dbt run` of the
marts when that SQL is not at hand; never a build on record (`status` reads builds)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any

from pipelines.modeling.build import ModelsResult, run_models
from pipelines.modeling.record import built_before
from pipelines.warehouse import Warehouse

MARTS_SCHEMA = "marts"
# What `dbt run` refreshes when the compiled SQL is not at hand.
FRESH_MARTS_SELECTION = "marts"


@dataclass(frozen=True)
class CompiledMart:
    """One mart table and the SELECT that makes it, as dbt compiled it (ephemeral models
    inlined as CTEs)."""

    name: str
    sql: str


def compiled_marts(target_dir: Path) -> list[CompiledMart] | None:
    """The mart tables in the order they build, each with the SQL the last dbt invocation
    compiled for it (`manifest.json`); None when there is no manifest or it lacks a mart's SQL
    (the last invocation selected something else)."""
    try:
        manifest = json.loads((target_dir / "manifest.json").read_bytes())
    except (OSError, ValueError):
        return None
    marts: dict[str, dict[str, Any]] = {
        unique_id: node
        for unique_id, node in manifest.get("nodes", {}).items()
        if node.get("resource_type") == "model"
        and node.get("schema") == MARTS_SCHEMA
        and node.get("config", {}).get("materialized") == "table"
    }
    graph = {
        unique_id: [d for d in node["depends_on"]["nodes"] if d in marts]
        for unique_id, node in marts.items()
    }
    found = []
    for unique_id in TopologicalSorter(graph).static_order():
        node = marts[unique_id]
        if not node.get("compiled_code") or not node.get("extra_ctes_injected"):
            return None
        found.append(CompiledMart(node.get("alias") or node["name"], node["compiled_code"]))
    return found or None


# Where dbt compiles in dbt's folder beside the warehouse: the CLI's builds and Dagster's.
COMPILED_IN = ("target", "dagster")


def _last_compiled(dbt_dir: Path) -> Path:
    """The target folder of the last dbt invocation, the CLI's or Dagster's (`COMPILED_IN`):
    whichever wrote its manifest last."""
    folders = [dbt_dir / name for name in COMPILED_IN]

    def written(folder: Path) -> float:
        try:
            return (folder / "manifest.json").stat().st_mtime
        except OSError:
            return 0.0

    return max(folders, key=written)


def _statements(mart: CompiledMart, is_file: bool) -> list[str]:
    """Replace one mart table with what its SQL selects now. DuckDB replaces it in one
    statement; PostgreSQL has no `create or replace table`: a new table takes the old one's
    name (readers wait for the commit, never see it missing)."""
    table = f'"{MARTS_SCHEMA}"."{mart.name}"'
    if is_file:
        return [f"create or replace table {table} as (\n{mart.sql}\n)"]
    fresh = f"{mart.name}__fresh"
    return [
        f'drop table if exists "{MARTS_SCHEMA}"."{fresh}"',
        f'create table "{MARTS_SCHEMA}"."{fresh}" as (\n{mart.sql}\n)',
        f"drop table {table}",
        f'alter table "{MARTS_SCHEMA}"."{fresh}" rename to "{mart.name}"',
    ]


def refresh_marts(warehouse: Warehouse | Path, *, brief: str | None = None) -> ModelsResult | None:
    """Bring the marts up to date with what a webhook drain loaded into raw, as a run of the
    warehouse of its own (`brief`: a hold a load waits for, which never waits for a load: it
    raises `AlreadyRunning`), published when it ends.

    The marts' SQL as the last build compiled it (the CLI's or Dagster's) runs again, in
    dependency order and in one transaction (readers see the old marts or the new, never a
    mix); the staging views read raw as it is, and the snapshots and tests wait for the next
    scheduled `load` or `models`. Without that SQL (no build since, one of another selection,
    or one whose failed tests skipped the marts), `dbt run` of the marts. Neither is a build
    on record: a failed build stays what `status` says until a build passes. None, and
    nothing run, on a warehouse whose models were never built: there are no marts to keep
    fresh."""
    place = Warehouse.of(warehouse)
    if not built_before(place):  # asked of the published copy, before the hold
        return None
    with place.publishing(brief=brief):
        marts = compiled_marts(_last_compiled(place.dbt_dir))
        if marts is None:
            return run_models(place, FRESH_MARTS_SELECTION)
        started = time.monotonic()
        with (
            place.models_hold(brief=brief),  # no load step writes while the marts read raw
            place.sql_client() as client,
            client.begin_transaction(),
        ):
            for mart in marts:
                for statement in _statements(mart, place.is_file):
                    client.execute_sql(statement)
        return ModelsResult(True, models_passed=len(marts), seconds=time.monotonic() - started)
