"""The Dagster definitions, materialized in-process against two sandbox workspaces (colliding ids)
into a temporary DuckDB warehouse: the marts equal the sandboxes, lineage runs from the dlt
assets to every mart, a later run is incremental, and stops and failures mean what they mean on
the CLI (a daily stop is a stopped run, not a failed one; a failure carries the CLI's line)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import httpx
import pytest
import yaml
from dagster._utils.tags import TagConcurrencyLimitsCounter

from orchestration import dagster_defs
from orchestration.dagster_defs import DAILY_CRON, build_definitions
from orchestration.ingestion import (
    FRESH,
    FRESH_HOURS,
    LOAD_COMPLETED,
    OUTCOME_TAG,
    TRANSIENT_RETRIES,
)
from orchestration.modeling import dbt_project, prepare
from orchestration.resources import BROKER_VARIABLE, DESTINATION_VARIABLE, WAREHOUSE_POOL
from sandbox import JSON, RunningSandbox
from sources.signing import RESOURCES, RunControl, configured_source, connect, signing_source
from tests.models.test_marts import assert_marts_match
from tests.models.workspaces import colliding_workspaces, workspace_marts
from tests.sources.test_resilience import UNBOUND
from tests.support import (
    FAST,
    MARTS,
    admin,
    cli_env,
    describe,
    error_lines,
    run_cli,
    served,
    status_document,
    workspaces_env,
)
from tests.support.built import done_once

pytestmark = pytest.mark.slow  # Dagster materializations, with loads and builds

WORKSPACES = ("alpha", "beta")  # the sandbox's two workspaces, in its order
REFUSED = "gamma"  # a third entry whose key the service refuses
CHILD_ENDPOINTS = ("/shipments/{id}/events", "/shipments/{id}/fields")
RAW = [dg.AssetKey(["signing", name]) for name in RESOURCES]
MART_KEYS = [dg.AssetKey(["marts", name]) for name in MARTS]
DAGSTER_YAML = Path(dagster_defs.__file__).with_name("dagster.yaml")


def environment(running: RunningSandbox) -> dict[str, str]:
    """dlt's configuration of the three workspaces, as environment variables (the only place
    Dagster's runs read keys from), with the test pacing."""
    names = [*WORKSPACES, REFUSED]
    keys = [*running.api_keys, "sk_test_refused"]
    return {
        "SOURCES__SIGNING__BASE_URL": running.base_url,
        **{
            f"SOURCES__SIGNING__WORKSPACES__{name.upper()}__API_KEY": key
            for name, key in zip(names, keys, strict=True)
        },
        **{f"SOURCES__SIGNING__{name.upper()}": str(value) for name, value in asdict(FAST).items()},
    }


