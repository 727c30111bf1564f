"""`signing-etl` as a user runs it: a subprocess configured only through the documented
environment variables, against sandboxes over real HTTP, writing DuckDB files under tmp_path;
what it prints, how it exits, and what it leaves in the warehouse."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from pipelines.load.run import load_incremental
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox, SandboxConfig
from tests.support import (
    START_MS,
    SandboxFactory,
    admin,
    cli_env,
    describe,
    differences,
    duplicate_keys,
    error_lines,
    fast,
    load_args,
    message_lines,
    pointed_at,
    raw_row_counts,
    run_cli,
    served,
    status_document,
    workspaces_env,
)
from tests.support.webhooks import free_port

# A row of a rich table as printed without a terminal: `│ name │ 1,234 │`.
TABLE_ROW = re.compile(r"^│\s*(\S+)\s*│\s*([\d,]+)\s*│$")
CONTACT_TABLES = {"contacts", "contacts__custom", "contacts__group_ids"}


def table_rows(text: str) -> dict[str, int]:
    """Name and count of every two-column table row in `text` (later tables win)."""
    rows = {}
    for line in text.splitlines():
        found = TABLE_ROW.match(line.strip())
        if found:
            rows[found[1]] = int(found[2].replace(",", ""))
    return rows


def logged_rows(stderr: str) -> dict[str, int]:
    """The rows per table of a load's summary line in a log (`rows loaded: name 1,234, ...`)."""
    line = next(line for line in stderr.splitlines() if " rows loaded: " in line)
    listed = line.split(" rows loaded: ", 1)[1]
    return {
        name: int(count.replace(",", ""))
        for name, count in (item.rsplit(" ", 1) for item in listed.split(", "))
    }


