"""Analysts and loads together on the DuckDB default: another process holding the file analysts
open (read-only, or read-write) costs a load with its models and a webhook drain nothing, its
queries keep answering from the copy it opened, and the next connection sees the new run whole
(raw equal to the sandbox, marts of the same run). `status` answers while a load holds the
pipeline's working file, naming the running load."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from pipelines.configuration import WorkspaceEntry
from pipelines.modeling.record import built_before
from pipelines.warehouse import Warehouse
from pipelines.webhooks.drain import drain_workspace
from pipelines.webhooks.inbox import Delivery, Inbox
from sandbox import RunningSandbox
from sources.signing import RunControl
from tests.support import (
    FAST,
    SandboxFactory,
    admin,
    cli_env,
    client_for,
    describe,
    differences,
    load_args,
    run_cli,
    served,
    start_cli,
    wait_for_requests,
)

pytestmark = pytest.mark.slow  # loads beside readers holding the file

# A process that holds one connection to a DuckDB file for its whole life and answers one
# query per line it reads: what a notebook kernel or a BI tool does.
HOLDER = textwrap.dedent(
    """
    import sys, duckdb
    connection = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == "read_only")
    print("ready", flush=True)
    for line in sys.stdin:
        (count,) = connection.execute("select count(*) from raw.shipments").fetchone()
        print(count, flush=True)
    """
)


class Holder:
    """Another process with a connection open to the analysts' file."""

    def __init__(self, path: Path, mode: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.ask_line() == "ready", self.process.stderr

    def ask_line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def shipments(self) -> int:
        """The holder's answer to a query now, on the connection it opened at the start."""
        assert self.process.stdin is not None
        self.process.stdin.write("query\n")
        self.process.stdin.flush()
        answer = self.ask_line()
        assert answer.isdigit(), f"the holder stopped answering: {answer!r}"
        return int(answer)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(params=["read_only", "read_write"])
def holder_mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def first_load(make_sandbox: SandboxFactory, tmp_path: Path) -> tuple[RunningSandbox, Path]:
    """A sandbox and the warehouse a first `load` made of it, without the models: no test
    reads the first run's marts (a dbt build costs half a minute of CPU), only the next run's."""
    running = make_sandbox(shipments=80, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    first = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running))
    assert first.returncode == 0, describe(first)
    return running, warehouse


def raw_and_marts(path: Path) -> tuple[set[str], set[str]]:
    """The shipment ids in raw and in the marts, read through a new read-only connection."""
    with duckdb.connect(str(path), read_only=True) as db:
        raw = {r[0] for r in db.execute("select id from raw.shipments").fetchall()}
        marts = {r[0] for r in db.execute("select shipment_id from marts.fct_shipments").fetchall()}
    return raw, marts


def new_shipment(running: RunningSandbox) -> Delivery:
    """A shipment sent through the API, and the delivery its webhook would bring."""
    with client_for(running) as api:
        document = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        recipient = {"name": "Ada Reader", "email": "ada.reader@example.com", "company": "Acme"}
        sent = api.post("/shipments", json={"document_id": document, "recipients": [recipient]})
    shipment_id = sent.json()["data"]["id"]
    workspace_id = running.store.workspace.id
    return Delivery(
        "default", "dlv_reader", workspace_id, "shipment.sent", "shipments", shipment_id
    )


def test_a_load_with_models_and_a_drain_run_while_an_analyst_holds_the_file(
    make_sandbox: SandboxFactory, holder_mode: str, tmp_path: Path
) -> None:
    running, warehouse = first_load(make_sandbox, tmp_path)
    admin(running, "POST", "/advance", {"days": 2})  # new shipments to load
    assert differences(warehouse, running.store)
    holder = Holder(warehouse, holder_mode)
    try:
        before = holder.shipments()

        load = run_cli(["load", "--duckdb", str(warehouse)], cwd=tmp_path, env=cli_env(running))
        assert load.returncode == 0, describe(load)
        assert holder.shipments() == before  # still answering, from the copy it opened
        assert differences(warehouse, running.store) == {}  # a new connection: the new run
        raw, marts = raw_and_marts(warehouse)
        assert raw == marts  # raw and marts of the same run
        assert len(raw) > before

        place = Warehouse.at(warehouse)
        inbox = Inbox.open(place.webhooks_dir)
        inbox.accept(new_shipment(running))
        entry = WorkspaceEntry("default", running.base_url, running.api_key)
        drained = drain_workspace(place, entry, inbox, control=RunControl(), pacing=FAST)
        assert drained.outcome == "completed", drained.reason
        assert holder.shipments() == before
        assert differences(warehouse, running.store) == {}
    finally:
        holder.close()
    assert holder.process.returncode == 0, holder.process.stderr