@contextmanager
def configured(variables: dict[str, str]) -> Iterator[None]:
    """This process's environment with `variables` set, restored afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():
            patch.setenv(name, value)
        yield


@dataclass
class Deployment:
    """The definitions of one sandbox with two workspaces, an ephemeral Dagster instance and a
    temporary warehouse; the first materialization of every asset is in `first`."""

    running: RunningSandbox
    defs: dg.Definitions
    instance: dg.DagsterInstance
    warehouse: Path
    first: dict[str, dg.ExecuteInProcessResult] = field(default_factory=dict)

    def materialize(self, partition: str, *, models: bool) -> dg.ExecuteInProcessResult:
        """The daily job for one workspace: its raw assets, and the models when `models`."""
        graph = self.defs.resolve_asset_graph()
        keys = [k for k in graph.get_all_asset_keys() if models or k.path[0] == "signing"]
        return self.run(self.defs, partition, keys)

    def run(
        self, defs: dg.Definitions, partition: str, keys: list[dg.AssetKey]
    ) -> dg.ExecuteInProcessResult:
        """The daily job of `defs` (these, or another warehouse's) for one workspace and the
        assets `keys`, on this deployment's instance."""
        return defs.resolve_job_def("signing_daily").execute_in_process(
            partition_key=partition,
            instance=self.instance,
            asset_selection=keys,
            raise_on_error=False,
        )

    def copy(self, folder: Path) -> tuple[Path, dg.Definitions]:
        """A copy of the warehouse in `folder`, and the definitions that load and build it."""
        warehouse = folder / "signing.duckdb"
        shutil.copyfile(self.warehouse, warehouse)
        return warehouse, build_definitions(warehouse=warehouse)

    def workspace_id(self, position: int) -> str:
        return self.running.stores[position].workspace.id


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Every asset materialized once: alpha's raw tables, then beta's with the models."""
    configs = colliding_workspaces(seed=31, shipments=60)
    with RunningSandbox(*configs) as running, configured(environment(running)):
        # The manifest of the models as they are now, before anything reads it: one `dbt parse`
        # a session (test_dagster and test_celery write the same file).
        done_once(tmp_path_factory, "dagster manifest", lambda: prepare(dbt_project(), force=True))
        warehouse = tmp_path_factory.mktemp("dagster") / "signing.duckdb"
        deployment = Deployment(
            running,
            build_definitions(warehouse=warehouse),
            dg.DagsterInstance.ephemeral(),
            warehouse,
        )
        deployment.first["alpha"] = deployment.materialize("alpha", models=False)
        deployment.first["beta"] = deployment.materialize("beta", models=True)
        yield deployment


def materializations(instance: dg.DagsterInstance, key: dg.AssetKey) -> list[Any]:
    return list(instance.fetch_materializations(key, limit=100).records)


def metadata_of(result: dg.ExecuteInProcessResult, key: dg.AssetKey) -> dict[str, Any]:
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == key]
    materialization = event.materialization
    assert materialization is not None
    return {name: value.value for name, value in materialization.metadata.items()}


def check_results(result: dg.ExecuteInProcessResult, name: str) -> list[Any]:
    return [c for c in result.get_asset_check_evaluations() if c.check_name == name]


# ---------------------------------------------------------------------- the first materialization
def test_every_asset_is_materialized_and_each_workspace_loads_as_its_own_partition(
    deployment: Deployment,
) -> None:
    assert all(r.success for r in deployment.first.values())
    graph = deployment.defs.resolve_asset_graph()
    never = [
        key.to_user_string()
        for key in graph.get_all_asset_keys()
        if not materializations(deployment.instance, key)
    ]
    assert never == []
    partitions = {
        key.path[-1]: sorted(
            {r.partition_key for r in materializations(deployment.instance, key) if r.partition_key}
        )
        for key in RAW
    }
    assert partitions == {name: list(WORKSPACES) for name in RESOURCES}
    # The runs are tagged with the CLI's outcome, and the load check passed.
    for result in deployment.first.values():
        tags = deployment.instance.get_run_by_id(result.run_id).tags  # type: ignore[union-attr]
        assert tags[OUTCOME_TAG] == "completed"
        completed = check_results(result, LOAD_COMPLETED)
        assert {c.asset_key for c in completed} == set(RAW)
        assert all(c.passed for c in completed)


@pytest.mark.parametrize("position", [0, 1], ids=WORKSPACES)
def test_each_workspace_marts_equal_its_sandbox(
    deployment: Deployment, position: int, tmp_path: Path
) -> None:
    store = deployment.running.stores[position]
    own = workspace_marts(deployment.warehouse, store.workspace.id, tmp_path / "own.duckdb")
    assert_marts_match(own, store)


def test_lineage_runs_from_the_dlt_assets_to_every_mart(deployment: Deployment) -> None:
    graph = deployment.defs.resolve_asset_graph()
    raw_assets = deployment.defs.resolve_assets_def(RAW[0])

    def ancestors(key: dg.AssetKey) -> set[dg.AssetKey]:
        found: set[dg.AssetKey] = set()
        todo = [key]
        while todo:
            for parent in graph.get(todo.pop()).parent_keys:
                if parent not in found:
                    found.add(parent)
                    todo.append(parent)
        return found

    # Nothing in the graph is external: every dbt source is a table the load writes.
    assert [k for k in graph.get_all_asset_keys() if not graph.get(k).is_materializable] == []
    for key in graph.get_all_asset_keys():
        if key.path[0] == "staging":
            raw_parents = {p for p in graph.get(key).parent_keys if p.path[0] == "signing"}
            assert raw_parents, f"{key.to_user_string()} reads no dlt asset"
            assert raw_parents <= set(raw_assets.keys)
    upstream = {mart.path[-1]: ancestors(mart) & set(RAW) for mart in MART_KEYS}
    shipment_tables = {dg.AssetKey(["signing", t]) for t in ("shipments", "audit_events")}
    assert all(shipment_tables <= raw for raw in upstream.values()), upstream
    assert dg.AssetKey(["signing", "contacts"]) in upstream["dim_contacts"]
    assert dg.AssetKey(["signing", "documents"]) in upstream["dim_documents"]
    # The dlt assets are dagster-dlt's, partitioned per configured workspace.
    assert raw_assets.partitions_def is not None
    assert raw_assets.partitions_def.get_partition_keys() == [*WORKSPACES, REFUSED]
    assert {graph.get(k).group_name for k in RAW} == {"raw"}
    assert all("dlt" in (graph.get(k).kinds or set()) for k in RAW)


def test_the_raw_assets_are_the_resources_the_source_loads(deployment: Deployment) -> None:
    running = deployment.running
    control = RunControl()
    try:
        settings = configured_source(api_key=running.api_keys[0], base_url=running.base_url)
        connection = connect(settings, control=control)
        source = signing_source(connection)
    finally:
        control.finish()
    raw_assets = deployment.defs.resolve_assets_def(RAW[0])
    from_dlt = {key for key in raw_assets.keys if not key.path[-1].startswith("_")}
    assert from_dlt == {dg.AssetKey(["signing", name]) for name in source.selected_resources}


# ---------------------------------------------------------------------- a later materialization
def shipments_of(running: RunningSandbox, position: int) -> dict[str, JSON]:
    store = running.stores[position]
    with store.lock:
        return {s.id: s.to_json() for s in store.shipments.by_id.values()}


def test_a_later_materialization_is_incremental_and_the_marts_follow(
    deployment: Deployment, tmp_path: Path
) -> None:
    running = deployment.running
    before = shipments_of(running, 0)
    admin(running, "POST", f"/advance?workspace={deployment.workspace_id(0)}", {"days": 2})
    after = shipments_of(running, 0)
    changed = {i for i, body in after.items() if before.get(i) != body}
    assert changed, "two days of activity should change some shipments"

    result = deployment.materialize("alpha", models=True)

    assert result.success
    requests = metadata_of(result, dg.AssetKey(["signing", "audit_events"]))["requests_by_endpoint"]
    assert {e: requests.get(e) for e in CHILD_ENDPOINTS} == dict.fromkeys(
        CHILD_ENDPOINTS, len(changed)
    )
    shipments = metadata_of(result, dg.AssetKey(["signing", "shipments"]))
    assert shipments["rows_by_table"]["shipments"] == len(changed)
    for position in (0, 1):
        store = running.stores[position]
        own = workspace_marts(deployment.warehouse, store.workspace.id, tmp_path / f"{position}")
        assert_marts_match(own, store)


# ---------------------------------------------------------------------- stops and failures
def test_a_daily_stop_is_a_stopped_run_not_a_failed_one(deployment: Deployment) -> None:
    running, workspace = deployment.running, deployment.workspace_id(1)
    # /me, then two lists, then the 4th request meets the daily limit.
    limited = {"limits_enabled": True, **UNBOUND, "daily_requests": 3}
    admin(running, "PATCH", f"/config?workspace={workspace}", limited)
    try:
        result = deployment.materialize("beta", models=True)  # the daily job, as scheduled
    finally:
        admin(
            running,
            "PATCH",
            f"/config?workspace={workspace}",
            {"limits_enabled": False, "daily_requests": None},
        )

    run = deployment.instance.get_run_by_id(result.run_id)
    assert run is not None
    assert result.success
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert run.tags[OUTCOME_TAG] == "stopped"
    completed = check_results(result, LOAD_COMPLETED)
    assert {c.asset_key for c in completed} == set(RAW)
    assert not any(c.passed for c in completed)
    assert {c.severity for c in completed} == {dg.AssetCheckSeverity.WARN}
    (reason,) = {c.description for c in completed}
    assert reason is not None
    assert "daily limit" in reason
    # What was fetched is loaded, the marts are rebuilt from it, and the run is recorded as the
    # CLI records a stop.
    materialized = metadata_of(result, dg.AssetKey(["signing", "workspaces"]))
    assert materialized["outcome"] == "stopped"
    rebuilt = {e.asset_key for e in result.get_asset_materialization_events()}
    assert set(MART_KEYS) <= rebuilt
    with duckdb.connect(str(deployment.warehouse), read_only=True) as db:
        last = db.execute(
            "select outcome, stop_reason from raw._signing_runs where workspace_id = ? "
            "order by finished_at desc limit 1",
            [workspace],
        ).fetchone()
    assert last == ("stopped", reason.removeprefix("stopped early: "))


def test_a_failed_load_fails_the_asset_with_the_clis_one_line_reason(
    deployment: Deployment, tmp_path: Path
) -> None:
    result = deployment.materialize(REFUSED, models=False)

    assert not result.success
    run = deployment.instance.get_run_by_id(result.run_id)
    assert run is not None
    assert run.status == dg.DagsterRunStatus.FAILURE
    assert run.tags[OUTCOME_TAG] == "failed"
    (failure,) = result.get_step_failure_events()
    data = failure.step_failure_data.user_failure_data
    assert data is not None
    assert data.description is not None
    assert "\n" not in data.description
    env = {
        **cli_env(None),
        **environment(deployment.running),
        "SIGNING_WAREHOUSE": str(deployment.warehouse),
    }
    cli = run_cli(
        ["load", "--duckdb", str(tmp_path / "cli.duckdb"), "--workspace", REFUSED],
        cwd=tmp_path,
        env=env,
    )
    assert cli.returncode == 1
    (line,) = error_lines(cli.stderr)
    assert line.endswith(data.description), (line, data.description)
    assert "refused" in data.description


# ---------------------------------------------------------------------- schedule, concurrency
def test_the_daily_schedule_asks_for_one_run_per_workspace(deployment: Deployment) -> None:
    schedule = deployment.defs.resolve_schedule_def("signing_daily_schedule")
    assert schedule.cron_schedule == DAILY_CRON
    at = datetime(2026, 3, 1, 2, 15, tzinfo=UTC)
    repository = deployment.defs.get_repository_def()
    with dg.build_schedule_context(
        scheduled_execution_time=at, repository_def=repository
    ) as context:
        requests = schedule.evaluate_tick(context).run_requests or []
    assert [r.partition_key for r in requests] == [*WORKSPACES, REFUSED]
    assert len({r.run_key for r in requests}) == 3
    job = deployment.defs.resolve_job_def("signing_daily")
    assert job.asset_layer.selected_asset_keys >= {*RAW, *MART_KEYS}


def test_runs_of_one_workspace_queue_behind_each_other_and_writers_share_one_pool(
    deployment: Deployment,
) -> None:
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    with dg.instance_for_test(overrides=settings) as instance:  # valid instance settings
        concurrency = instance.get_concurrency_config()
    assert concurrency.pool_config.default_pool_limit == 1
    assert concurrency.run_queue_config is not None
    # Two runs of one workspace (partition) never run together; two workspaces may.
    alpha = deployment.instance.get_run_by_id(deployment.first["alpha"].run_id)
    beta = deployment.instance.get_run_by_id(deployment.first["beta"].run_id)
    assert alpha is not None
    assert beta is not None
    queue = TagConcurrencyLimitsCounter(
        list(concurrency.run_queue_config.tag_concurrency_limits), [alpha]
    )
    assert queue.is_blocked(alpha.with_tags({**alpha.tags, "dagster/schedule_name": "nightly"}))
    assert not queue.is_blocked(beta)
    # Loads and dbt builds write one DuckDB file: they share one pool (limit 1 above).
    pools = {deployment.defs.resolve_assets_def(k).op.pool for k in (RAW[0], MART_KEYS[0])}
    assert pools == {WAREHOUSE_POOL}


@pytest.mark.parametrize("broker", [None, "redis://127.0.0.1:6379/0"], ids=["alone", "celery"])
def test_on_postgres_loads_run_side_by_side_builds_take_turns_and_steps_go_to_celery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker: str | None
) -> None:
    """The pools and the executor follow the destination: a DuckDB file keeps one writer and
    one process whatever is configured; on PostgreSQL the loads take no pool, the dbt builds
    still take turns, and a configured broker sends steps to Celery."""
    monkeypatch.delenv(DESTINATION_VARIABLE, raising=False)
    if broker is None:
        monkeypatch.delenv(BROKER_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(BROKER_VARIABLE, broker)
    on_file = build_definitions(workspaces=list(WORKSPACES), warehouse=tmp_path / "w.duckdb")
    on_postgres = build_definitions(
        workspaces=list(WORKSPACES), warehouse=tmp_path / "pg" / "w.duckdb", destination="postgres"
    )

    def pool_of(defs: dg.Definitions, key: dg.AssetKey) -> str | None:
        return defs.resolve_assets_def(key).op.pool

    def executor_of(defs: dg.Definitions) -> str:
        return defs.resolve_job_def("signing_daily").executor_def.name

    assert (pool_of(on_file, RAW[0]), pool_of(on_file, MART_KEYS[0])) == (WAREHOUSE_POOL,) * 2
    assert (pool_of(on_postgres, RAW[0]), pool_of(on_postgres, MART_KEYS[0])) == (
        None,
        WAREHOUSE_POOL,
    )
    assert executor_of(on_file) == dg.in_process_executor.name
    assert executor_of(on_postgres) == ("celery" if broker else dg.in_process_executor.name)
    # A load that failed on the database's passing conflict is retried, on both.
    for defs in (on_file, on_postgres):
        assert defs.resolve_assets_def(RAW[0]).op.retry_policy == TRANSIENT_RETRIES


def test_freshness_checks_name_the_workspaces_not_loaded_lately(deployment: Deployment) -> None:
    result = deployment.defs.resolve_job_def("signing_freshness").execute_in_process(
        instance=deployment.instance, raise_on_error=False
    )
    fresh = check_results(result, FRESH)
    assert {c.asset_key for c in fresh} == set(RAW)
    # alpha and beta loaded moments ago; gamma's key is refused, so it never loaded.
    assert not any(c.passed for c in fresh)
    assert {c.description for c in fresh} == {f"not loaded within {FRESH_HOURS} h: {REFUSED}"}


def test_freshness_counts_a_load_by_the_cli(tmp_path: Path) -> None:
    """A workspace the CLI (cron) loaded a minute ago is fresh to Dagster too: the check reads
    the warehouse's run records, not only Dagster's own materializations."""
    config = colliding_workspaces(seed=33, shipments=20)[0]
    with RunningSandbox(config) as running:
        env = workspaces_env(running, {WORKSPACES[0]: running.api_key})
        warehouse = tmp_path / "signing.duckdb"
        loaded = run_cli(["load", "--duckdb", str(warehouse), "--no-models"], cwd=tmp_path, env=env)
        assert loaded.returncode == 0, loaded.stderr
        defs = build_definitions(workspaces=[WORKSPACES[0], "unloaded"], warehouse=warehouse)
        result = defs.resolve_job_def("signing_freshness").execute_in_process(
            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False
        )

    fresh = check_results(result, FRESH)
    assert {c.asset_key for c in fresh} == set(RAW)
    assert {c.description for c in fresh} == {f"not loaded within {FRESH_HOURS} h: unloaded"}
    last = fresh[0].metadata["last_loaded"].value
    assert last["unloaded"] is None
    assert last[WORKSPACES[0]] is not None


def test_a_load_stopped_by_a_signal_is_named_stopped_in_dagster_as_in_the_run_record(
    tmp_path: Path,
) -> None:
    """How a run ended is named once: SIGTERM during a partition's load makes a run tagged
    `signing/outcome=stopped`, as `raw._signing_runs` records it and `status` shows it."""
    config = colliding_workspaces(seed=34, shipments=150)[0]
    with RunningSandbox(config) as running:
        variables = {
            "SOURCES__SIGNING__BASE_URL": running.base_url,
            f"SOURCES__SIGNING__WORKSPACES__{WORKSPACES[0].upper()}__API_KEY": running.api_key,
            "SOURCES__SIGNING__REQUESTS_PER_SECOND": "40",
            "SOURCES__SIGNING__BURST": "5",
        }
        warehouse = tmp_path / "signing.duckdb"
        with configured(variables):
            defs = build_definitions(workspaces=[WORKSPACES[0]], warehouse=warehouse)
            graph = defs.resolve_asset_graph()
            raw = [k for k in graph.get_all_asset_keys() if k.path[0] == "signing"]
            # Sent once the load is well under way (the source's handler is in place then).
            sender = threading.Thread(target=_terminate_after, args=(running, 40), daemon=True)
            sender.start()
            instance = dg.DagsterInstance.ephemeral()
            result = defs.resolve_job_def("signing_daily").execute_in_process(
                partition_key=WORKSPACES[0],
                instance=instance,
                asset_selection=raw,
                raise_on_error=False,
            )
            sender.join(timeout=60)

    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    assert run.tags[OUTCOME_TAG] == "stopped"
    with duckdb.connect(str(warehouse), read_only=True) as db:
        recorded = db.execute("select outcome, stop_reason from raw._signing_runs").fetchall()
    assert recorded == [("stopped", "stopped by SIGTERM; the next run continues")]
    shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=cli_env(None))
    assert "stopped (stopped by SIGTERM" in shown.stdout, shown.stdout


def _terminate_after(running: RunningSandbox, requests: int) -> None:
    """SIGTERM to this process once the sandbox has answered `requests` (the load is under
    way); nothing if the load never got that far."""
    deadline = time.monotonic() + 60
    with contextlib.suppress(httpx.HTTPError):
        while served(running) < requests and time.monotonic() < deadline:
            time.sleep(0.02)
        if served(running) >= requests:
            os.kill(os.getpid(), signal.SIGTERM)


# ------------------------------------------------------------------ the models' build on record


def _check(warehouse: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=cwd, env=cli_env(None))


def test_dagsters_model_build_is_on_record_where_status_reads_it(
    deployment: Deployment, tmp_path: Path
) -> None:
    """Dagster's dbt runs in a `dbt` process of its own, and its build is kept where `status`
    reads every build: the models it built are the model assets Dagster materialized."""
    result = deployment.first["beta"]
    built = {
        event.asset_key
        for event in result.get_asset_materialization_events()
        if event.asset_key is not None and event.asset_key.path[0] != "signing"
    }
    models = status_document(deployment.warehouse, cwd=tmp_path, env=cli_env(None))["models"]
    assert models["success"] is True, models
    assert models["models_built"] == len(built) > 0
    assert models["models_errored"] == models["tests_errored"] == 0
    assert models["tests_passed"] > 0


def test_a_failed_build_under_dagster_fails_the_status_check_until_a_good_one(
    deployment: Deployment, tmp_path: Path
) -> None:
    """A build Dagster ran that failed (a shipment listed twice in `raw`, the staging model's
    key test errors) is named by `status` and fails its check, as a failed `signing-etl models`
    does; Dagster's next good build clears it. On a copy of the deployment's warehouse."""
    warehouse, defs = deployment.copy(tmp_path)
    with duckdb.connect(str(warehouse)) as db:
        db.execute("insert into raw.shipments select * from raw.shipments limit 1")
    staging = [
        key
        for key in defs.resolve_asset_graph().get_all_asset_keys()
        if key.path[-1] in ("stg_signing__shipments", "stg_signing__documents")
    ]
    assert len(staging) == 2

    assert not deployment.run(defs, WORKSPACES[1], staging).success
    models = status_document(warehouse, cwd=tmp_path, env=cli_env(None))["models"]
    assert models["success"] is False
    assert [n for n in models["errored"] if "keys_and_not_nulls_stg_signing__shipments" in n]
    assert models["first_error"].startswith("keys_and_not_nulls_stg_signing__shipments")
    check = _check(warehouse, tmp_path)
    assert check.returncode == 1, describe(check)
    assert any("the last model build failed: " in line for line in error_lines(check.stderr))

    with duckdb.connect(str(warehouse)) as db:  # the duplicate gone
        db.execute("create table keep as select distinct * from raw.shipments")
        db.execute("delete from raw.shipments")
        db.execute("insert into raw.shipments select * from keep")
    assert deployment.run(defs, WORKSPACES[1], staging).success
    models = status_document(warehouse, cwd=tmp_path, env=cli_env(None))["models"]
    assert (models["success"], models["errored"]) == (True, [])
    # The check no longer names the build (other tests of the module may have left a stopped
    # load on this warehouse, which the check still names).
    check = _check(warehouse, tmp_path)
    assert not [line for line in error_lines(check.stderr) if "model build" in line], describe(
        check
    )


def test_an_interrupted_dagster_build_is_not_on_record(
    deployment: Deployment, tmp_path: Path
) -> None:
    """SIGINT while Dagster's dbt runs stops the step, as Ctrl-C stops `signing-etl models`: no
    build is recorded for it, so `status` still shows the last finished one."""
    warehouse, defs = deployment.copy(tmp_path)
    before = status_document(warehouse, cwd=tmp_path, env=cli_env(None))["models"]
    models = [k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] != "signing"]
    log = tmp_path / ".signing.dbt" / "dagster" / "dbt.log"
    sender = threading.Thread(target=_interrupt_once_dbt_runs, args=(log,), daemon=True)
    sender.start()
    result = deployment.run(defs, WORKSPACES[1], models)
    sender.join(timeout=60)
    assert not result.success
    assert status_document(warehouse, cwd=tmp_path, env=cli_env(None))["models"] == before


def _interrupt_once_dbt_runs(log: Path) -> None:
    """SIGINT to this process once dbt has started a node (its log beside the warehouse says
    so), as Ctrl-C or an operator's stop reaches a step; nothing if dbt never got that far."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if log.is_file() and "START sql" in log.read_text(errors="replace"):
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.05)
