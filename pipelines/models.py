"""Build the dbt models (`models/`) on a warehouse file: `dbt build` run in-process."""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dlt
import duckdb
from dbt.adapters.duckdb.connections import DuckDBConnectionManager
from dbt.artifacts.resources.types import NodeType
from dbt.artifacts.schemas.results import NodeStatus
from dbt.artifacts.schemas.run import RunExecutionResult
from dbt.cli.main import dbtRunner

PROJECT_DIR = Path(__file__).resolve().parent.parent / "models"
WAREHOUSE_VARIABLE = "SIGNING_WAREHOUSE"  # read by models/profiles.yml


class ModelsError(Exception):
    """The models cannot run on this warehouse at all (missing, unreadable, not DuckDB, in a
    folder that cannot be written); the message is one line that says why and what to do."""


class WarehouseMissing(ModelsError, FileNotFoundError):
    """There is no warehouse file at the path (dbt would create an empty one)."""


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

    @property
    def summary(self) -> str:
        """One line for a log or a terminal (with where dbt's full log is, on a failure)."""
        line = (
            f"models: {self.models_passed} built, {self.models_errored} errors, "
            f"{self.models_skipped} skipped; tests: {self.tests_passed} passed, "
            f"{self.tests_warned} warned, {self.tests_errored} errors, "
            f"{self.tests_skipped} skipped ({self.seconds:.1f} s)"
        )
        if self.first_error:
            line = f"{line}; first error: {self.first_error}"
        if not self.success and self.log_file is not None:
            line = f"{line}; details in {self.log_file}"
        return line


def dbt_dir_for(warehouse: Path) -> Path:
    """dbt's working folder (`target/`, `logs/`) lives beside its warehouse, like the
    pipeline's `.<stem>.dlt`: builds of two warehouses never share artifacts, and nothing is
    written into the code folder `models/`."""
    return warehouse.parent / f".{warehouse.stem}.dbt"


