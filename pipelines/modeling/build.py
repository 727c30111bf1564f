"""Build the dbt models (`models/`) on a warehouse: `dbt build` run in-process."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from dbt.artifacts.resources.types import NodeType
from dbt.artifacts.schemas.results import NodeStatus
from dbt.artifacts.schemas.run import RunExecutionResult
from dbt.cli.main import dbtRunner

from pipelines.errors import ModelsError, ModelsUnreachable
from pipelines.modeling.parse_cache import cached_parse, keep_parse, parse_key
from pipelines.modeling.record import ModelBuild, new_build_id, record_build
from pipelines.shipped import shipped
from pipelines.warehouse import DbtTarget, Warehouse

PROJECT_DIR = shipped("models")
# What a build runs: `build` (models, snapshots, tests) or `run` (models alone).
DbtCommand = Literal["build", "run"]
WARNED_NAMED = 5  # warned tests named in the summary line (all of them in the build's record)
# A build after a load checks the data (dbt's data tests), not the models' SQL: dbt's unit tests
# give the same answer on every warehouse, cost a tenth of a build, and run where the SQL
# changes (`signing-etl models --unit-tests`, the suite's tests/models), as dbt advises.
WITHOUT_UNIT_TESTS = ("--exclude-resource-type", "unit_test")
_BUILT = frozenset({NodeType.Model.value, NodeType.Snapshot.value})
_TESTS = frozenset({NodeType.Test.value, NodeType.Unit.value})
# dbt's node statuses as a build's summary counts them; any other (error, fail, runtime error,
# partial success) is an error.
_STATUSES = {
    NodeStatus.Success.value: "passed",
    NodeStatus.Pass.value: "passed",
    NodeStatus.NoOp.value: "passed",
    NodeStatus.Warn.value: "warned",
    NodeStatus.Skipped.value: "skipped",
}


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
    log_file: Path | None = None
    errored: tuple[str, ...] = ()  # the models and tests that failed, by name
    warned: tuple[str, ...] = ()  # the tests that warned, by name

    @property
    def nodes(self) -> int:
        """The models, snapshots and tests the build ran, whatever their outcome."""
        models = self.models_passed + self.models_errored + self.models_skipped
        return (
            models + self.tests_passed + self.tests_warned + self.tests_errored + self.tests_skipped
        )

    @property
    def summary(self) -> str:
        """One line for a log or a terminal (with where dbt's full log is, on a failure)."""
        line = (
            f"models: {self.models_passed} built, {self.models_errored} errors, "
            f"{self.models_skipped} skipped; tests: {self.tests_passed} passed, "
            f"{self.tests_warned} warned, {self.tests_errored} errors, "
            f"{self.tests_skipped} skipped ({self.seconds:.1f} s)"
        )
        if self.warned:
            named = ", ".join(self.warned[:WARNED_NAMED])
            more = len(self.warned) - WARNED_NAMED
            line = f"{line}; warned: {named}" + (f" and {more} more" if more > 0 else "")
        if self.first_error:
            line = f"{line}; first error: {self.first_error}"
        if not self.success and self.log_file is not None:
            line = f"{line}; details in {self.log_file}"
        return line


def dbt_dir_for(warehouse: Warehouse | Path) -> Path:
    """dbt's working folder (`target/`, `logs/`) beside the warehouse (`Warehouse.dbt_dir`)."""
    return Warehouse.of(warehouse).dbt_dir


def build_models(
    warehouse: Warehouse | Path,
    *,
    select: str | None = None,
    quiet: bool = True,
    unit_tests: bool = False,
    on_start: Callable[[], None] | None = None,
) -> ModelsResult:
    """Run `dbt build` (models, then their tests) of `models/` on the warehouse: a DuckDB file,
    or the database of dlt's `postgres` destination (its dbt target is chosen by the warehouse,
    with the credentials the load uses; the user writes no profile).

    The project's committed `profiles.yml` reads the DuckDB file from `SIGNING_WAREHOUSE`,
    set to its absolute path for the run (and restored afterwards). dbt's target folder and
    logs go beside the warehouse: `<folder>/.<stem>.dbt/target` and `.../logs`.

    Args:
        warehouse: the warehouse the dlt pipeline loaded (`raw` schema), or a DuckDB file's
            path; the models write the `staging` and `marts` schemas into it.
        select: a dbt selection (`--select`), e.g. `"marts"` or `"+fct_shipments"`; all
            nodes when None.
        quiet: print nothing (dbt's console log off; the result says what failed and where
            the full log is); False prints dbt's usual progress.
        unit_tests: also run dbt's unit tests of the models' SQL (counted as tests).
        on_start: called once the warehouse passed its checks, as dbt starts (a progress
            line; a build refused before that says only why).

    Returns:
        Success (no model or test error; warnings allowed), counts per node outcome, the
        first error in one line, and dbt's log file.

    Raises:
        ModelsError: the warehouse cannot be used at all (`Warehouse.check_for_models`), or
            its dbt target cannot be built (`Warehouse.dbt_target`): one line with a hint,
            never the credentials; nothing was run. A server that refuses the connection is
            a failed result, not an error. A missing DuckDB file is also a
            `FileNotFoundError`.
    """
    try:
        with recorded_build(warehouse) as build:
            if on_start is not None:
                on_start()
            result = _build(
                build.place, build.target, select, quiet, "build", unit_tests=unit_tests
            )
            build.result = result
    except ModelsUnreachable as refused:  # on record already, as dbt's own refusal would be
        return ModelsResult(False, first_error=str(refused))
    return result


def run_models(warehouse: Warehouse | Path, select: str) -> ModelsResult:
    """`dbt run` of the selected models alone, no test, and not on record as a build: the
    marts refreshed after a webhook drain (`refresh_marts`) check nothing, so they neither
    clear a failed build from `status` nor stand in for the next scheduled one.

    Raises:
        ModelsError: as `build_models`, and not on record either.
    """
    place = Warehouse.of(warehouse)
    with _ready_for_dbt(place) as target:
        result = _build(place, target, select, True, "run", unit_tests=False)
    place.release_dbt()
    return result


@dataclass
class BuildOnRecord:
    """One build inside `recorded_build`: where dbt runs, and what it did (`result`, set by
    whoever ran dbt; a build that ends without one, interrupted, is not recorded)."""

    place: Warehouse
    target: DbtTarget
    result: ModelsResult | None = None


@contextlib.contextmanager
def recorded_build(warehouse: Warehouse | Path) -> Iterator[BuildOnRecord]:
    """A model build on the warehouse, kept on record where `status` reads it: the one way in
    for every build, dbt in this process (`build_models`) or Dagster's dbt
    (`orchestration.modeling`), so none can skip the record.

    The block runs with dbt's target environment set (`Warehouse.for_dbt`) once the warehouse
    passed `check_for_models`; its `result` is recorded in the working file (published with
    what the build wrote) and, for a failure, in the journal. A warehouse or target refused
    before anything ran is on record as a failed build, and its `ModelsError` raised.
    """
    place = Warehouse.of(warehouse)
    started = datetime.now(UTC)
    build: BuildOnRecord | None = None
    try:
        with _ready_for_dbt(place) as target:
            build = BuildOnRecord(place, target)
            try:
                yield build
            finally:
                if build.result is not None:
                    place.release_dbt()
                    record_build(place, _as_build(started, build.result))
    except ModelsError as error:
        if build is None:  # nothing was built: on record (in the journal) all the same
            refused = _as_build(started, ModelsResult(False, first_error=str(error)))
            record_build(place, refused, held=False)
        raise


@contextlib.contextmanager
def _ready_for_dbt(place: Warehouse) -> Iterator[DbtTarget]:
    """dbt's target environment set, once the warehouse passed `check_for_models`."""
    with place.for_dbt() as target:
        place.check_for_models()
        yield target


def _as_build(started: datetime, result: ModelsResult) -> ModelBuild:
    """The build's record, as `status` reads it."""
    return ModelBuild(
        build_id=new_build_id(),
        started_at=started,
        finished_at=datetime.now(UTC),
        success=result.success,
        models_built=result.models_passed,
        models_errored=result.models_errored,
        tests_passed=result.tests_passed,
        tests_warned=result.tests_warned,
        tests_errored=result.tests_errored,
        errored=list(result.errored),
        warned=list(result.warned),
        first_error=result.first_error,
    )


def _build(
    warehouse: Warehouse,
    target: DbtTarget,
    select: str | None,
    quiet: bool,
    command: DbtCommand,
    *,
    unit_tests: bool,
) -> ModelsResult:
    """`dbt build` (or `dbt run`) in this process, with the target's environment already set."""
    work_dir = warehouse.dbt_dir
    log_dir = work_dir / "logs"
    args = [
        command,
        "--project-dir",
        str(PROJECT_DIR),
        "--profiles-dir",
        str(PROJECT_DIR),
        "--target-path",
        str(work_dir / "target"),
        "--log-path",
        str(log_dir),
        "--no-send-anonymous-usage-stats",
        "--no-use-colors",
    ]
    if quiet:
        # Nothing on the console, errors and tracebacks included; the file keeps everything.
        args += ["--log-level", "none", "--log-level-file", "debug"]
    if select:
        # A part of the models runs the tests it can: dbt's default (`eager`) also runs a test
        # whose other model is outside the selection, which fails on a warehouse where that
        # model was never built.
        args += ["--select", select, "--indirect-selection", "buildable"]
    if command == "build" and not unit_tests:
        args += WITHOUT_UNIT_TESTS
    if target.name:
        args += ["--target", target.name]
    started = time.monotonic()
    key = parse_key(PROJECT_DIR, target.name, target.environment)
    parsed = cached_parse(key)
    with neutral_argv(command):
        outcome = dbtRunner(manifest=parsed).invoke(args)
    seconds = time.monotonic() - started
    log_file = log_dir / "dbt.log"
    if isinstance(outcome.result, RunExecutionResult):
        if parsed is None:  # dbt parsed, and the project was valid: kept for the next folder
            keep_parse(key, work_dir / "target")
        return _count(_outcomes(outcome.result), outcome.success, seconds, log_file)
    reason = outcome.exception or "dbt build failed before running any node"
    return ModelsResult(
        success=False, first_error=_one_line(str(reason)), seconds=seconds, log_file=log_file
    )


@contextlib.contextmanager
def neutral_argv(command: str) -> Iterator[None]:
    """dbt writes `sys.argv` into `run_results.json` and its log as the command that started
    it (`invocation_command`), also when run in this process: it sees `dbt build` instead of
    our command line, whose values (`forget --email`, a path, a query) must reach no file."""
    ours = sys.argv
    sys.argv = ["dbt", command]
    try:
        yield
    finally:
        sys.argv = ours


@dataclass(frozen=True)
class NodeOutcome:
    """One node of a build as dbt reported it, in this process or in `run_results.json`."""

    resource_type: str  # dbt's NodeType value: model, snapshot, test, unit_test, ...
    status: str  # dbt's NodeStatus value: success, pass, warn, error, fail, skipped, ...
    name: str
    message: str | None = None


def result_of_run_results(
    run_results: Mapping[str, Any],
    manifest: Mapping[str, Any],
    *,
    success: bool,
    seconds: float,
    log_file: Path | None,
) -> ModelsResult:
    """What a build in another process did, from the `run_results.json` it wrote and the
    manifest it ran (the nodes' names and kinds), counted as a build in this process is."""
    known = {**manifest.get("nodes", {}), **manifest.get("unit_tests", {})}
    outcomes = []
    for entry in run_results.get("results", []):
        unique_id = str(entry.get("unique_id", ""))
        node = known.get(unique_id, {})
        outcomes.append(
            NodeOutcome(
                resource_type=str(node.get("resource_type") or unique_id.split(".")[0]),
                status=str(entry.get("status")),
                name=str(node.get("name") or unique_id),
                message=entry.get("message"),
            )
        )
    return _count(outcomes, success, seconds, log_file)


def _outcomes(execution: RunExecutionResult) -> list[NodeOutcome]:
    return [
        NodeOutcome(
            NodeType(result.node.resource_type).value,
            NodeStatus(result.status).value,
            result.node.name,
            result.message,
        )
        for result in execution.results
    ]


def _count(
    outcomes: Iterable[NodeOutcome], success: bool, seconds: float, log_file: Path | None
) -> ModelsResult:
    counts = {
        (kind, status): 0
        for kind in ("model", "test")
        for status in ("passed", "warned", "errored", "skipped")
    }
    first_error: str | None = None
    named: dict[str, list[str]] = {"errored": [], "warned": []}
    for outcome in outcomes:
        if outcome.resource_type in _BUILT:
            kind = "model"  # a snapshot (versions of shipments, ...) is built like a model
        elif outcome.resource_type in _TESTS:
            kind = "test"
        else:
            continue  # seeds, hooks: none in this project
        status = _STATUSES.get(outcome.status, "errored")
        counts[kind, status] += 1
        if status in named:
            named[status].append(outcome.name)
        if status == "errored" and first_error is None:
            first_error = _one_line(f"{outcome.name}: {outcome.message or outcome.status}")
    errored = counts["model", "errored"] + counts["test", "errored"]
    if not success and first_error is None:
        first_error = "dbt build did not succeed"
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
        log_file=log_file,
        errored=tuple(named["errored"]),
        warned=tuple(named["warned"]),
    )


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
