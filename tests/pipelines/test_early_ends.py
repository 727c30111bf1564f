"""Runs that end before the warehouse can take their record are still where `status` reads
them, with their reason, and fail `status --check`: a full disk (a small tmpfs; CI runs as
root, which may mount one), a writer without the hash key the warehouse's policy needs, and a
PostgreSQL server that cannot be reached (recorded in the journal beside the configured path,
and shown once the server answers again). Each over real HTTP against the sandbox.
"""

from __future__ import annotations

import errno
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from tests.support import SandboxFactory, admin, cli_env, describe, error_lines, run_cli
from tests.support.cli import load_args
from tests.support.postgres import PostgresServer
from tests.support.privacy import MINIMAL
from tests.support.webhooks import free_port

pytestmark = pytest.mark.slow  # CLI runs stopped at each step

DISK_BYTES = 48 * 1024 * 1024  # a first load of 20 shipments and its working copy fit


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a tmpfs of its own, unmounted afterwards."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"this machine does not let the tests mount a tmpfs: {mounted.stderr}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(filler: Path) -> None:
    """Fill the disk, then free a little: large writes (the copy analysts read) fail, a line
    of a journal still fits, as on a disk that is nearly full."""
    chunk = b"\0" * (1 << 16)
    with filler.open("wb") as fill:
        while _wrote(fill, chunk):
            pass
    with filler.open("rb+") as fill:
        fill.truncate(max(0, filler.stat().st_size - (256 << 10)))


def _wrote(fill: BinaryIO, chunk: bytes) -> bool:
    """Whether `chunk` still fitted on the disk."""
    try:
        fill.write(chunk)
        fill.flush()
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        return False
    return True


def _last_run_and_check(warehouse: Path, folder: Path, env: dict[str, str]) -> tuple[Any, str]:
    """The last run as `status --format json` shows it (the table shows it failed among the
    recent runs), and `status --check`'s one line (it must exit 1)."""
    args = ["status", "--duckdb", str(warehouse), *_place(env)]
    shown = run_cli([*args, "--format", "json"], cwd=folder, env=env)
    assert shown.returncode == 0, describe(shown)
    (workspace,) = json.loads(shown.stdout)["workspaces"]
    table = run_cli(args, cwd=folder, env=env)
    assert table.returncode == 0, describe(table)
    assert "Recent runs" in table.stdout
    assert "failed" in table.stdout  # the run, with its outcome, among the recent runs
    check = run_cli([*args, "--check"], cwd=folder, env=env)
    assert check.returncode == 1, describe(check)
    (line,) = error_lines(check.stderr)
    return workspace, line


def _place(env: dict[str, str]) -> list[str]:
    return ["--destination", "postgres"] if "DESTINATION__POSTGRES__CREDENTIALS" in env else []


def test_a_run_on_a_full_disk_is_in_status_and_fails_the_check(
    make_sandbox: SandboxFactory, small_disk: Path
) -> None:
    running = make_sandbox(shipments=20, limits_enabled=False)
    env = cli_env(running)
    warehouse = small_disk / "signing.duckdb"
    assert run_cli(load_args(warehouse), cwd=small_disk, env=env).returncode == 0
    filler = small_disk / "filler"
    _fill(filler)
    admin(running, "POST", "/advance", {"days": 3})  # something new to write

    full = run_cli(load_args(warehouse), cwd=small_disk, env=env)
    assert full.returncode == 1, describe(full)
    assert "Traceback" not in full.stderr
    filler.unlink()

    workspace, line = _last_run_and_check(warehouse, small_disk, env)
    assert workspace["last_run"]["outcome"] == "failed"
    assert workspace["last_run"]["reason"]
    assert workspace["health"] == "failed"
    assert "workspace default: last run failed: " in line
    assert run_cli(load_args(warehouse), cwd=small_disk, env=env).returncode == 0


def test_a_load_without_the_hash_key_is_in_status_and_fails_the_check(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    minimal = {**cli_env(running), **MINIMAL}
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=minimal).returncode == 0
    keyless = {k: v for k, v in minimal.items() if k != "SOURCES__SIGNING__PRIVACY__HASH_KEY"}

    refused = run_cli(load_args(warehouse), cwd=tmp_path, env=keyless)

    assert refused.returncode == 1, describe(refused)
    workspace, line = _last_run_and_check(warehouse, tmp_path, keyless)
    assert "SOURCES__SIGNING__PRIVACY__HASH_KEY" in workspace["last_run"]["reason"]
    assert "SOURCES__SIGNING__PRIVACY__HASH_KEY" in line


def test_a_run_whose_database_cannot_be_reached_is_journaled_and_shown(
    make_sandbox: SandboxFactory, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    database = postgres_server.create_database()
    env = {**cli_env(running), "DESTINATION__POSTGRES__CREDENTIALS": database.credentials}
    named = tmp_path / "signing.duckdb"  # where the journal goes, beside the configured path
    load = [*load_args(named), "--destination", "postgres"]
    assert run_cli(load, cwd=tmp_path, env=env).returncode == 0
    gone = database.credentials.replace(f":{database.port}/", f":{free_port()}/")

    down = run_cli(load, cwd=tmp_path, env={**env, "DESTINATION__POSTGRES__CREDENTIALS": gone})

    assert down.returncode == 1, describe(down)
    assert "Traceback" not in down.stderr
    assert database.password not in down.stderr
    workspace, line = _last_run_and_check(named, tmp_path, env)
    assert workspace["last_run"]["outcome"] == "failed"
    assert "workspace default: last run failed: " in line
    assert database.password not in json.dumps(workspace)