def build_models(
    warehouse: Path,
    *,
    select: str | None = None,
    quiet: bool = True,
    destination: str = "duckdb",
) -> ModelsResult:
    """Run `dbt build` (models, then their tests) of `models/` on the warehouse: a DuckDB file,
    or the Postgres database of dlt's `postgres` destination (its dbt target is chosen here,
    with the credentials the load uses; the user writes no profile).

    The project's committed `profiles.yml` reads the file from `SIGNING_WAREHOUSE`, which is
    set to the warehouse's absolute path for the run (and restored afterwards). dbt's target
    folder and logs go beside the warehouse: `<folder>/.<stem>.dbt/target` and `.../logs`.

    Args:
        warehouse: the DuckDB file the dlt pipeline loaded (`raw` schema); the models write
            the `staging` and `marts` schemas into it.
        select: a dbt selection (`--select`), e.g. `"marts"` or `"+fct_shipments"`; all
            nodes when None.
        quiet: print nothing (dbt's console log off; the result says what failed and where
            the full log is); False prints dbt's usual progress.
        destination: "duckdb" or "postgres"; dbt's folder stays beside `warehouse` for both.

    Returns:
        Success (no model or test error; warnings allowed), counts per node outcome, the
        first error in one line, and dbt's log file.

    Raises:
        WarehouseMissing: the warehouse file does not exist (also a `FileNotFoundError`).
        ModelsError: the warehouse cannot be used at all: a folder, not a DuckDB file, held by
            another process, or in a folder dbt and DuckDB cannot write in; on Postgres, no
            dbt-postgres, or dlt's credentials missing, unparsable or with an option dbt does
            not take. The message is one line with a hint (never the credentials); nothing
            was run. A server that refuses the connection is a failed result, not an error.
    """
    warehouse = Path(warehouse).resolve()
    work_dir = dbt_dir_for(warehouse)
    target = _target_environment(destination)
    if destination == "duckdb":
        check_warehouse(warehouse)
    else:
        work_dir.mkdir(parents=True, exist_ok=True)
    log_dir = work_dir / "logs"
    args = [
        "build",
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
        args += ["--select", select]
    if destination != "duckdb":
        args += ["--target", destination]
    started = time.monotonic()
    try:
        with environment_set({WAREHOUSE_VARIABLE: str(warehouse), **target}):
            outcome = dbtRunner().invoke(args)
    finally:
        # dbt-duckdb keeps the file open in-process after a run, which would lock out the
        # next load in this process (duckdb/dbt-duckdb#616); release it.
        DuckDBConnectionManager.close_all_connections()  # type: ignore[no-untyped-call]
    seconds = time.monotonic() - started
    log_file = log_dir / "dbt.log"
    if isinstance(outcome.result, RunExecutionResult):
        return _count(outcome.result, outcome.success, seconds, log_file)
    reason = outcome.exception or "dbt build failed before running any node"
    return ModelsResult(
        success=False, first_error=_one_line(str(reason)), seconds=seconds, log_file=log_file
    )


def _target_environment(destination: str) -> dict[str, str]:
    """The environment the dbt target of `destination` reads (profiles.yml), from the dlt
    configuration the load uses; a one-line ModelsError when it cannot be built."""
    if destination == "duckdb":
        return {}
    if destination != "postgres":
        raise ModelsError(
            f"the models build on duckdb and postgres; for {destination}, run dbt with a "
            "profile of your own on the `raw` dataset"
        )
    if importlib.util.find_spec("dbt.adapters.postgres") is None:
        raise ModelsError(
            "dbt's postgres adapter is not installed: `uv sync` (or pip install dbt-postgres)"
        )
    credentials = _postgres_credentials()
    environment = {
        "SIGNING_PG_HOST": str(credentials.host),
        "SIGNING_PG_PORT": str(credentials.port or 5432),
        "SIGNING_PG_USER": str(credentials.username),
        "DBT_ENV_SECRET_SIGNING_PG_PASSWORD": str(credentials.password or ""),
        "SIGNING_PG_DATABASE": str(credentials.database),
        "SIGNING_PG_CONNECT_TIMEOUT": str(credentials.connect_timeout or 15),
    }
    # Options of the connection string (`?sslmode=verify-full&sslrootcert=...`) reach libpq as
    # its environment variables, which apply to whatever dbt's profile leaves unset.
    for name, value in (credentials.query or {}).items():
        if name in LIBPQ_ENVIRONMENT:
            environment[LIBPQ_ENVIRONMENT[name]] = str(value)
        elif name != "connect_timeout":
            raise ModelsError(
                f"the Postgres credentials' option {name!r} is not passed on to dbt; "
                f"the models take {', '.join(sorted(LIBPQ_ENVIRONMENT))} and connect_timeout"
            )
    return environment


# Connection-string options the dbt target takes, and the libpq variable each becomes.
LIBPQ_ENVIRONMENT = {
    "sslmode": "PGSSLMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslcrl": "PGSSLCRL",
    "channel_binding": "PGCHANNELBINDING",
    "gssencmode": "PGGSSENCMODE",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
    "options": "PGOPTIONS",
    "client_encoding": "PGCLIENTENCODING",
    "application_name": "PGAPPNAME",
}


def _postgres_credentials() -> Any:
    """dlt's `postgres` destination credentials, resolved as a load resolves them (a connection
    string or field by field, from `.dlt/secrets.toml` or the environment)."""
    from dlt.common.configuration.exceptions import ConfigurationException
    from dlt.destinations.impl.postgres.configuration import PostgresClientConfiguration

    hint = (
        "set DESTINATION__POSTGRES__CREDENTIALS=postgresql://user:password@host:port/database "
        "(or [destination.postgres.credentials] in .dlt/secrets.toml), as for the load"
    )
    try:
        configuration = dlt.destinations.postgres().configuration(
            PostgresClientConfiguration(), accept_partial=True
        )
    except ConfigurationException:
        # dlt's message may quote the value; say only what is wrong with it.
        raise ModelsError(f"the Postgres credentials are not a connection string: {hint}") from None
    credentials = configuration.credentials
    if credentials is None or not credentials.is_resolved():
        missing = [
            name
            for name in ("host", "username", "password", "database")
            if credentials is None or getattr(credentials, name) is None
        ]
        raise ModelsError(f"no Postgres credentials ({', '.join(missing)} missing): {hint}")
    return credentials


def check_warehouse(warehouse: Path) -> None:
    """Fail in one line, before dbt starts, when the models cannot run on `warehouse`.

    Creates dbt's folder beside the warehouse (`dbt_dir_for`) on the way.

    Raises:
        WarehouseMissing: no file at `warehouse`.
        ModelsError: a folder, a file DuckDB cannot open (not a database, another process
            holds it, no permission), or a folder that cannot be written in (DuckDB writes its
            `.wal` there, dbt its target and logs).
    """
    if not warehouse.exists():
        raise WarehouseMissing(
            f"no warehouse at {warehouse}: load it first (`signing-etl load`), or point "
            "--duckdb at an existing one"
        )
    if not warehouse.is_file():
        raise ModelsError(f"{warehouse} is a folder, not a warehouse: point --duckdb at the file")
    folder = warehouse.parent
    try:
        for name in ("target", "logs"):
            (dbt_dir_for(warehouse) / name).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ModelsError(
            f"cannot write in {folder} ({error.strerror or error}): the models write beside "
            "the warehouse; make the folder writable, or copy the warehouse to one that is"
        ) from None
    try:
        duckdb.connect(str(warehouse)).close()
    except duckdb.Error as error:
        reason = _one_line(str(error).splitlines()[0] if str(error) else type(error).__name__)
        if "not a valid DuckDB database" in reason:
            hint = "it is not a DuckDB file: point --duckdb at the one `signing-etl load` wrote"
        elif "lock" in reason.lower():
            hint = "another process has it open: try again once it has finished"
        else:
            hint = "check the file, or load a new warehouse with `signing-etl load`"
        raise ModelsError(f"cannot open the warehouse {warehouse} ({reason}); {hint}") from None


def _count(
    execution: RunExecutionResult, success: bool, seconds: float, log_file: Path
) -> ModelsResult:
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
    )


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@contextmanager
def environment_set(values: Mapping[str, str]) -> Iterator[None]:
    """These environment variables set while the block runs, as they were afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
