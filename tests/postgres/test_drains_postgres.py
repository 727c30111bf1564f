"""Webhook drains into a real PostgreSQL server: the records the deliveries name are read once
and merged (the workspace equals the sandbox, no key twice, the deliveries on record), and a
drain finding a load holding the workspace's lock in the database (another session, as another
host's load would) stops at once without asking the service, its deliveries waiting."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pipelines.environment import environment_set
from pipelines.load.run import load_incremental
from pipelines.status.read import read_status
from pipelines.warehouse import Warehouse
from pipelines.webhooks.drain import drain_workspace
from pipelines.webhooks.inbox import Inbox
from sandbox import RunningSandbox, SandboxConfig
from sources.signing import RunControl
from tests.support import FAST, START_MS, fast, served
from tests.support.postgres import PostgresDatabase, PostgresServer
from tests.support.truth import postgres_differences
from tests.webhooks.test_drain import deliveries, entry, new_records


@pytest.fixture(scope="module")
def on_postgres(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningSandbox, PostgresDatabase, Warehouse]]:
    """A sandbox and a PostgreSQL warehouse one incremental load made of it."""
    config = SandboxConfig(seed=47, shipments=80, start_ms=START_MS, limits_enabled=False)
    database = postgres_server.create_database()
    folder = tmp_path_factory.mktemp("drains_postgres")
    warehouse = Warehouse.at(folder / "signing.duckdb", "postgres")
    with (
        RunningSandbox(config) as running,
        environment_set({"DESTINATION__POSTGRES__CREDENTIALS": database.credentials}),
    ):
        loaded = load_incremental(warehouse, settings=fast(running))
        assert loaded.exit_code == 0, loaded.stopped
        yield running, database, warehouse


def _query(database: PostgresDatabase, sql: str) -> list[tuple[Any, ...]]:
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute(sql)
        return [tuple(row) for row in cursor.fetchall()]


def test_a_drain_into_postgres_leaves_the_workspace_equal_to_the_sandbox(
    on_postgres: tuple[RunningSandbox, PostgresDatabase, Warehouse],
) -> None:
    running, database, warehouse = on_postgres
    shipment_id, contact_id = new_records(running)
    inbox = Inbox.open(warehouse.webhooks_dir)
    for each in deliveries(running, shipment_id, contact_id):
        inbox.accept(each)
    before = served(running)
    result = drain_workspace(warehouse, entry(running), inbox, control=RunControl(), pacing=FAST)
    assert result.outcome == "completed", result.reason
    # /me, then the shipment, its audit trail and its fields, and the contact: once each.
    assert served(running) - before == 5
    with closing(database.connect()) as connection:
        assert postgres_differences(connection, running.store) == {}
    assert _query(database, "select count(*) - count(distinct id) from raw.shipments") == [(0,)]
    stream = _query(
        database, "select delivery_id, shipment_id, contact_id from raw.webhook_deliveries"
    )
    assert sorted(stream) == [
        ("dlv_0", shipment_id, None),
        ("dlv_1", shipment_id, None),
        ("dlv_2", shipment_id, None),
        ("dlv_3", None, contact_id),
        ("dlv_4", None, contact_id),
    ]
    assert inbox.waiting("default", 100) == []


def test_a_drain_finding_a_load_in_the_database_waits_for_the_next_try(
    on_postgres: tuple[RunningSandbox, PostgresDatabase, Warehouse],
) -> None:
    running, _, warehouse = on_postgres
    inbox = Inbox.open(warehouse.webhooks_dir)
    waiting = [  # ids of their own: the inbox keeps each delivery id once
        replace(each, delivery_id=f"busy_{each.delivery_id}")
        for each in deliveries(running, *new_records(running))
    ]
    for each in waiting:
        inbox.accept(each)
    before = served(running)
    # A load's hold of the workspace, on a session of its own as another host's would be.
    assert read_status(warehouse).running is None
    with warehouse.workspace_locks([running.store.workspace.id]):
        busy = drain_workspace(warehouse, entry(running), inbox, control=RunControl(), pacing=FAST)
        shown = read_status(warehouse).running  # what `status` says meanwhile
    assert shown is not None
    assert (shown.pid, shown.what) == (os.getpid(), "load")
    assert busy.outcome == "busy", busy.reason
    assert "of the postgres destination (pid " in (busy.reason or "")
    assert served(running) - before == 1  # only /me, which names the workspace to lock
    assert inbox.waiting("default", 100) == waiting
    done = drain_workspace(warehouse, entry(running), inbox, control=RunControl(), pacing=FAST)
    assert done.outcome == "completed", done.reason
    assert inbox.waiting("default", 100) == []


def test_the_receivers_folder_is_found_through_the_database_from_any_folder(
    on_postgres: tuple[RunningSandbox, PostgresDatabase, Warehouse], tmp_path: Path
) -> None:
    """A load run from another folder of this host (a worker with an empty one) looks for the
    webhooks' inbox and secrets where the receiver recorded them in the database."""
    _, database, warehouse = on_postgres
    elsewhere = Warehouse.at(tmp_path / "empty" / "signing.duckdb", "postgres")
    assert elsewhere.webhooks_dir_of_record() == elsewhere.webhooks_dir  # none recorded yet
    warehouse.record_webhooks_dir()
    assert elsewhere.webhooks_dir_of_record() == warehouse.webhooks_dir.resolve()
    (folder,) = _query(database, "select folder from raw._signing_webhook_homes")
    assert folder == (str(warehouse.webhooks_dir.resolve()),)
