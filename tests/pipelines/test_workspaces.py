"""Several workspaces in one warehouse, over real HTTP: each complete, none touching another.

The sandbox serves workspaces whose record ids collide on purpose (`SandboxConfig.workspaces`),
so a merge or a deletion keyed on the id alone would show here as a difference against the
sandbox's own records, compared per workspace.
"""

from __future__ import annotations

import gzip
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.configuration import WorkspaceEntry
from pipelines.load.run import LoadResult, load_incremental
from pipelines.load.workspaces import load_workspace
from pipelines.raw.pipeline import LEGACY_PIPELINE_NAME, pipeline_name_for
from pipelines.status.read import read_status
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import RunControl
from tests.fixtures.make_warehouse_before_workspaces import LEGACY_SANDBOX
from tests.support import (
    FAST,
    START_MS,
    SandboxFactory,
    admin,
    advance_every_workspace,
    cli_env,
    client_for,
    describe,
    differences,
    duplicate_keys,
    error_lines,
    fast,
    load_args,
    new_key,
    run_cli,
    start_fresh_cli,
    status_document,
    workspaces_env,
)

pytestmark = pytest.mark.slow  # loads of several workspaces

LEGACY_WAREHOUSE = Path(__file__).parents[1] / "fixtures" / "warehouse_before_workspaces.duckdb.gz"
ROOT_TABLES = ("workspaces", "documents", "shipments", "contacts", "audit_events", "webhooks")


@pytest.fixture
def two_workspaces() -> Iterator[RunningSandbox]:
    """One server, two workspaces with colliding ids and different data, limits off."""
    config = SandboxConfig(seed=31, shipments=150, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(2)) as running:
        yield running


def _load(running: RunningSandbox, warehouse: Path, index: int) -> LoadResult:
    return load_incremental(warehouse, settings=fast(running, running.api_keys[index]))


