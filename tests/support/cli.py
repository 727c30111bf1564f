"""Running `signing-etl` as a user does: a subprocess configured only through the documented
environment variables, and reading what it printed."""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from sandbox import RunningSandbox

from .forked_cli import ForkedCli, starts_alike
from .loading import FAST
from .sandboxes import served

# The checks for deleted records on every run, and a full pass after 24 hours, as the suite's
# tests were written before these got a cadence (`count_check_every_hours`, default 6 hours;
# `full_check_max_age_hours`, default a week): "the next run notices" holds in them. Set for
# the test processes (`tests/conftest.py`) and every CLI run they start; the cadence's own
# tests (`tests/sources/test_check_cadence.py`) run with the defaults.
SUITE_CADENCE = {
    "SOURCES__SIGNING__COUNT_CHECK_EVERY_HOURS": "0",
    "SOURCES__SIGNING__FULL_CHECK_MAX_AGE_HOURS": "24",
}

# What the CLI logs on stderr every 15 s while a run works (not a TTY); not a message.
PROGRESS_LINE = re.compile(
    r'^(\S+Z INFO (run=\S+ )?(workspace=("[^"]*"|\S+) )?)?\s*\d+ s  [\d,]+ requests[ ,]'
)


def cli_env(
    running: RunningSandbox | None,
    *,
    key: str | None = None,
    requests_per_second: float = FAST.requests_per_second,
    burst: int = FAST.burst,
    page_size: int | None = None,
    give_up_after_seconds: float | None = None,
    deletes: str | None = None,
) -> dict[str, str]:
    """This process's environment without any dlt setting, plus the source's settings for
    `running` as `SOURCES__SIGNING__*` (none at all when `running` is None): its URL and key,
    the `FAST` pacing unless told otherwise, and the settings given. The terminal width is
    left unset, so output is laid out as in a cron log (80 columns, no TTY)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SOURCES__", "DESTINATION__", "RUNTIME__", "DLT_"))
        and name not in ("COLUMNS", "LINES")
    }
    env.update(SUITE_CADENCE)
    if running is None:
        return env
    values: dict[str, object | None] = {
        "api_key": key or running.api_key,
        "base_url": running.base_url,
        "requests_per_second": requests_per_second,
        "burst": burst,
        "page_size": page_size,
        "give_up_after_seconds": give_up_after_seconds,
        "deletes": deletes,
    }
    env.update(
        {f"SOURCES__SIGNING__{name.upper()}": str(v) for name, v in values.items() if v is not None}
    )
    return env


def workspaces_env(running: RunningSandbox, keys: dict[str, str]) -> dict[str, str]:
    """`cli_env(None)` plus named workspaces of one sandbox as a user configures them
    (`SOURCES__SIGNING__WORKSPACES__<NAME>__API_KEY`, one base URL), with the `FAST` pacing."""
    env = {
        **cli_env(None),
        "SOURCES__SIGNING__BASE_URL": running.base_url,
        "SOURCES__SIGNING__REQUESTS_PER_SECOND": str(FAST.requests_per_second),
        "SOURCES__SIGNING__BURST": str(FAST.burst),
    }
    for name, key in keys.items():
        env[f"SOURCES__SIGNING__WORKSPACES__{name.upper()}__API_KEY"] = key
    return env


def load_args(warehouse: Path, *options: str) -> list[str]:
    """`load` into `warehouse` without the dbt models (tests/models covers those)."""
    return ["load", "--duckdb", str(warehouse), "--no-models", *options]


# `load` into the PostgreSQL destination its environment configures, without the models.
POSTGRES_LOAD = ("load", "--destination", "postgres", "--no-models")


def run_cli(
    args: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`signing-etl ARGS` to the end, in a process of its own with `env` and `cwd` alone, as
    `run_fresh_cli` runs it, but forked from this test process's forking process
    (`tests/support/forked_cli.py`), so it skips the seconds of importing the CLI and dbt;
    commands from several threads run side by side. A command whose environment starts Python
    differently gets a fresh interpreter instead. Killed and reported if it outlives `timeout`
    (generous, since a load with its models on a shared, busy machine can take minutes)."""
    if not forks(env):
        return run_fresh_cli(args, cwd=cwd, env=env, timeout=timeout)
    return _forker().run(args, cwd=cwd, env=env, timeout=timeout)


