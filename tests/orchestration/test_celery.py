"""Dagster on many workers, as docs/orchestration.md sets it up: a Redis broker, two Celery
workers started with `dagster-celery worker start`, and one run per workspace partition started
at once, all loading one PostgreSQL database. Every partition is materialized, both workers ran
steps, and each workspace's raw tables equal its sandbox."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from orchestration import dagster_defs
from orchestration.modeling import dbt_project, prepare
from orchestration.resources import BROKER_VARIABLE, DESTINATION_VARIABLE
from pipelines.warehouse import WAREHOUSE_VARIABLE
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import RESOURCES
from tests.support import START_MS, workspaces_env
from tests.support.built import done_once
from tests.support.postgres import PostgresDatabase, PostgresServer
from tests.support.redis import RedisServer
from tests.support.truth import postgres_differences

pytestmark = pytest.mark.slow

WORKSPACES = ("north", "south", "west")
WORKERS = ("first", "second")
BIN = Path(sys.executable).parent
DAGSTER_YAML = Path(dagster_defs.__file__).with_name("dagster.yaml")
# As docs/orchestration.md has it: the broker is also where results go.
CELERY_YAML = yaml.safe_dump(
    {"execution": {"config": {name: {"env": BROKER_VARIABLE} for name in ("broker", "backend")}}}
)
RAW = [dg.AssetKey(["signing", name]) for name in RESOURCES]


def environment(
    running: RunningSandbox, database: PostgresDatabase, broker: RedisServer, folder: Path
) -> dict[str, str]:
    """What every process of the deployment reads (a worker host has the same): the
    workspaces' keys, the database, the destination, the broker and Dagster's home."""
    env = workspaces_env(running, dict(zip(WORKSPACES, running.api_keys, strict=True)))
    env.update(
        {
            "DESTINATION__POSTGRES__CREDENTIALS": database.credentials,
            DESTINATION_VARIABLE: "postgres",
            BROKER_VARIABLE: broker.url(),
            WAREHOUSE_VARIABLE: str(folder / "work" / "signing.duckdb"),
            "DAGSTER_HOME": str(folder / "dagster"),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # `celery` for the workers
        }
    )
    return env


@contextmanager
def celery_workers(env: dict[str, str], folder: Path) -> Iterator[list[Path]]:
    """The two workers, each taking one step at a time, until both say they are ready; their
    logs. Each is stopped with its process group (dagster-celery starts `celery` beneath)."""
    (folder / "celery.yaml").write_text(CELERY_YAML)
    logs = [folder / f"{name}.log" for name in WORKERS]
    workers = []
    for name, log in zip(WORKERS, logs, strict=True):
        command = [
            str(BIN / "dagster-celery"),
            *("worker", "start", "-A", "dagster_celery.app", "-y", "celery.yaml"),
            *("-n", name, "--", "--pool=solo"),
        ]
        with log.open("w") as output:
            workers.append(
                subprocess.Popen(
                    command,
                    cwd=folder,
                    env=env,  # each workspace merges through a staging dataset of its own
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    try:
        for worker, log in zip(workers, logs, strict=True):
            while " ready." not in log.read_text():
                assert worker.poll() is None, log.read_text()[-3000:]
                time.sleep(0.2)
        yield logs
    finally:
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()


def materialize_every_partition(env: dict[str, str], folder: Path) -> list[tuple[int, str]]:
    """One `dagster asset materialize` of the raw assets per workspace, all started at once;
    each one's exit code and output."""
    logs = [folder / f"{name}.run.log" for name in WORKSPACES]
    runs = []
    for name, log in zip(WORKSPACES, logs, strict=True):
        with log.open("w") as output:
            runs.append(
                subprocess.Popen(
                    [
                        str(BIN / "dagster"),
                        *("asset", "materialize", "-m", "orchestration.dagster_defs"),
                        *("--select", "group:raw", "--partition", name),
                    ],
                    cwd=folder,
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        return [(run.wait(), log.read_text()) for run, log in zip(runs, logs, strict=True)]
    finally:
        for run in runs:
            if run.poll() is None:  # the test gave up on it
                run.kill()
                run.wait()


def steps_by_worker(instance: dg.DagsterInstance) -> dict[str, list[str]]:
    """Which Celery worker ran which step, as dagster-celery's engine events say."""
    ran: dict[str, list[str]] = {}
    for record in instance.get_run_records():
        for entry in instance.all_logs(record.dagster_run.run_id):
            event = entry.dagster_event
            if event is None or not event.is_engine_event:
                continue
            data = event.engine_event_data.metadata
            if "Celery worker" in data:
                worker = str(data["Celery worker"].value)
                ran.setdefault(worker.split("@")[0], []).append(str(event.step_key))
    return ran


@pytest.fixture(scope="module")
def deployment(
    postgres_server: PostgresServer, redis_server: RedisServer, tmp_path_factory: Any
) -> Iterator[tuple[RunningSandbox, PostgresDatabase, Path, list[Any], list[Path]]]:
    """Every workspace partition materialized once over the two workers."""
    database = postgres_server.create_database()
    folder = tmp_path_factory.mktemp("celery")
    home = folder / "dagster"
    home.mkdir()
    settings = {**yaml.safe_load(DAGSTER_YAML.read_text()), "telemetry": {"enabled": False}}
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    with dg.DagsterInstance.from_config(str(home)) as instance:  # its storage made once, first
        instance.get_run_records(limit=1)
    # The manifest of the models as they are now, before anything reads it: one `dbt parse`
    # a session (test_dagster and test_celery write the same file).
    done_once(tmp_path_factory, "dagster manifest", lambda: prepare(dbt_project(), force=True))
    config = SandboxConfig(seed=47, shipments=60, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(len(WORKSPACES))) as running:
        env = environment(running, database, redis_server, folder)
        with celery_workers(env, folder) as logs:
            ended = materialize_every_partition(env, folder)
        yield running, database, home, ended, logs


def test_every_partition_is_materialized_over_both_workers(deployment: Any) -> None:
    _, _, home, ended, logs = deployment
    for code, output in ended:
        assert code == 0, output[-4000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        partitions = {
            key.path[-1]: sorted(
                {
                    r.partition_key
                    for r in instance.fetch_materializations(key, limit=100).records
                    if r.partition_key
                }
            )
            for key in RAW
        }
        ran = steps_by_worker(instance)
    assert partitions == {name: sorted(WORKSPACES) for name in RESOURCES}
    assert sorted(ran) == sorted(WORKERS), (ran, [log.read_text()[-2000:] for log in logs])
    # Each partition's load ran once, on one worker (the selection's checks are steps too).
    loads = [step for steps in ran.values() for step in steps if step == "signing_raw"]
    assert len(loads) == len(WORKSPACES), ran


def test_each_workspace_equals_its_sandbox(deployment: Any) -> None:
    running, database, _, _, _ = deployment
    with closing(database.connect()) as connection:
        for store in running.stores:
            assert postgres_differences(connection, store, by_workspace=True) == {}
        with connection.cursor() as cursor:
            cursor.execute("select workspace_name, outcome from raw._signing_runs")
            runs = sorted(cursor.fetchall())
        connection.rollback()
    assert runs == [(name, "completed") for name in sorted(WORKSPACES)]