def assert_one_line_failure(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit neither 0 nor 75, and stderr a single line, without a traceback, that contains
    every needle (case-insensitive). Returns that line."""
    assert result.returncode not in (0, 75), describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    lines = message_lines(result.stderr)
    assert len(lines) == 1, describe(result)
    for needle in needles:
        assert needle.lower() in lines[0].lower(), describe(result)
    return lines[0]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------- sandbox
def test_sandbox_command_prints_its_url_and_a_key_that_works(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "sandbox", "--port", "0", "--shipments", "50"],
        cwd=tmp_path,
        env=cli_env(None),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        printed: list[str] = []
        deadline = time.monotonic() + 60
        while not any(line.startswith("API key: ") for line in printed):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no API key line within 60 s: {printed}"
            try:
                printed.append(lines.get(timeout=remaining))
            except queue.Empty:
                continue
        urls = [u for line in printed for u in re.findall(r"http://127\.0\.0\.1:\d+/v1\b", line)]
        assert urls, printed
        base_url = urls[0]
        assert base_url.endswith("/v1")
        key = next(line for line in printed if line.startswith("API key: "))
        key = key.removeprefix("API key: ").strip()
        assert key
        response = httpx.get(
            f"{base_url}/me", headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        assert response.status_code == 200, response.text
        assert response.json()["api_version"] == "v1"
        # Its activity deletes records now and then, for reconciliation to find.
        root = base_url.removesuffix("/v1")
        advanced = httpx.post(f"{root}/_sandbox/advance", json={"days": 60}, timeout=60)
        assert advanced.json()["deleted"] > 0, advanced.text
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
    assert process.returncode is not None


# ---------------------------------------------------------------------- load and status
@pytest.mark.slow
def test_load_prints_a_summary_and_status_shows_the_run(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=30, limits_enabled=False)
    warehouse = tmp_path / "warehouse" / "signing.duckdb"
    env = cli_env(running)

    result = run_cli(load_args(warehouse), cwd=tmp_path, env=env)

    assert result.returncode == 0, describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    # In a log (no terminal), the summary is stamped lines among the others, on stderr.
    assert result.stdout == "", describe(result)
    summary = logged_rows(result.stderr)
    counts = raw_row_counts(warehouse)
    for table in ("workspaces", "documents", "shipments", "contacts", "audit_events"):
        assert summary.get(table) == counts[table], (table, summary, counts)
    assert summary["shipments"] == 30
    assert summary["shipment_fields"] == counts["shipment_fields"]
    requests = re.search(r"([\d,]+) requests, ", result.stderr)
    assert requests, describe(result)
    # The count the summary reports is what the service served (no faults, limits off).
    served = admin(running, "GET", "/state")["requests_served"]
    assert int(requests[1].replace(",", "")) == served
    assert differences(warehouse, running.store) == {}
    assert duplicate_keys(warehouse) == {}

    status = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)

    assert status.returncode == 0, describe(status)
    last_run = next(line for line in status.stdout.splitlines() if line.startswith("Last run:"))
    assert "completed" in last_run
    assert f"{served} requests" in last_run
    for name in ("documents", "shipments", "contacts"):
        cursor = re.search(rf"│ {name}\s*│ (\d{{4}}-\d\d-\d\dT[\d:.]+Z)", status.stdout)
        assert cursor, (name, status.stdout)
    assert "pass interrupted" not in status.stdout
    shown = table_rows(status.stdout)
    assert {t: shown.get(t) for t in counts} == counts, status.stdout


@pytest.mark.slow
def test_source_settings_come_from_environment_variables(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """SOURCES__SIGNING__<ARGUMENT> reaches the source's arguments, not only the key and URL:
    pages of 10 make the 50 contacts take nine list requests or more (one with the default
    200), and a pacer of 4/s with a burst of 1 makes them wait seconds (the defaults, 10/s with
    a burst of 40, would not wait). The sandbox's limits are on but far above the pacer."""
    running = make_sandbox(
        shipments=10, requests_per_second=1000, burst=1000, requests_per_minute=100_000
    )
    assert len(running.store.contacts) == 50
    warehouse = tmp_path / "signing.duckdb"
    env = cli_env(running, requests_per_second=4, burst=1, page_size=10)

    result = run_cli(load_args(warehouse, "--resources", "contacts"), cwd=tmp_path, env=env)

    assert result.returncode == 0, describe(result)
    requests = re.search(r"([\d,]+) requests, ", result.stderr)
    waited = re.search(r"([\d.]+) s waited for limits", result.stderr)
    assert requests, describe(result)
    assert waited, describe(result)
    assert int(requests[1]) >= 10, describe(result)  # /me and nine pages or more
    assert float(waited[1]) >= 1.0, describe(result)


# ---------------------------------------------------------------------- failures
def test_a_bad_key_fails_in_one_line_and_loads_nothing(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    env = cli_env(running, key="sk_live_" + "0" * 40)

    result = run_cli(load_args(warehouse), cwd=tmp_path, env=env)

    line = assert_one_line_failure(result)
    assert "401" in line or "key" in line.lower(), describe(result)
    assert env["SOURCES__SIGNING__API_KEY"] not in result.stdout + result.stderr
    assert not any(raw_row_counts(warehouse).values())


def test_a_key_pasted_with_a_line_break_fails_in_one_line_and_is_kept_nowhere(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """The run is refused before any request, and on record; the key is in no output, no
    status and no file (an HTTP library's refusal of the header once quoted it whole)."""
    running = make_sandbox(shipments=5, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running)).returncode == 0
    key = running.api_key
    env = cli_env(running, key=key + "\n")

    result = run_cli(load_args(warehouse), cwd=tmp_path, env=env)

    assert_one_line_failure(result, "api_key holds a space, a line break")
    shown = run_cli(
        ["status", "--duckdb", str(warehouse), "--format", "json"], cwd=tmp_path, env=env
    )
    (workspace,) = json.loads(shown.stdout)["workspaces"]
    assert workspace["last_run"]["outcome"] == "failed", workspace
    assert workspace["last_run"]["reason"].startswith("api_key holds a space"), workspace
    assert key not in result.stdout + result.stderr + shown.stdout + shown.stderr
    kept = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert warehouse in kept
    assert not [path for path in kept if key.encode() in path.read_bytes()]


def test_missing_configuration_names_the_variable_to_set(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()

    result = run_cli(load_args(empty / "signing.duckdb"), cwd=empty, env=cli_env(None))

    assert_one_line_failure(result, "SOURCES__SIGNING__API_KEY")
    assert not any(raw_row_counts(empty / "signing.duckdb").values())


@pytest.mark.slow
def test_a_load_while_another_holds_the_lock_stops_as_busy_and_leaves_the_warehouse_alone(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    with pointed_at(running):
        load_incremental(warehouse, settings=fast())
    admin(running, "POST", "/advance", {"days": 1})  # there is something new to load
    before = file_digest(warehouse)
    served = admin(running, "GET", "/state")["requests_served"]

    impatient = {**cli_env(running), "SIGNING_ETL_LOCK_WAIT_SECONDS": "1"}
    with Warehouse.at(warehouse).exclusive():
        result = run_cli(load_args(warehouse), cwd=tmp_path, env=impatient)

    assert result.returncode == 75, describe(result)  # busy: waited, then stopped
    (line,) = message_lines(result.stderr)
    assert "another load is running" in line
    assert f"pid {os.getpid()} since" in line  # the holder: this test's process
    assert file_digest(warehouse) == before
    assert admin(running, "GET", "/state")["requests_served"] == served
    shown = run_cli(
        ["status", "--duckdb", str(warehouse), "--format", "json"],
        cwd=tmp_path,
        env=cli_env(running),
    )
    last_runs = [w["last_run"] for w in json.loads(shown.stdout)["workspaces"]]
    assert any(
        run["outcome"] == "stopped" and "another load is running" in run["reason"]
        for run in last_runs
    ), last_runs  # recorded where status reads runs
    check = run_cli(
        ["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=cli_env(running)
    )
    assert check.returncode == 1, describe(check)
    (said,) = error_lines(check.stderr)
    assert "another load is running" in said
    assert admin(running, "GET", "/state")["requests_served"] == served


# ---------------------------------------------------------------------- options
def test_resources_option_loads_only_the_chosen_tables(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=30, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"

    result = run_cli(
        load_args(warehouse, "--resources", "contacts"),
        cwd=tmp_path,
        env=cli_env(running),
    )

    assert result.returncode == 0, describe(result)
    loaded = {table for table, count in raw_row_counts(warehouse).items() if count}
    assert loaded == CONTACT_TABLES
    report = differences(warehouse, running.store)
    assert not set(report) & CONTACT_TABLES, report


@pytest.mark.slow
def test_a_destination_dlt_does_not_know_or_cannot_reach_is_one_line_filed_under_itself(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """`--destination postgress` (a typo) is one line before any request, for every command
    (it was dlt's traceback for `load`); a run that fails on an unreachable PostgreSQL server
    is journaled under that destination, not beside the default DuckDB file, whose
    `status --check` it had made fail."""
    running = make_sandbox(shipments=5, limits_enabled=False)
    env = cli_env(running)
    loaded = run_cli(["load", "--no-models"], cwd=tmp_path, env=env)  # warehouse/signing.duckdb
    assert loaded.returncode == 0, describe(loaded)
    requests = served(running)
    for command in (["load", "--no-models"], ["status"], ["models"], ["sql", "select 1"]):
        typo = run_cli([*command, "--destination", "postgress"], cwd=tmp_path, env=env)
        line = assert_one_line_failure(typo, "no dlt destination is named 'postgress'")
        assert "Traceback" not in typo.stderr, line
    assert served(running) == requests

    unreachable = f"postgresql://someone:secret@127.0.0.1:{free_port()}/nowhere"
    broken = {**env, "DESTINATION__POSTGRES__CREDENTIALS": unreachable}
    failed = run_cli(["load", "--no-models", "--destination", "postgres"], cwd=tmp_path, env=broken)
    assert failed.returncode == 1, describe(failed)
    checked = run_cli(["status", "--check"], cwd=tmp_path, env=env)
    assert checked.returncode == 0, describe(checked)  # the DuckDB file's runs are all well
    shown = run_cli(["status", "--destination", "postgres"], cwd=tmp_path, env=broken)
    line = assert_one_line_failure(shown, "cannot read the postgres destination")
    assert "secret" not in line
    # No credentials at all: the setting to give, not dlt's many lines escaped into one.
    for destination, variable in (("postgres", "CREDENTIALS"), ("filesystem", "BUCKET_URL")):
        bare = run_cli(["status", "--destination", destination], cwd=tmp_path, env=env)
        line = assert_one_line_failure(bare, f"set DESTINATION__{destination.upper()}__{variable}")
        assert "\\n" not in line, line


def test_an_unknown_resource_is_a_one_line_error(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"

    result = run_cli(
        load_args(warehouse, "--resources", "contacts,invoices"),
        cwd=tmp_path,
        env=cli_env(running),
    )

    assert_one_line_failure(result, "invoices")
    assert result.returncode == 2, describe(result)  # a usage error, as operations.md says
    assert not any(raw_row_counts(warehouse).values())


@pytest.mark.parametrize(
    ("args", "said", "code"),
    [
        (["load", "--since", "notadate"], "is not an ISO 8601 time", 2),
        (["status", "--format", "csv"], "--format must be table or json", 2),
        (["sql", "--format", "xml", "select 1"], "--format must be table, csv or json", 2),
        (["forget"], "name one person", 2),
        (["sandbox", "--port", "99999"], "--port", 2),
        (["webhooks", "serve", "--port", "99999"], "--port", 2),
        (["status", "--check", "--max-age-hours", "inf"], "--max-age-hours", 2),
        # a file where the folder would be: said before the notebook runs (was a traceback)
        (["report", "--out", "{file}"], "is not a folder", 1),
    ],
    ids=[
        "since",
        "status-format",
        "sql-format",
        "forget",
        "sandbox-port",
        "serve-port",
        "max-age",
        "report-out",
    ],
)
def test_a_bad_option_value_is_one_line_and_a_usage_error_exits_2(
    tmp_path: Path, args: list[str], said: str, code: int
) -> None:
    """As the README's table of exit codes says: 2 for a value of the wrong kind."""
    file = tmp_path / "a-file"
    file.write_text("not a folder")
    given = [arg.replace("{file}", str(file)) for arg in args]
    result = run_cli(given, cwd=tmp_path, env=cli_env(None))
    assert result.returncode == code, describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    (line,) = error_lines(result.stderr)
    assert said in line, describe(result)
    assert file.read_text() == "not a folder"


def test_since_that_is_not_a_date_is_a_one_line_error(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"

    result = run_cli(
        load_args(warehouse, "--since", "notadate"),
        cwd=tmp_path,
        env=cli_env(running),
    )

    assert_one_line_failure(result, "notadate")
    assert admin(running, "GET", "/state")["requests_served"] == 0
    assert not any(raw_row_counts(warehouse).values())


@pytest.mark.slow
def test_log_format_is_taken_after_the_command_too(tmp_path: Path) -> None:
    """`signing-etl load --log-format json`, as a cron line is naturally written, logs JSON
    lines just as `signing-etl --log-format json load` does; a `--` keeps what follows as it is."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (
        [*load_args(empty / "signing.duckdb"), "--log-format", "json"],
        ["--log-format", "json", *load_args(empty / "signing.duckdb")],
        [*load_args(empty / "signing.duckdb"), "--log-format=json"],
    ):
        result = run_cli(args, cwd=empty, env=cli_env(None))
        assert result.returncode == 1, describe(result)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert lines, describe(result)
        records = [json.loads(line) for line in lines]
        assert any("SOURCES__SIGNING__API_KEY" in record["message"] for record in records)
    asked = run_cli(
        ["sql", "--duckdb", str(empty / "x.duckdb"), "--", "--log-format"],
        cwd=empty,
        env=cli_env(None),
    )
    assert not asked.stderr.lstrip().startswith("{"), describe(asked)


def test_missing_destination_credentials_name_the_destination_setting(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """A Postgres load without credentials says which setting gives them, not the source's."""
    running = make_sandbox(shipments=10, limits_enabled=False)
    env = cli_env(running)
    env.pop("DESTINATION__POSTGRES__CREDENTIALS", None)

    result = run_cli(
        [*load_args(tmp_path / "signing.duckdb"), "--destination", "postgres"],
        cwd=tmp_path,
        env=env,
    )

    line = assert_one_line_failure(result, "DESTINATION__POSTGRES__CREDENTIALS")
    assert "SOURCES__SIGNING__API_KEY" not in line, line


@pytest.mark.slow
def test_a_configuration_no_run_can_start_from_is_a_failed_run_in_status_and_fails_the_check(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """A nightly load whose configuration broke (here a `deletes` no load knows) fails in one
    line before any request; `status` says so at once, not a day later when the data ages."""
    running = make_sandbox(shipments=5, limits_enabled=False)
    good = workspaces_env(running, {"acme": running.api_key})
    warehouse = tmp_path / "signing.duckdb"
    loaded = run_cli(load_args(warehouse), cwd=tmp_path, env=good)
    assert loaded.returncode == 0, describe(loaded)
    check = ["status", "--duckdb", str(warehouse), "--check"]
    assert run_cli(check, cwd=tmp_path, env=good).returncode == 0
    requests = served(running)

    broken = {**good, "SOURCES__SIGNING__WORKSPACES__ACME__DELETES": "sometimes"}
    refused = run_cli(load_args(warehouse), cwd=tmp_path, env=broken)
    assert refused.returncode == 1, describe(refused)
    (reason,) = error_lines(refused.stderr)
    assert "sometimes" in reason, describe(refused)
    assert served(running) == requests  # refused before any request

    for env in (good, broken):  # status reads the warehouse, whatever the configuration says
        checked = run_cli(check, cwd=tmp_path, env=env)
        assert checked.returncode == 1, describe(checked)
        assert [line for line in error_lines(checked.stderr) if "acme" in line], describe(checked)
    (workspace,) = status_document(warehouse, cwd=tmp_path, env=good)["workspaces"]
    assert workspace["workspace"] == "acme"
    assert workspace["last_run"]["outcome"] == "failed"
    assert "sometimes" in workspace["last_run"]["reason"]
    assert workspace["last_success"]["outcome"] == "completed"


@pytest.mark.slow
def test_a_broken_setting_fails_every_configured_workspace_each_with_its_own_record(
    tmp_path: Path,
) -> None:
    """A setting every workspace meets (the privacy policy's hash key, here missing) does not
    end the run at the first workspace and leave the others unrecorded: each workspace's run
    meets it and is recorded as failed, so `status --check` names every one of them."""
    config = SandboxConfig(seed=3, shipments=5, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(2)) as running:
        _broken_setting_fails_each_workspace(running, tmp_path)


def _broken_setting_fails_each_workspace(running: RunningSandbox, tmp_path: Path) -> None:
    keys = dict(zip(("acme", "beta"), running.api_keys, strict=True))
    good = workspaces_env(running, keys)
    warehouse = tmp_path / "signing.duckdb"
    loaded = run_cli(load_args(warehouse, "--workspace", "acme"), cwd=tmp_path, env=good)
    assert loaded.returncode == 0, describe(loaded)

    broken = {**good, "SOURCES__SIGNING__PRIVACY__PRESET": "minimal"}
    refused = run_cli(load_args(warehouse), cwd=tmp_path, env=broken)

    assert refused.returncode == 1, describe(refused)
    assert "not started" not in refused.stderr, describe(refused)
    for name in ("acme", "beta"):
        assert f"workspace {name}: failed: " in refused.stderr, describe(refused)
    checked = run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=good)
    assert checked.returncode == 1, describe(checked)
    for name in ("acme", "beta"):
        (line,) = [line for line in error_lines(checked.stderr) if f"workspace {name}:" in line]
        assert "no hash key is set" in line, line