# This process's forking process (one per pytest worker), started by the first command and
# again after a timeout ended it.
_STARTING = threading.Lock()
_FORKERS: list[ForkedCli] = []


def _forker() -> ForkedCli:
    """The forking process, started (or restarted) with this process's environment less
    dlt's settings (every command brings its own folder and environment)."""
    with _STARTING:
        if not _FORKERS or not _FORKERS[-1].alive:
            if _FORKERS:
                _FORKERS[-1].close()  # ended by a timeout: its folder of outputs goes with it
            else:
                atexit.register(lambda: _FORKERS[-1].close())
            _FORKERS.append(ForkedCli(Path(tempfile.gettempdir()), cli_env(None)))
        return _FORKERS[-1]


def run_fresh_cli(
    args: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`signing-etl ARGS` to the end in a fresh interpreter (`python -m pipelines.cli`),
    killed and reported if it outlives `timeout`."""
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Background(Protocol):
    """A command running in the background, as `start_cli` gives it: `subprocess.Popen`, or
    the forked `ForkedProcess`, which answers the same."""

    @property
    def pid(self) -> int: ...
    @property
    def args(self) -> Any: ...
    @property
    def returncode(self) -> int | Any: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def communicate(
        self, input: str | None = None, timeout: float | None = None
    ) -> tuple[str, str]: ...
    def send_signal(self, sent: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


def forks(env: Mapping[str, str]) -> bool:
    """Whether a command with `env` is forked (`run_cli`, `start_cli`): unless it starts
    Python differently from the forking process."""
    return starts_alike(env, _forker().env)


def start_cli(args: Sequence[str], *, cwd: Path, env: dict[str, str]) -> Background:
    """`signing-etl ARGS` in the background, forked as `run_cli` forks a command (its streams
    read by `communicate` once it ended); a fresh interpreter when `env` starts Python
    differently."""
    if not forks(env):
        return start_fresh_cli(args, cwd=cwd, env=env)
    return _forker().start(args, cwd=cwd, env=env)


def start_fresh_cli(
    args: Sequence[str], *, cwd: Path, env: dict[str, str]
) -> subprocess.Popen[str]:
    """`signing-etl ARGS` in the background in a fresh interpreter, its output piped: for a
    test that reads what it prints while it runs."""
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# An error as the CLI prints it: `error: ...` on a terminal, `<time> ERROR ...` in a log.
ERROR_LINE = re.compile(r"^(error: |\S+Z ERROR )")


def error_lines(stderr: str) -> list[str]:
    """The lines of stderr that report an error."""
    return [line for line in stderr.splitlines() if ERROR_LINE.match(line)]


# A warning or an error: what an operator reads first (the run's summary lines are INFO).
PROBLEM_LINE = re.compile(r"^(error: |warning: |\S+Z (ERROR|WARNING) )")


def problem_lines(stderr: str) -> list[str]:
    """The lines of stderr that report a failure, a stop or a warning."""
    return [line for line in stderr.splitlines() if PROBLEM_LINE.match(line)]


def message_lines(stderr: str) -> list[str]:
    """The non-empty lines of stderr that are not progress lines."""
    return [line for line in stderr.splitlines() if line.strip() and not PROGRESS_LINE.match(line)]


def describe(result: subprocess.CompletedProcess[str]) -> str:
    """Exit code and both streams, for assertion messages."""
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def status_document(warehouse: Path, *, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """`signing-etl status --format json` of a DuckDB warehouse, which must answer (exit 0)."""
    shown = run_cli(["status", "--duckdb", str(warehouse), "--format", "json"], cwd=cwd, env=env)
    assert shown.returncode == 0, describe(shown)
    document: dict[str, Any] = json.loads(shown.stdout)
    return document


def wait_for_requests(running: RunningSandbox, count: int, process: Background) -> None:
    """Block until the sandbox has answered `count` requests (the load is under way)."""
    deadline = time.monotonic() + 120
    while served(running) < count:
        assert process.poll() is None, "the load ended before it was stopped"
        assert time.monotonic() < deadline, "the load made no progress"
        time.sleep(0.05)


def finish(process: Background, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    stdout, stderr = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
