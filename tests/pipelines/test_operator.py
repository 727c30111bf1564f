"""What the person who schedules the loads sees and relies on: every run recorded with its
outcome whatever ends it, settings that hold on every path, a signal that stops within seconds
with no dbt after it, workspaces that take turns, `status` for people and for monitors with a
freshness check cron can alert on, and logs where every line is stamped or is JSON."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pipelines.outcome import Outcome
from pipelines.status.read import read_status
from sandbox import RunningSandbox, SandboxConfig
from tests.support import (
    START_MS,
    SandboxFactory,
    cli_env,
    describe,
    error_lines,
    finish,
    load_args,
    run_cli,
    start_cli,
    status_document,
    wait_for_requests,
    workspaces_env,
)
from tests.support.built import copied_warehouse
from tests.support.standin import StandIn

pytestmark = pytest.mark.slow  # CLI loads and builds as a scheduler runs them

STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (INFO|WARNING|ERROR) ")


# ---------------------------------------------------------------------- every run recorded


@dataclass(frozen=True)
class RefusedAfterALoad:
    """A sandbox, a warehouse its key loaded, and a second load whose key it refused."""

    running: RunningSandbox
    folder: Path
    loaded: subprocess.CompletedProcess[str]
    refused: subprocess.CompletedProcess[str]
    before: datetime  # taken before the first load began


@pytest.fixture(scope="module")
def refused_after_a_load(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RefusedAfterALoad]:
    """The two loads that both tests of a refused run read, made once for the module (two CLI
    runs fewer); each test works on its own copy of the folder."""
    folder = tmp_path_factory.mktemp("refused_after_a_load")
    warehouse = folder / "signing.duckdb"
    config = SandboxConfig(shipments=30, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(config) as running:
        before = datetime.now(UTC)
        loaded = run_cli(load_args(warehouse), cwd=folder, env=cli_env(running))
        refused = run_cli(load_args(warehouse), cwd=folder, env=cli_env(running, key="sk_revoked"))
        yield RefusedAfterALoad(running, folder, loaded, refused, before)


def test_a_refused_key_is_recorded_as_a_failed_run_with_its_reason(
    refused_after_a_load: RefusedAfterALoad, tmp_path: Path
) -> None:
    running, loaded = refused_after_a_load.running, refused_after_a_load.loaded
    assert loaded.returncode == 0, describe(loaded)

    refused = refused_after_a_load.refused
    assert refused.returncode == 1, describe(refused)
    warehouse = copied_warehouse(refused_after_a_load.folder, tmp_path)

    last = read_status(warehouse).last_run
    assert last is not None
    assert last.outcome is Outcome.FAILED
    assert last.stop_reason is not None
    assert "401" in last.stop_reason
    assert last.workspace_id == running.store.workspace.id  # attributed through its name
    shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=cli_env(None))
    first = next(line for line in shown.stdout.splitlines() if line.startswith("Last run:"))
    assert "failed (the API key was refused (401" in first, shown.stdout
    assert "sk_revoked" not in shown.stdout + refused.stderr


def test_give_up_after_seconds_in_dlt_config_toml_ends_a_dead_me(tmp_path: Path) -> None:
    """A service whose every answer is a 500, with the setting in `.dlt/config.toml`: the load
    gives up within the setting and one more attempt."""

    async def broken(request: Request) -> JSONResponse:
        return JSONResponse({"error": {"code": "server_error", "message": "down"}}, 500)

    (tmp_path / ".dlt").mkdir()
    (tmp_path / ".dlt" / "config.toml").write_text("[sources.signing]\ngive_up_after_seconds = 4\n")
    with StandIn(Starlette(routes=[Route("/v1/{path:path}", broken)])) as stand_in:
        env = {
            **cli_env(None),
            "SOURCES__SIGNING__BASE_URL": stand_in.base_url,
            "SOURCES__SIGNING__API_KEY": "sk_test_dead",
        }
        began = time.monotonic()
        result = run_cli(load_args(tmp_path / "signing.duckdb"), cwd=tmp_path, env=env)
        took = time.monotonic() - began
        requests = stand_in.count

    assert result.returncode == 1, describe(result)
    (line,) = error_lines(result.stderr)
    assert "gave up on 127.0.0.1" in line
    assert requests < 10, requests  # the default, 120 s, would have allowed all 8 attempts
    assert took < 4 + 30 + 30, took  # the setting, one attempt's deadline, and start-up slack


# ---------------------------------------------------------------------- signals


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_load_with_models_ends_with_no_dbt_and_the_next_run_builds_them(
    make_sandbox: SandboxFactory, tmp_path: Path, sent: signal.Signals, code: int
) -> None:
    running = make_sandbox(shipments=150, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    with_models = ["load", "--duckdb", str(warehouse)]
    slow = cli_env(running, requests_per_second=40, burst=5)
    process = start_cli(with_models, cwd=tmp_path, env=slow)
    wait_for_requests(running, 60, process)
    process.send_signal(sent)
    stopped = finish(process, timeout=60)

    assert stopped.returncode == code, describe(stopped)
    assert "Building the models" not in stopped.stderr, describe(stopped)
    assert "models are not built after a signal" in stopped.stderr, describe(stopped)
    assert not (tmp_path / ".signing.dbt" / "target" / "run_results.json").exists()
    # One name for how it ended: the record, the CLI's last line and `status` say `stopped`.
    record = read_status(warehouse).last_run
    assert record is not None
    assert record.outcome is Outcome.STOPPED
    assert f"stopped early: stopped by {sent.name}" in stopped.stderr.splitlines()[-1]
    shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=cli_env(None))
    assert f"stopped (stopped by {sent.name}" in shown.stdout, shown.stdout

    resumed = run_cli(with_models, cwd=tmp_path, env=cli_env(running), timeout=600)
    assert resumed.returncode == 0, describe(resumed)
    assert "Building the models" in resumed.stderr
    assert (tmp_path / ".signing.dbt" / "target" / "run_results.json").exists()


# ---------------------------------------------------------------------- turns


def test_after_a_stop_the_next_run_starts_with_the_workspaces_that_did_not_load(
    tmp_path: Path,
) -> None:
    """A signal during the first workspace's load leaves the others not started; the next run
    starts with them, so no workspace waits for ever behind one that keeps being stopped."""
    config = SandboxConfig(seed=20, shipments=80, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(3)) as running:
        keys = dict(zip(("w1", "w2", "w3"), running.api_keys, strict=True))
        env = workspaces_env(running, keys)
        slow = {
            **env,
            "SOURCES__SIGNING__REQUESTS_PER_SECOND": "40",
            "SOURCES__SIGNING__BURST": "5",
        }
        warehouse = tmp_path / "signing.duckdb"
        process = start_cli(load_args(warehouse), cwd=tmp_path, env=slow)
        wait_for_requests(running, 30, process)
        process.send_signal(signal.SIGTERM)
        stopped = finish(process, timeout=60)
        assert stopped.returncode == 143, describe(stopped)
        assert "Workspaces: w1 stopped, 2 not started" in stopped.stderr, describe(stopped)

        second = run_cli(load_args(warehouse), cwd=tmp_path, env=env)

    assert second.returncode == 0, describe(second)
    order = re.findall(r"workspace (w\d): loading from", second.stderr)
    assert order == ["w2", "w3", "w1"], describe(second)


# ---------------------------------------------------------------------- status


def test_status_as_json_and_its_freshness_check_for_cron(
    refused_after_a_load: RefusedAfterALoad, tmp_path: Path
) -> None:
    running, before = refused_after_a_load.running, refused_after_a_load.before
    env = cli_env(running)
    assert refused_after_a_load.loaded.returncode == 0
    refused = refused_after_a_load.refused
    assert refused.returncode == 1
    # This test changes its runs' times: on its own copy.
    warehouse = copied_warehouse(refused_after_a_load.folder, tmp_path)

    (workspace,) = status_document(warehouse, cwd=tmp_path, env=env)["workspaces"]
    assert workspace["workspace_id"] == running.store.workspace.id
    assert workspace["workspace"] == "default"
    assert workspace["last_run"]["outcome"] == "failed"
    assert workspace["last_success"]["outcome"] == "completed"
    assert datetime.fromisoformat(workspace["last_loaded_at"]) >= before
    assert [p["outcome"] for p in workspace["problems"]] == ["failed"]
    assert "401" in workspace["problems"][0]["reason"]
    store = running.store
    with store.lock:
        newest = max(
            [d.updated_at for d in store.documents.by_id.values()]
            + [c.updated_at for c in store.contacts.by_id.values()]
        )
    as_of = datetime.fromisoformat(workspace["data_as_of"])
    assert as_of >= datetime.fromtimestamp(newest / 1000, UTC)
    assert workspace["cursor_lag_seconds"] > 0
    assert workspace["rows"]["shipments"] == 30
    assert set(workspace["cursors"]) == {"documents", "shipments", "contacts"}

    assert (workspace["health"], workspace["ok"], workspace["stale"]) == ("failed", False, False)
    assert workspace["why"].startswith("last run failed: the API key was refused")
    # Fresh, but its last run failed: the check fails on that too, in one line with the reason.
    fresh = run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=env)
    assert fresh.returncode == 1, describe(fresh)
    (failed,) = error_lines(fresh.stderr)
    assert "workspace default: last run failed: the API key was refused" in failed
    # The loads as if they had run an hour ago: the check's smallest window, 36 s, has passed
    # without waiting for it on the wall clock.
    with duckdb.connect(str(warehouse)) as db:
        db.execute(
            "update raw._signing_runs set started_at = started_at - interval 1 hour, "
            "finished_at = finished_at - interval 1 hour"
        )
    stale = run_cli(
        ["status", "--duckdb", str(warehouse), "--check", "--max-age-hours", "0.01"],
        cwd=tmp_path,
        env=env,
    )
    assert stale.returncode == 1, describe(stale)
    (line,) = error_lines(stale.stderr)
    assert "workspace default: last loaded" in line
    assert "failed" in line


def test_the_freshness_check_counts_a_never_loaded_configured_workspace(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    env = workspaces_env(running, {"loaded": running.api_key, "never": "sk_never"})
    warehouse = tmp_path / "signing.duckdb"
    run_cli([*load_args(warehouse), "--workspace", "loaded"], cwd=tmp_path, env=env)
    checked = run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=env)

    assert checked.returncode == 1, describe(checked)
    assert error_lines(checked.stderr) == [
        line for line in checked.stderr.splitlines() if "workspace never: never loaded" in line
    ]


# ---------------------------------------------------------------------- logs


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_every_line_of_a_load_with_models_is_stamped_or_json(
    make_sandbox: SandboxFactory, tmp_path: Path, log_format: str
) -> None:
    running = make_sandbox(shipments=40, limits_enabled=False)
    env = workspaces_env(running, {"first": running.api_key, "refused": "sk_refused"})
    args = ["--log-format", log_format, "load", "--duckdb", str(tmp_path / "signing.duckdb")]
    result = run_cli(args, cwd=tmp_path, env=env, timeout=600)

    assert result.returncode == 1, describe(result)  # the refused workspace fails the run
    assert result.stdout == "", describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) > 4, describe(result)
    if log_format == "json":
        records = [json.loads(line) for line in lines]
        assert {"ts", "level", "run_id", "message", "workspace"} <= set(records[0])
        assert any(
            r.get("workspace") == "first" and r["message"] == "load summary" for r in records
        )
    else:
        unstamped = [line for line in lines if not STAMPED.match(line)]
        assert unstamped == [], describe(result)
        assert any("workspace first: rows loaded:" in line for line in lines)
        assert any("workspace=first" in line for line in lines)
        assert any("workspace=refused" in line and "ERROR" in line for line in lines)