def test_status_answers_while_a_load_holds_the_working_file(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running, warehouse = first_load(make_sandbox, tmp_path)
    published_runs = json.loads(
        run_cli(
            ["status", "--duckdb", str(warehouse), "--format", "json"],
            cwd=tmp_path,
            env=cli_env(running),
        ).stdout
    )["workspaces"][0]["last_run"]["run_id"]
    admin(running, "POST", "/advance", {"days": 3})
    # In flight for many minutes (a SIGINT ends it once status has answered): three requests at
    # once, then one every 10 s. At 0.3 a second, three `status` runs on a machine at load 15
    # took longer than the whole load.
    slow = cli_env(running, requests_per_second=0.1, burst=3)
    asked = served(running)
    load = start_cli(["load", "--duckdb", str(warehouse), "--no-models"], cwd=tmp_path, env=slow)
    try:
        wait_for_requests(running, asked + 3, load)  # under way: it holds its working file
        working = Warehouse.at(warehouse).working_path
        with pytest.raises(duckdb.Error):  # the load holds its working file
            duckdb.connect(str(working), read_only=True).close()

        table = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=cli_env(running))
        document = run_cli(
            ["status", "--duckdb", str(warehouse), "--format", "json"],
            cwd=tmp_path,
            env=cli_env(running),
        )
        check = run_cli(
            ["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=cli_env(running)
        )
        still_running = load.poll() is None
    finally:
        load.send_signal(signal.SIGINT)  # a clean stop: what was fetched is loaded
        _, stderr = load.communicate(timeout=600)
    assert still_running, "the load ended before status was asked; pace it slower"
    assert load.returncode == 130, stderr

    assert table.returncode == 0, describe(table)
    assert "a load is running since" in table.stdout
    assert f"(pid {load.pid})" in table.stdout
    assert document.returncode == 0, describe(document)
    found = json.loads(document.stdout)
    assert found["running"]["pid"] == load.pid
    assert found["workspaces"][0]["last_run"]["run_id"] == published_runs  # the last published
    assert check.returncode == 0, describe(check)
    assert f"(pid {load.pid})" in check.stderr


def test_a_warehouse_written_in_place_by_an_earlier_version_seeds_the_working_file(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running, warehouse = first_load(make_sandbox, tmp_path)
    shutil.rmtree(Warehouse.at(warehouse).working_path.parent)  # as an earlier version left it
    admin(running, "POST", "/advance", {"days": 1})

    again = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running))

    assert again.returncode == 0, describe(again)
    assert differences(warehouse, running.store) == {}
    with duckdb.connect(str(warehouse), read_only=True) as db:
        (runs,) = db.execute("select count(*) from raw._signing_runs").fetchone() or (0,)
    assert runs == 2  # the earlier history is carried over, not started afresh


def test_a_published_file_removed_by_hand_starts_the_warehouse_afresh(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running, warehouse = first_load(make_sandbox, tmp_path)
    warehouse.unlink()  # dlt's local state stays, as a user would leave it

    again = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running))

    assert again.returncode == 0, describe(again)
    assert differences(warehouse, running.store) == {}
    with duckdb.connect(str(warehouse), read_only=True) as db:
        (runs,) = db.execute("select count(*) from raw._signing_runs").fetchone() or (0,)
    assert runs == 1  # the working file of the removed warehouse did not come back


def test_a_backup_restored_over_the_published_file_is_where_the_next_run_starts(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """What the restored file lacks, the next run loads: dlt's cursors are the file's, not
    those of the run that published the file the backup replaced."""
    running, warehouse = first_load(make_sandbox, tmp_path)
    backup = tmp_path / "backup.duckdb"
    shutil.copyfile(warehouse, backup)
    admin(running, "POST", "/advance", {"days": 2})
    later = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running))
    assert later.returncode == 0, describe(later)
    shutil.copyfile(backup, warehouse)  # the backup restored: the later run's rows are gone

    again = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running))

    assert again.returncode == 0, describe(again)
    assert differences(warehouse, running.store) == {}


def test_a_drain_asks_whether_the_marts_exist_without_opening_the_file_a_load_writes(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """The refresh after a webhook drain asks, before it takes the warehouse, whether the
    models were ever built: of the published copy, never of the working file, which a load
    that just took the warehouse holds (as a process holding it for writing does here)."""
    running = make_sandbox(shipments=10, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    built = run_cli(["load", "--duckdb", str(warehouse)], cwd=tmp_path, env=cli_env(running))
    assert built.returncode == 0, describe(built)
    place = Warehouse.at(warehouse)
    load = Holder(place.working_path, "read_write")
    try:
        assert load.shipments() == len(running.store.shipments.by_id)
        assert built_before(place)
    finally:
        load.close()
