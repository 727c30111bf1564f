"""The dbt models as Dagster assets (dagster-dbt): staging views and marts, whose dbt sources are
the raw assets, so lineage runs from each raw table to every mart; dbt's tests are checks."""

# No `from __future__ import annotations`: Dagster reads the asset functions' annotations
# (`context: dg.AssetExecutionContext`) as types when they are defined.

import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import dagster as dg
from dagster_dbt import (
    DagsterDbtTranslator,
    DagsterDbtTranslatorSettings,
    DbtCliInvocation,
    DbtCliResource,
    DbtProject,
    dbt_assets,
)

from orchestration.resources import WAREHOUSE_POOL, SigningWarehouse
from pipelines.modeling.build import (
    PROJECT_DIR,
    WITHOUT_UNIT_TESTS,
    ModelsResult,
    recorded_build,
    result_of_run_results,
)

RUN_RESULTS: Final = "run_results.json"  # what dbt did, written as its build ends (failed or not)


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
        with recorded_build(signing_warehouse.warehouse) as build:
            target = build.place.dbt_dir / "dagster"
            (target / RUN_RESULTS).unlink(missing_ok=True)  # this build's, never the last one's
            started = time.monotonic()
            args = ["build", *WITHOUT_UNIT_TESTS]  # as every load's build: the data's tests
            invocation = dbt.cli(args, context=context, target_path=target)
            # A failed build raises (dagster-dbt) and is recorded first; an interrupted step
            # (Dagster's interruption is a BaseException) is a stop, recorded as none.
            try:
                yield from invocation.stream()
            except Exception:
                build.result = _outcome(invocation, time.monotonic() - started)
                raise
            build.result = _outcome(invocation, time.monotonic() - started)

    return signing_models


def _outcome(invocation: DbtCliInvocation, seconds: float) -> ModelsResult | None:
    """What the dbt process did, counted as the CLI counts a build (its `run_results.json`);
    None while it still runs."""
    code = invocation.process.poll()
    if code is None:
        return None
    log_file = invocation.target_path / "dbt.log"
    if (invocation.target_path / RUN_RESULTS).is_file():
        return result_of_run_results(
            invocation.get_artifact(RUN_RESULTS),
            invocation.manifest,
            success=code == 0,
            seconds=seconds,
            log_file=log_file,
        )
    return ModelsResult(
        success=False,
        first_error=f"dbt build failed before running any node (exit code {code})",
        seconds=seconds,
        log_file=log_file,
    )
