"""Every way a load can stop, driven as a scheduler would: the CLI in a subprocess against a
sandbox over real HTTP. Each stop keeps what was fetched, exits with its documented code and
one line, and the next run ends equal to the sandbox."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pipelines.status.read import read_status
from sandbox import RunningSandbox, SandboxConfig
from tests.support import (
    MARTS,
    START_MS,
    SandboxFactory,
    admin,
    cli_env,
    describe,
    differences,
    duplicate_keys,
    finish,
    load_args,
    mart_tables,
    message_lines,
    new_key,
    problem_lines,
    raw_row_counts,
    run_cli,
    served,
    start_cli,
    wait_for_requests,
)

pytestmark = pytest.mark.slow  # CLI loads stopped and resumed


def test_a_first_load_stopped_by_its_budget_exits_75_with_every_mart_built_and_tested(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=120, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    env = cli_env(running)
    # About half a first load (120 shipments need ~260 requests): some shipments are loaded
    # with their children still to come.
    first = run_cli(
        ["load", "--duckdb", str(warehouse), "--max-requests", "150"],
        cwd=tmp_path,
        env=env,
        timeout=600,
    )

    assert first.returncode == 75, describe(first)
    assert "request budget" in first.stderr, describe(first)
    assert set(MARTS) <= mart_tables(warehouse), describe(first)
    assert "tests:" in first.stderr, describe(first)
    assert " 0 errors" in first.stderr, describe(first)

    # The next run is asked only for raw equal to the sandbox: its models would cost a second
    # dbt build that nothing here reads.
    second = run_cli(load_args(warehouse), cwd=tmp_path, env=env, timeout=600)
    assert second.returncode == 0, describe(second)
    assert differences(warehouse, running.store) == {}


# The sandbox the signalled loads read: its data follows from its settings alone.
SIGNALLED: dict[str, Any] = {"shipments": 150, "limits_enabled": False}


@pytest.fixture(scope="module")
def whole_load_requests(tmp_path_factory: pytest.TempPathFactory) -> int:
    """The requests a whole first load of a `SIGNALLED` sandbox makes, counted once for both
    signals: each test's own sandbox has the same data, so the same whole load."""
    folder = tmp_path_factory.mktemp("whole")
    with RunningSandbox(SandboxConfig(start_ms=START_MS, **SIGNALLED)) as running:
        whole = run_cli(load_args(folder / "whole.duckdb"), cwd=folder, env=cli_env(running))
        assert whole.returncode == 0, describe(whole)
        return served(running)


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_load_keeps_what_was_fetched_and_the_next_run_continues(
    make_sandbox: SandboxFactory,
    whole_load_requests: int,
    tmp_path: Path,
    sent: signal.Signals,
    code: int,
) -> None:
    running = make_sandbox(**SIGNALLED)
    env = cli_env(running)
    whole_requests = whole_load_requests

    warehouse = tmp_path / "signing.duckdb"
    slow = cli_env(running, requests_per_second=40, burst=5)
    process = start_cli(load_args(warehouse), cwd=tmp_path, env=slow)
    wait_for_requests(running, 80, process)  # a fresh sandbox: none served before this load
    process.send_signal(sent)
    stopped = finish(process, timeout=60)

    assert stopped.returncode == code, describe(stopped)
    assert "Traceback" not in stopped.stderr, describe(stopped)
    assert sum(raw_row_counts(warehouse).values()) > 0, describe(stopped)  # what was fetched
    assert read_status(warehouse).last_run.outcome == "stopped"  # type: ignore[union-attr]

    before = served(running)
    resumed = run_cli(load_args(warehouse), cwd=tmp_path, env=env)
    assert resumed.returncode == 0, describe(resumed)
    assert served(running) - before < whole_requests
    assert differences(warehouse, running.store) == {}
    assert duplicate_keys(warehouse) == {}


