"""docs/orchestration.md's Airflow DAG (orchestration/airflow_example.py), run as Airflow would
run it: a stand-in for Airflow's DAG and BashOperator collects its tasks, then each task's
command runs against the sandbox and ends in the state Airflow would give it (success, skipped
on the skip exit code, failed; downstream tasks by their trigger rule)."""

from __future__ import annotations

import runpy
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import orchestration
from tests.sources.test_resilience import UNBOUND
from tests.support import (
    MARTS,
    SandboxFactory,
    admin,
    cli_env,
    differences,
    error_lines,
    mart_tables,
)

pytestmark = pytest.mark.slow  # Airflow's DAG runs, with loads and builds

EXAMPLE = Path(orchestration.__file__).with_name("airflow_example.py")  # imports Airflow
GUIDE = Path(__file__).parents[2] / "docs" / "orchestration.md"
# BashOperator's parameters that the example may use; anything else is a mistake here.
BASH_OPERATOR_PARAMETERS = {
    "task_id",
    "bash_command",
    "cwd",
    "env",
    "append_env",
    "skip_on_exit_code",
    "trigger_rule",
    "retries",
}


@dataclass
class Task:
    """What Airflow's BashOperator keeps of its arguments, and the task's place in the DAG."""

    task_id: str
    bash_command: str
    cwd: str | None = None
    skip_on_exit_code: int | None = 99  # Airflow's default
    trigger_rule: str = "all_success"
    upstream: list[Task] = field(default_factory=list)

    def __rshift__(self, other: Task) -> Task:
        other.upstream.append(self)
        return other


@dataclass
class Dag:
    dag_id: str
    options: dict[str, Any]
    tasks: list[Task] = field(default_factory=list)


class StandIn:
    """Airflow's `DAG` (a context manager collecting the tasks made inside it) and
    `BashOperator`, enough to load the example as Airflow's DAG loader would."""

    def __init__(self) -> None:
        self.dags: list[Dag] = []
        self._open: list[Dag] = []
        stand_in = self

        class DAG:
            def __init__(self, dag_id: str, **options: Any) -> None:
                self.dag = Dag(dag_id, options)

            def __enter__(self) -> Dag:
                stand_in._open.append(self.dag)
                stand_in.dags.append(self.dag)
                return self.dag

            def __exit__(self, *_: object) -> None:
                stand_in._open.pop()

        def bash_operator(**arguments: Any) -> Task:
            unknown = set(arguments) - BASH_OPERATOR_PARAMETERS
            assert not unknown, f"not a BashOperator parameter here: {unknown}"
            task = Task(**arguments)
            stand_in._open[-1].tasks.append(task)
            return task

        self.modules = {
            "airflow": types.ModuleType("airflow"),
            "airflow.sdk": types.ModuleType("airflow.sdk"),
            "airflow.providers": types.ModuleType("airflow.providers"),
            "airflow.providers.standard": types.ModuleType("airflow.providers.standard"),
            "airflow.providers.standard.operators": types.ModuleType(
                "airflow.providers.standard.operators"
            ),
            "airflow.providers.standard.operators.bash": types.ModuleType(
                "airflow.providers.standard.operators.bash"
            ),
        }
        self.modules["airflow.sdk"].DAG = DAG  # type: ignore[attr-defined]
        bash = self.modules["airflow.providers.standard.operators.bash"]
        bash.BashOperator = bash_operator  # type: ignore[attr-defined]


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> tuple[Dag, dict[str, Any]]:
    """The example's one DAG, loaded with the stand-in, and the example's module globals."""
    stand_in = StandIn()
    for name, module in stand_in.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    namespace = runpy.run_path(str(EXAMPLE))
    (dag,) = stand_in.dags
    return dag, namespace


def run_dag(
    dag: Dag, namespace: dict[str, Any], project: Path, env: dict[str, str]
) -> tuple[dict[str, str], dict[str, subprocess.CompletedProcess[str]]]:
    """Each task in order, as Airflow's BashOperator runs it here: the example's paths become
    this checkout's `signing-etl` and `project`; the states Airflow would record."""
    signing_etl = str(Path(sys.executable).with_name("signing-etl"))
    states: dict[str, str] = {}
    runs: dict[str, subprocess.CompletedProcess[str]] = {}
    for task in dag.tasks:
        upstream = [states[t.task_id] for t in task.upstream]
        if task.trigger_rule == "all_success":
            blocked = any(s != "success" for s in upstream)
        elif task.trigger_rule == "none_failed":
            blocked = any(s in ("failed", "upstream_failed") for s in upstream)
        else:
            raise NotImplementedError(f"trigger rule {task.trigger_rule}")
        if blocked:
            failed = any(s in ("failed", "upstream_failed") for s in upstream)
            states[task.task_id] = "upstream_failed" if failed else "skipped"
            continue
        command = task.bash_command.replace(namespace["SIGNING_ETL"], signing_etl)
        cwd = (task.cwd or str(project)).replace(namespace["PROJECT"], str(project))
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        runs[task.task_id] = done
        code = done.returncode
        states[task.task_id] = (
            "success" if code == 0 else "skipped" if code == task.skip_on_exit_code else "failed"
        )
    return states, runs


def test_the_orchestration_guide_shows_the_example_dag_as_it_is() -> None:
    source = EXAMPLE.read_text()
    body = source.split('"""', 2)[2].strip()  # without the module's docstring
    assert body in GUIDE.read_text()


def test_the_example_dag_runs_nightly_with_one_run_at_a_time(
    example: tuple[Dag, dict[str, Any]],
) -> None:
    dag, _ = example
    assert dag.options["schedule"] == "15 2 * * *"
    assert dag.options["max_active_runs"] == 1
    assert [t.task_id for t in dag.tasks] == ["load", "models"]
    assert dag.tasks[1].upstream == [dag.tasks[0]]


def test_the_example_dag_maps_the_exit_codes_to_task_states(
    example: tuple[Dag, dict[str, Any]], make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    dag, namespace = example
    running = make_sandbox(shipments=60, daily_requests=40, **UNBOUND)
    warehouse = tmp_path / "warehouse" / "signing.duckdb"  # the CLI's default, in the project

    # The daily limit: the load is skipped, not failed, and the models are built from what
    # it fetched.
    states, runs = run_dag(dag, namespace, tmp_path, cli_env(running))
    assert states == {"load": "skipped", "models": "success"}, runs
    assert runs["load"].returncode == 75
    assert set(MARTS) <= mart_tables(warehouse)

    # A refused key: the load fails with its one line, the models wait.
    states, runs = run_dag(dag, namespace, tmp_path, cli_env(running, key="sk_test_refused"))
    assert states == {"load": "failed", "models": "upstream_failed"}, runs
    assert len(error_lines(runs["load"].stderr)) == 1

    # The next day: both succeed and the warehouse equals the sandbox.
    admin(running, "POST", "/advance", {"days": 1})
    admin(running, "PATCH", "/config", {"daily_requests": None})
    states, runs = run_dag(dag, namespace, tmp_path, cli_env(running))
    assert states == {"load": "success", "models": "success"}, runs
    assert differences(warehouse, running.store) == {}
