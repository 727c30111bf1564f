"""Helpers for tests that drive `signing-etl` as a user does: a subprocess configured only
through the documented environment variables, against a sandbox over real HTTP."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import httpx

from pipelines.signing_pipeline import SOURCE_TABLES
from sandbox import RunningSandbox

# What the CLI prints on stderr every 15 s while a run works (not a TTY); not a message.
PROGRESS_LINE = re.compile(r"^\s*\d+ s  [\d,]+ requests, ")


def cli_env(
    running: RunningSandbox | None,
    *,
    key: str | None = None,
    requests_per_second: float = 2000,
    burst: int = 200,
    **settings: Any,
) -> dict[str, str]:
    """This process's environment without any dlt setting, plus the source's settings for
    `running` as `SOURCES__SIGNING__*` (none at all when `running` is None). The terminal width
    is left unset, so output is laid out as in a cron log (80 columns, no TTY)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SOURCES__", "DESTINATION__", "RUNTIME__", "DLT_"))
        and name not in ("COLUMNS", "LINES")
    }
    if running is None:
        return env
    values: dict[str, Any] = {
        "api_key": key or running.api_key,
        "base_url": running.base_url,
        "requests_per_second": requests_per_second,
        "burst": burst,
        **settings,
    }
    env.update({f"SOURCES__SIGNING__{name.upper()}": str(v) for name, v in values.items()})
    return env


def load_args(warehouse: Path, *options: str) -> list[str]:
    """`load` into `warehouse` without the dbt models (tests/models covers those)."""
    return ["load", "--duckdb", str(warehouse), "--no-models", *options]


def run_cli(
    args: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`signing-etl ARGS` to the end (killed and reported if it outlives `timeout`)."""
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_cli(args: Sequence[str], *, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`signing-etl ARGS` in the background, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def message_lines(stderr: str) -> list[str]:
    """The non-empty lines of stderr that are not progress lines."""
    return [line for line in stderr.splitlines() if line.strip() and not PROGRESS_LINE.match(line)]


def describe(result: subprocess.CompletedProcess[str]) -> str:
    """Exit code and both streams, for assertion messages."""
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def admin(running: RunningSandbox, method: str, path: str, body: Any = None) -> Any:
    """Call a `/_sandbox` admin endpoint and return its JSON answer."""
    response = httpx.request(method, f"{running.root_url}/_sandbox{path}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def raw_row_counts(warehouse: Path) -> dict[str, int]:
    """Rows per source table of `raw` (tables not created yet are left out)."""
    if not warehouse.exists():
        return {}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        existing = {
            row[0]
            for row in connection.execute(
                "select table_name from information_schema.tables where table_schema = 'raw'"
            ).fetchall()
        }
        counts: dict[str, int] = {}
        for table in SOURCE_TABLES:
            if table in existing:
                found = connection.execute(f'select count(*) from raw."{table}"').fetchone()
                counts[table] = int(found[0]) if found else 0
    return counts