def test_a_service_that_goes_away_is_given_up_on_naming_the_host_and_fetched_rows_stay(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=150, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    slow = cli_env(running, requests_per_second=40, burst=5, give_up_after_seconds=3)
    process = start_cli(load_args(warehouse), cwd=tmp_path, env=slow)
    wait_for_requests(running, 80, process)
    running.stop()
    try:
        gone = finish(process, timeout=120)
    finally:
        running.start()

    assert gone.returncode == 1, describe(gone)
    assert "Traceback" not in gone.stderr, describe(gone)
    lines = problem_lines(gone.stderr)
    assert len(lines) == 1, describe(gone)
    assert f"127.0.0.1:{running.port}" in lines[0], describe(gone)
    assert sum(raw_row_counts(warehouse).values()) > 0, describe(gone)
    shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=slow)
    last_run = next(line for line in shown.stdout.splitlines() if line.startswith("Last run:"))
    # One line, however long, in a log: its end is not wrapped onto the next line.
    assert "failed (gave up on 127.0.0.1" in last_run, describe(shown)
    assert last_run.rstrip().endswith("waited for limits"), describe(shown)
    assert len(last_run) > 80, describe(shown)

    again = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running))
    assert again.returncode == 0, describe(again)
    assert differences(warehouse, running.store) == {}


def test_a_key_revoked_mid_run_stops_every_thread_at_its_first_refusal(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=150, limits_enabled=False)
    key = new_key(running, name="nightly", scopes=["read"])
    warehouse = tmp_path / "signing.duckdb"
    slow = cli_env(running, key=key, requests_per_second=60, burst=10)
    process = start_cli(load_args(warehouse), cwd=tmp_path, env=slow)
    wait_for_requests(running, 80, process)
    admin(running, "POST", "/keys/revoke", {"key": key})
    revoked_at = served(running)
    refused = finish(process, timeout=60)

    assert refused.returncode == 1, describe(refused)
    assert "401" in refused.stderr, describe(refused)
    # Only the requests already in flight (8 child threads and one list) meet the refusal.
    assert served(running) - revoked_at <= 10, describe(refused)
    assert sum(raw_row_counts(warehouse).values()) > 0, describe(refused)
    assert key not in refused.stdout + refused.stderr


def test_a_read_only_key_refused_on_webhooks_loads_everything_else_with_a_warning(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=40, limits_enabled=False, webhooks_list_scope="write")
    key = new_key(running, name="read only", scopes=["read"])
    warehouse = tmp_path / "signing.duckdb"
    result = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running, key=key))

    assert result.returncode == 0, describe(result)
    warnings = [line for line in message_lines(result.stderr) if "webhooks" in line]
    assert len(warnings) == 1, describe(result)
    assert "write" in warnings[0], describe(result)
    found = differences(warehouse, running.store)
    assert set(found) <= {"webhooks"}, found
    assert "webhooks" not in raw_row_counts(warehouse) or not running.store.webhooks


# ---------------------------------------------------------------------- bad input
def leaves_nothing(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir()) == [], sorted(folder.iterdir())


def one_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    lines = message_lines(result.stderr)
    assert len(lines) == 1, describe(result)
    for needle in needles:
        assert needle in lines[0], describe(result)


