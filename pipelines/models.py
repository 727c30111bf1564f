"""Build the dbt models (`models/`) on a warehouse file: `dbt build` run in-process."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dbt.adapters.duckdb.connections import DuckDBConnectionManager
from dbt.artifacts.resources.types import NodeType
from dbt.artifacts.schemas.results import NodeStatus
from dbt.artifacts.schemas.run import RunExecutionResult
from dbt.cli.main import dbtRunner

PROJECT_DIR = Path(__file__).resolve().parent.parent / "models"
WAREHOUSE_VARIABLE = "SIGNING_WAREHOUSE"  # read by models/profiles.yml


@dataclass(frozen=True)
class ModelsResult:
    """What one `dbt build` did: node counts per outcome and the first error, if any."""

    success: bool
    models_passed: int = 0
    models_errored: int = 0
    models_skipped: int = 0
    tests_passed: int = 0
    tests_warned: int = 0
    tests_errored: int = 0
    tests_skipped: int = 0
    first_error: str | None = None
    seconds: float = 0.0

    @property
    def summary(self) -> str:
        """One line for a log or a terminal."""
        line = (
            f"models: {self.models_passed} built, {self.models_errored} errors, "
            f"{self.models_skipped} skipped; tests: {self.tests_passed} passed, "
            f"{self.tests_warned} warned, {self.tests_errored} errors, "
            f"{self.tests_skipped} skipped ({self.seconds:.1f} s)"
        )
        return f"{line}; first error: {self.first_error}" if self.first_error else line


def build_models(warehouse: Path, *, select: str | None = None, quiet: bool = True) -> ModelsResult:
    """Run `dbt build` (models, then their tests) of `models/` on a DuckDB warehouse.

    The project's committed `profiles.yml` reads the file from `SIGNING_WAREHOUSE`, which is
    set to the warehouse's absolute path for the run (and restored afterwards). dbt's target
    folder and logs stay under `models/target` and `models/logs`.

    Args:
        warehouse: the DuckDB file the dlt pipeline loaded (`raw` schema); the models write
            the `staging` and `marts` schemas into it.
        select: a dbt selection (`--select`), e.g. `"marts"` or `"+fct_shipments"`; all
            nodes when None.
        quiet: print only errors (dbt's `--quiet`); the full log is in `models/logs`.

    Returns:
        Success (no model or test error; warnings allowed), counts per node outcome, and the
        first error in one line.

    Raises:
        FileNotFoundError: the warehouse file does not exist (dbt would create an empty one).
    """
    warehouse = Path(warehouse).resolve()
    if not warehouse.is_file():
        raise FileNotFoundError(f"no warehouse at {warehouse}: load it first")
    args = [
        "build",
        "--project-dir",
        str(PROJECT_DIR),
        "--profiles-dir",
        str(PROJECT_DIR),
        "--target-path",
        str(PROJECT_DIR / "target"),
        "--log-path",
        str(PROJECT_DIR / "logs"),
        "--no-send-anonymous-usage-stats",
        "--no-use-colors",
    ]
    if quiet:
        args.append("--quiet")
    if select:
        args += ["--select", select]
    started = time.monotonic()
    try:
        with _environment(WAREHOUSE_VARIABLE, str(warehouse)):
            outcome = dbtRunner().invoke(args)
    finally:
        # dbt-duckdb keeps the file open in-process after a run, which would lock out the
        # next load in this process (duckdb/dbt-duckdb#616); release it.
        DuckDBConnectionManager.close_all_connections()  # type: ignore[no-untyped-call]
    seconds = time.monotonic() - started
    if isinstance(outcome.result, RunExecutionResult):
        return _count(outcome.result, outcome.success, seconds)
    reason = outcome.exception or "dbt build failed before running any node (see models/logs)"
    return ModelsResult(success=False, first_error=_one_line(str(reason)), seconds=seconds)


def _count(execution: RunExecutionResult, success: bool, seconds: float) -> ModelsResult:
    counts = {
        (kind, status): 0
        for kind in ("model", "test")
        for status in ("passed", "warned", "errored", "skipped")
    }
    first_error: str | None = None
    for result in execution.results:
        if result.node.resource_type not in (NodeType.Model, NodeType.Test, NodeType.Unit):
            continue  # seeds, snapshots, hooks: none in this project
        kind = "model" if result.node.resource_type is NodeType.Model else "test"
        status = {
            NodeStatus.Success: "passed",
            NodeStatus.Pass: "passed",
            NodeStatus.NoOp: "passed",
            NodeStatus.Warn: "warned",
            NodeStatus.Skipped: "skipped",
        }.get(NodeStatus(result.status), "errored")
        counts[kind, status] += 1
        if status == "errored" and first_error is None:
            first_error = _one_line(f"{result.node.name}: {result.message or result.status}")
    errored = counts["model", "errored"] + counts["test", "errored"]
    if not success and first_error is None:
        first_error = "dbt build did not succeed (see models/logs/dbt.log)"
    return ModelsResult(
        success=success and errored == 0,
        models_passed=counts["model", "passed"],
        models_errored=counts["model", "errored"],
        models_skipped=counts["model", "skipped"],
        tests_passed=counts["test", "passed"],
        tests_warned=counts["test", "warned"],
        tests_errored=counts["test", "errored"],
        tests_skipped=counts["test", "skipped"],
        first_error=first_error,
        seconds=seconds,
    )


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