def _workspace_rows(warehouse: Path, workspace_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of one workspace in the root tables, dlt's load ids included: a load that
    rewrote a row (even with equal values) shows as a change."""
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return {
            table: sorted(
                connection.execute(
                    f"select * from raw.{table} where workspace_id = ?", [workspace_id]
                ).fetchall(),
                key=str,
            )
            for table in ROOT_TABLES
        }


def _load_ids(warehouse: Path, workspace_id: str) -> set[str]:
    """The dlt loads that wrote the workspace's current root rows."""
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return {
            str(row[0])
            for table in ROOT_TABLES
            for row in connection.execute(
                f"select distinct _dlt_load_id from raw.{table} where workspace_id = ?",
                [workspace_id],
            ).fetchall()
        }


def _ids(running: RunningSandbox, index: int) -> set[str]:
    return set(running.stores[index].shipments.by_id)


def _create_webhooks(running: RunningSandbox, index: int, count: int) -> None:
    """Subscribe `count` webhooks in one workspace through the API."""
    with client_for(running, running.api_keys[index]) as client:
        for n in range(count):
            body = {"event": "shipment.completed", "target_url": f"https://example.test/{n}"}
            response = client.post("/webhooks", json=body)
            assert response.status_code == 201, response.text


def _delete_a_webhook(running: RunningSandbox, index: int) -> str:
    """Delete one webhook subscription of a workspace through the API; its id."""
    hook_id = next(iter(running.stores[index].webhooks))
    with client_for(running, running.api_keys[index]) as client:
        assert client.delete(f"/webhooks/{hook_id}").status_code == 200
    return hook_id


@pytest.mark.parametrize("first", [0, 1], ids=["A-then-B", "B-then-A"])
def test_two_workspaces_with_colliding_ids_each_equal_their_sandbox(
    two_workspaces: RunningSandbox, tmp_path: Path, first: int
) -> None:
    running, warehouse = two_workspaces, tmp_path / "shared.duckdb"
    second = 1 - first
    ws_first, ws_second = (running.stores[i].workspace.id for i in (first, second))
    shared_ids = _ids(running, 0) & _ids(running, 1)
    assert len(shared_ids) >= 100, "the sandbox must make shipment ids collide"
    for index in (0, 1):
        _create_webhooks(running, index, 2)
    assert set(running.stores[0].webhooks) == set(running.stores[1].webhooks)

    _load(running, warehouse, first)
    before = _workspace_rows(warehouse, ws_first)
    result = _load(running, warehouse, second)

    # The second workspace's first load is a full one, and the first is untouched by it.
    assert result.rows["shipments"] == len(running.stores[second].shipments.by_id)
    assert differences(warehouse, running.stores[second], by_workspace=True) == {}
    assert _workspace_rows(warehouse, ws_first) == before
    assert differences(warehouse, running.stores[first], by_workspace=True) == {}

    # Activity in both, one webhook deleted in each (the same id in both workspaces would
    # remove the other's if deletions were not scoped), then both load again.
    advance_every_workspace(running, days=2)
    deleted = _delete_a_webhook(running, first)
    assert deleted in running.stores[second].webhooks
    _load(running, warehouse, first)
    _load(running, warehouse, second)
    for store in running.stores:
        assert differences(warehouse, store, by_workspace=True) == {}, store.workspace.id
    assert duplicate_keys(warehouse) == {}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        holders = connection.execute(
            "select workspace_id from raw.webhooks where id = ?", [deleted]
        ).fetchall()
    assert holders == [(ws_second,)]
    stores = {store.workspace.id: store for store in running.stores}
    found = read_status(warehouse)
    assert {w.workspace_id for w in found.workspaces} == set(stores)
    for workspace in found.workspaces:
        assert set(workspace.cursors) >= {"shipments", "contacts", "documents"}
        shipments = stores[workspace.workspace_id].shipments.by_id
        assert workspace.row_counts["shipments"] == len(shipments)


def test_a_rotated_key_continues_where_the_old_one_stopped(
    make_sandbox: Any, tmp_path: Path
) -> None:
    running = make_sandbox(seed=32, shipments=200, limits_enabled=False)
    warehouse = tmp_path / "w.duckdb"
    first = _load(running, warehouse, 0)
    rotated = new_key(running, name="rotated", scopes=["read", "write"])
    admin(running, "POST", "/keys/revoke", {"key": running.api_key})
    admin(running, "POST", "/advance", {"hours": 6})
    again = load_incremental(warehouse, settings=fast(running, rotated))
    assert differences(warehouse, running.store) == {}
    # Only what changed in six hours is read again: the cursors carried over to the new key.
    assert again.rows.get("shipments", 0) < first.rows["shipments"] / 4
    assert again.stats.requests < first.stats.requests / 4


def test_full_refresh_of_one_workspace_leaves_the_other_untouched(
    two_workspaces: RunningSandbox, tmp_path: Path
) -> None:
    running, warehouse = two_workspaces, tmp_path / "shared.duckdb"
    ws_a, ws_b = (store.workspace.id for store in running.stores)
    for index in (0, 1):
        _create_webhooks(running, index, 2)
    env = workspaces_env(running, {"alpha": running.api_keys[0], "bravo": running.api_keys[1]})
    loaded = run_cli(load_args(warehouse), cwd=tmp_path, env=env)
    assert loaded.returncode == 0, describe(loaded)
    assert "Workspaces: alpha completed, bravo completed" in loaded.stderr, describe(loaded)
    a_before = _workspace_rows(warehouse, ws_a)
    b_loads_before = _load_ids(warehouse, ws_b)

    refreshed = run_cli(
        load_args(warehouse, "--full-refresh", "--workspace", "bravo"), cwd=tmp_path, env=env
    )
    assert refreshed.returncode == 0, describe(refreshed)
    assert _workspace_rows(warehouse, ws_a) == a_before
    assert differences(warehouse, running.stores[1], by_workspace=True) == {}
    # Every row of B was written again by the refresh (new load ids).
    assert not _load_ids(warehouse, ws_b) & b_loads_before

    unknown = run_cli(load_args(warehouse, "--workspace", "charlie"), cwd=tmp_path, env=env)
    assert unknown.returncode == 1
    (line,) = error_lines(unknown.stderr)
    assert line.endswith("unknown workspace charlie; configured: alpha, bravo"), line


def test_one_workspace_failing_or_stopping_does_not_keep_the_others_from_loading(
    tmp_path: Path,
) -> None:
    config = SandboxConfig(seed=33, shipments=80, start_ms=START_MS, limits_enabled=False)
    running = RunningSandbox(*config.workspaces(3)).start()
    try:
        keys = {"north": running.api_keys[0], "south": "sk_test_wrong"}
        env = workspaces_env(running, {**keys, "west": running.api_keys[2]})
        warehouse = tmp_path / "w.duckdb"
        result = run_cli(load_args(warehouse), cwd=tmp_path, env=env)
        assert result.returncode == 1, describe(result)
        assert "Workspaces: north completed, south failed, west completed" in result.stderr
        assert len(error_lines(result.stderr)) == 1, describe(result)
        assert "sk_test_wrong" not in result.stdout + result.stderr
        for index in (0, 2):
            assert differences(warehouse, running.stores[index], by_workspace=True) == {}

        # A budget stop in each is exit 75 (worse than done, better than failed).
        del env["SOURCES__SIGNING__WORKSPACES__SOUTH__API_KEY"]
        admin(running, "POST", "/advance", {"days": 3})
        stopped = run_cli(load_args(warehouse, "--max-requests", "3"), cwd=tmp_path, env=env)
        assert stopped.returncode == 75, describe(stopped)
        assert "Workspaces: north stopped, west stopped" in stopped.stderr

        shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)
        assert shown.returncode == 0, describe(shown)
        for store, name in ((running.stores[0], "north"), (running.stores[2], "west")):
            assert any(
                name in line and store.workspace.id in line for line in shown.stdout.splitlines()
            ), shown.stdout
        assert running.stores[1].workspace.id not in shown.stdout
    finally:
        running.stop()