def test_a_base_url_without_v1_says_so_and_leaves_nothing(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    folder = tmp_path / "warehouse"
    folder.mkdir()
    env = {**cli_env(running), "SOURCES__SIGNING__BASE_URL": running.root_url}
    result = run_cli(load_args(folder / "signing.duckdb"), cwd=tmp_path, env=env)
    one_line(result, "/v1", "SOURCES__SIGNING__BASE_URL")
    leaves_nothing(folder)


def test_a_refused_key_leaves_no_warehouse_state_or_lock(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    folder = tmp_path / "warehouse"
    folder.mkdir()
    env = cli_env(running, key="sk_live_" + "0" * 40)
    result = run_cli(load_args(folder / "signing.duckdb"), cwd=tmp_path, env=env)
    one_line(result, "401")
    leaves_nothing(folder)


def test_an_unreachable_host_is_named_within_the_give_up_time(tmp_path: Path) -> None:
    folder = tmp_path / "warehouse"
    folder.mkdir()
    env = {
        **cli_env(None),
        "SOURCES__SIGNING__API_KEY": "sk_live_x",
        "SOURCES__SIGNING__BASE_URL": "http://127.0.0.1:9/v1",  # discard port: refused
        "SOURCES__SIGNING__GIVE_UP_AFTER_SECONDS": "2",
    }
    result = run_cli(load_args(folder / "signing.duckdb"), cwd=tmp_path, env=env)
    one_line(result, "127.0.0.1:9")
    leaves_nothing(folder)


def test_an_unwritable_folder_or_a_corrupt_file_is_one_line_and_untouched(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    env = cli_env(running)
    unwritable = run_cli(load_args(Path("/proc/signing/x.duckdb")), cwd=tmp_path, env=env)
    one_line(unwritable, "cannot write in /proc", "--duckdb")

    corrupt = tmp_path / "corrupt.duckdb"
    corrupt.write_text("not a database\n")
    result = run_cli(load_args(corrupt), cwd=tmp_path, env=env)
    one_line(result, str(corrupt))
    assert corrupt.read_text() == "not a database\n"
    models = run_cli(["models", "--duckdb", str(corrupt)], cwd=tmp_path, env=env)
    one_line(models, str(corrupt))
    # Said as what it is, before anything is copied or locked beside it (it said it could not
    # publish, kept a copy of the text as the run's work, and said so again every night).
    empty = tmp_path / "empty.duckdb"
    empty.touch()
    for path in (corrupt, empty):
        again = run_cli(load_args(path), cwd=tmp_path, env=env)
        one_line(again, f"{path} is not a DuckDB file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.duckdb", "empty.duckdb"]

    # Two warehouses of one stem would share their working folders, named after it: each
    # run deleted the other's state and working copy (a full refresh lost its rows). A backup
    # copy beside them, which no run used, is no clash.
    beside = tmp_path / "beside"
    beside.mkdir()
    first = run_cli(load_args(beside / "signing.db"), cwd=tmp_path, env=env)
    assert first.returncode == 0, describe(first)
    shutil.copyfile(beside / "signing.db", beside / "signing.bak")
    before = sorted(p.name for p in beside.iterdir())
    twin = run_cli(load_args(beside / "signing.duckdb"), cwd=tmp_path, env=env)
    one_line(twin, "signing.db beside", "rename one of the two files")
    assert sorted(p.name for p in beside.iterdir()) == before
    backup = tmp_path / "backup"
    backup.mkdir()
    shutil.copyfile(beside / "signing.db", backup / "signing.bak")
    alone = run_cli(load_args(backup / "signing.duckdb"), cwd=tmp_path, env=env)
    assert alone.returncode == 0, describe(alone)


def test_since_on_a_warehouse_with_cursors_is_said_to_be_ignored(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=20, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    env = cli_env(running)
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0
    again = run_cli(load_args(warehouse, "--since", "2026-06-01"), cwd=tmp_path, env=env)
    assert again.returncode == 0, describe(again)
    assert "--since is ignored" in again.stderr, describe(again)


def test_json_logs_are_one_object_a_line_with_time_level_and_run_id(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    import json

    running = make_sandbox(shipments=20, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    result = run_cli(
        ["--log-format", "json", *load_args(warehouse, "--max-requests", "10")],
        cwd=tmp_path,
        env=cli_env(running),
    )
    assert result.returncode == 75, describe(result)
    entries = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    assert entries, describe(result)
    for entry in entries:
        assert {"ts", "level", "run_id", "message"} <= set(entry), entry
    run_ids = {entry["run_id"] for entry in entries}
    assert len(run_ids) == 1, entries
    assert None not in run_ids, entries
    summary = next(e for e in entries if e["message"] == "load summary")
    assert summary["requests"] == 10, summary
    assert any(e["level"] == "warning" and "request budget" in e["message"] for e in entries)