def _legacy_copy(tmp_path: Path) -> Path:
    warehouse = tmp_path / "signing.duckdb"
    with gzip.open(LEGACY_WAREHOUSE) as packed, open(warehouse, "wb") as unpacked:
        shutil.copyfileobj(packed, unpacked)
    return warehouse


def _row_keys(warehouse: Path) -> dict[str, set[tuple[Any, ...]]]:
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return {
            table: set(connection.execute(f"select workspace_id, id from raw.{table}").fetchall())
            for table in ROOT_TABLES
            if table != "webhooks"
        }


def test_a_warehouse_of_the_previous_version_is_upgraded_without_a_full_load(
    tmp_path: Path,
) -> None:
    warehouse = _legacy_copy(tmp_path)
    kept = _row_keys(warehouse)
    config = SandboxConfig(limits_enabled=False, **LEGACY_SANDBOX)  # type: ignore[arg-type]
    with RunningSandbox(config) as running:
        admin(running, "POST", "/advance", {"hours": 12})
        result = load_incremental(warehouse, settings=fast(running))
        assert differences(warehouse, running.store) == {}
        workspace_id = running.store.workspace.id
    after = _row_keys(warehouse)
    assert all(kept[table] <= after[table] for table in kept)
    # The old cursors were taken over: only what changed in twelve hours was read.
    assert 0 < result.rows.get("shipments", 0) < LEGACY_SANDBOX["shipments"] / 3
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        names = {
            row[0]
            for row in connection.execute(
                "select distinct pipeline_name from raw._dlt_pipeline_state"
            ).fetchall()
        }
    assert names == {pipeline_name_for(workspace_id)}
    assert LEGACY_PIPELINE_NAME not in names


def test_an_old_warehouse_shared_by_two_workspaces_stops_with_what_to_run(
    tmp_path: Path,
) -> None:
    warehouse = _legacy_copy(tmp_path)
    with duckdb.connect(str(warehouse)) as connection:
        connection.execute(
            "insert into raw.workspaces (id, workspace_id, _fetch_seq, _dlt_load_id, _dlt_id) "
            "select 'ws_other', 'ws_other', 1, _dlt_load_id, 'other' from raw.workspaces"
        )
    before = _row_keys(warehouse)
    config = SandboxConfig(limits_enabled=False, **LEGACY_SANDBOX)  # type: ignore[arg-type]
    with RunningSandbox(config) as running:
        result = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running))
    assert result.returncode == 1, describe(result)
    (line,) = error_lines(result.stderr)
    assert "signing-etl load --full-refresh" in line
    assert _row_keys(warehouse) == before


def _printed_until(process: subprocess.Popen[str], done: str, seconds: float = 60) -> list[str]:
    """The lines a background CLI prints on stdout, up to the first that starts with `done`."""
    stdout = process.stdout
    assert stdout is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    printed: list[str] = []
    deadline = time.monotonic() + seconds
    while not (printed and printed[-1].startswith(done)):
        printed.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
    return printed


def test_the_configuration_the_sandbox_prints_loads_each_of_its_workspaces(
    tmp_path: Path,
) -> None:
    """Named workspaces in `.dlt/secrets.toml`, as a user with three keys writes them."""
    args = ["sandbox", "--port", "0", "--workspaces", "3", "--shipments", "40", "--no-limits"]
    process = start_fresh_cli(args, cwd=tmp_path, env=cli_env(None))  # read as it prints
    try:
        printed = _printed_until(process, "OpenAPI document")
        start = next(i for i, line in enumerate(printed) if line.strip() == "[sources.signing]")
        snippet = [line.strip() for line in printed[start:-1]]
        (tmp_path / ".dlt").mkdir()
        (tmp_path / ".dlt" / "secrets.toml").write_text("\n".join(snippet) + "\n")
        (tmp_path / ".dlt" / "config.toml").write_text(
            "[sources.signing]\n"
            + "".join(f"{name} = {value}\n" for name, value in asdict(FAST).items())
        )
        warehouse = tmp_path / "w.duckdb"
        result = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(None))
    finally:
        process.terminate()
        process.wait(timeout=15)
    assert result.returncode == 0, describe(result)
    assert "Workspaces: w1 completed, w2 completed, w3 completed" in result.stderr
    ids = [line.split("#")[-1].strip() for line in snippet if line.startswith("[sources.signing.")]
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        counts = dict(
            connection.execute(
                "select workspace_id, count(*) from raw.shipments group by 1"
            ).fetchall()
        )
    assert counts == dict.fromkeys(ids, 40)


def test_a_workspace_that_fails_outside_the_cli_is_published_where_status_reads_it(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """One workspace's load as Dagster's partitions run it (`load_workspace`, without the
    CLI's hold around the workspaces): a refused key fails it, and the failure is in the
    published file, where `status` and its check read it."""
    running = make_sandbox(shipments=5, limits_enabled=False)
    env = cli_env(running)
    warehouse = tmp_path / "signing.duckdb"
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0
    refused = WorkspaceEntry("default", running.base_url, "sk_live_" + "0" * 40)

    ended = load_workspace(refused, Warehouse.at(warehouse), RunControl())

    assert ended.code == 1, ended
    (workspace,) = status_document(warehouse, cwd=tmp_path, env=env)["workspaces"]
    assert workspace["last_run"]["outcome"] == "failed", workspace
    assert workspace["last_run"]["reason"] == ended.reason, workspace
    check = run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=env)
    assert check.returncode == 1, describe(check)


def test_a_setting_that_is_not_of_its_type_fails_the_run_on_record(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """A setting dlt cannot read (a rate that is not a number) fails the next run in one line
    naming the variable, and the failure is where `status` and its check read it."""
    running = make_sandbox(shipments=5, limits_enabled=False)
    env = cli_env(running)
    warehouse = tmp_path / "signing.duckdb"
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0
    wrong = {**env, "SOURCES__SIGNING__REQUESTS_PER_SECOND": "ten"}

    failed = run_cli(load_args(warehouse), cwd=tmp_path, env=wrong)

    assert failed.returncode == 1, describe(failed)
    (line,) = error_lines(failed.stderr)
    assert "REQUESTS_PER_SECOND" in line, line
    (workspace,) = status_document(warehouse, cwd=tmp_path, env=env)["workspaces"]
    assert workspace["last_run"]["outcome"] == "failed", workspace
    assert "REQUESTS_PER_SECOND" in workspace["last_run"]["reason"], workspace
    check = run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=env)
    assert check.returncode == 1, describe(check)
