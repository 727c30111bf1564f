"""Draining the inbox into a real DuckDB warehouse from a sandbox over HTTP: just the records the
deliveries name, once each, into the same tables and keys (the warehouse then equals the
sandbox), the incremental cursors untouched, and deliveries marked done only once their load
committed. The warehouse's lock: a load waits for a drain's brief hold, a drain never waits, and
a drain reads for a bounded time under it, leaving the rest to the next."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from pipelines.configuration import WorkspaceEntry
from pipelines.errors import AlreadyRunning
from pipelines.load.run import load_incremental
from pipelines.status.read import read_status
from pipelines.warehouse import Warehouse
from pipelines.webhooks.drain import HOLD, DrainResult, DrainSizes, drain, drain_workspace
from pipelines.webhooks.inbox import Delivery, Inbox
from sandbox import RunningSandbox
from sources.signing import Pacing, RunControl
from tests.support import (
    FAST,
    SandboxFactory,
    admin,
    cli_env,
    client_for,
    describe,
    differences,
    duplicate_keys,
    fast,
    new_key,
    pointed_at,
    run_cli,
    served,
    status_document,
)

pytestmark = pytest.mark.slow  # loads and drains into a warehouse


@pytest.fixture
def loaded(make_sandbox: SandboxFactory, tmp_path: Path) -> tuple[RunningSandbox, Path]:
    """A sandbox, and a warehouse that one incremental load made of it."""
    running = make_sandbox(limits_enabled=False, shipments=120)
    warehouse = tmp_path / "signing.duckdb"
    with pointed_at(running):
        load_incremental(warehouse, settings=fast())
    return running, warehouse


def entry(running: RunningSandbox, key: str | None = None) -> WorkspaceEntry:
    return WorkspaceEntry("default", running.base_url, key or running.api_key)


def new_records(running: RunningSandbox) -> tuple[str, str]:
    """A shipment sent and a contact created through the API: the changes to drain."""
    with client_for(running) as api:
        document = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        recipient = {"name": "Ada Drain", "email": "ada.drain@example.com", "company": "Acme"}
        shipment = api.post("/shipments", json={"document_id": document, "recipients": [recipient]})
        contact = api.post("/contacts", json={"email": "grace.drain@example.com", "name": "Grace"})
    return shipment.json()["data"]["id"], contact.json()["data"]["id"]


def deliveries(running: RunningSandbox, shipment_id: str, contact_id: str) -> list[Delivery]:
    """Three events for the shipment and two for the contact (a duplicate id among them)."""
    workspace_id = running.store.workspace.id
    named = [
        ("shipment.sent", "shipments", shipment_id),
        ("shipment.opened", "shipments", shipment_id),
        ("shipment.signed", "shipments", shipment_id),
        ("contact.created", "contacts", contact_id),
        ("contact.created", "contacts", contact_id),
    ]
    return [
        Delivery("default", f"dlv_{n}", workspace_id, event, kind, record_id)
        for n, (event, kind, record_id) in enumerate(named)
    ]


def test_a_drain_reads_each_named_record_once_and_leaves_the_warehouse_equal_to_the_sandbox(
    loaded: tuple[RunningSandbox, Path],
) -> None:
    running, path = loaded
    warehouse = Warehouse.at(path)
    cursors = read_status(warehouse).only.cursors
    shipment_id, contact_id = new_records(running)
    assert differences(path, running.store)  # the two changes are not loaded yet
    inbox = Inbox.open(warehouse.webhooks_dir)
    for each in deliveries(running, shipment_id, contact_id):
        inbox.accept(each)
    before = served(running)
    result = drain_workspace(warehouse, entry(running), inbox, control=RunControl(), pacing=FAST)
    assert result.outcome == "completed", result.reason
    # /me, then the shipment, its audit trail and its fields, and the contact: once each.
    assert served(running) - before == 5
    assert differences(path, running.store) == {}
    assert duplicate_keys(path) == {}
    with duckdb.connect(str(path), read_only=True) as db:
        stream = db.execute(
            "select delivery_id, event, shipment_id, contact_id from raw.webhook_deliveries"
        ).fetchall()
    assert sorted(stream) == [
        ("dlv_0", "shipment.sent", shipment_id, None),
        ("dlv_1", "shipment.opened", shipment_id, None),
        ("dlv_2", "shipment.signed", shipment_id, None),
        ("dlv_3", "contact.created", None, contact_id),
        ("dlv_4", "contact.created", None, contact_id),
    ]
    assert inbox.waiting("default", 100) == []
    assert read_status(warehouse).only.cursors == cursors  # the incremental load's, untouched


def test_deliveries_wait_while_a_load_holds_the_warehouse(
    loaded: tuple[RunningSandbox, Path],
) -> None:
    running, path = loaded
    warehouse = Warehouse.at(path)
    inbox = Inbox.open(warehouse.webhooks_dir)
    waiting = deliveries(running, *new_records(running))
    for each in waiting:
        inbox.accept(each)
    before = served(running)
    with warehouse.exclusive():  # a scheduled load's hold
        result = drain_workspace(
            warehouse, entry(running), inbox, control=RunControl(), pacing=FAST
        )
    assert result.outcome == "busy"
    assert served(running) == before  # nothing asked while it could not load
    assert inbox.waiting("default", 100) == waiting
    assert drain_workspace(
        warehouse, entry(running), inbox, control=RunControl(), pacing=FAST
    ).outcome == ("completed")
    assert inbox.waiting("default", 100) == []


def test_deliveries_wait_when_the_key_is_refused(loaded: tuple[RunningSandbox, Path]) -> None:
    running, path = loaded
    inbox, waiting, result = failed_drain(running, Warehouse.at(path))
    assert result.outcome == "failed"
    assert "401" in str(result.reason)
    assert "\n" not in str(result.reason)
    assert inbox.waiting("default", 100) == waiting
    assert differences(path, running.store)  # nothing of theirs loaded


def test_status_shows_the_receivers_last_drain_and_what_waits(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """A drain's outcome is kept in the receiver's inbox; `signing-etl status` reads it there,
    so an operator sees drains failing (and deliveries piling up) where they see loads."""
    running = make_sandbox(limits_enabled=False, shipments=20)
    path = tmp_path / "signing.duckdb"
    warehouse = Warehouse.at(path)
    env = cli_env(running)
    loaded = run_cli(["load", "--duckdb", str(path), "--no-models"], cwd=tmp_path, env=env)
    assert loaded.returncode == 0, describe(loaded)
    assert status_document(path, cwd=path.parent, env=env)["workspaces"][0]["receiver"] is None
    inbox, waiting, result = failed_drain(running, warehouse)
    inbox.close()
    assert result.outcome == "failed"

    (workspace,) = status_document(path, cwd=path.parent, env=env)["workspaces"]
    receiver = workspace["receiver"]
    assert receiver["last_drain"]["outcome"] == "failed"
    assert receiver["last_drain"]["reason"] == result.reason
    assert receiver["waiting"] == len(waiting)
    shown = run_cli(["status", "--duckdb", str(path)], cwd=path.parent, env=env)
    assert shown.returncode == 0, describe(shown)
    (line,) = [line for line in shown.stdout.splitlines() if line.startswith("Webhook receiver:")]
    assert "last drain failed" in line, line
    assert f"{len(waiting)} deliveries waiting" in line, line


def failed_drain(
    running: RunningSandbox, warehouse: Warehouse
) -> tuple[Inbox, list[Delivery], DrainResult]:
    """Deliveries naming new records, drained with a revoked key: a drain that failed."""
    inbox = Inbox.open(warehouse.webhooks_dir)
    waiting = deliveries(running, *new_records(running))
    for each in waiting:
        inbox.accept(each)
    revoked = _revoked_key(running)
    result = drain_workspace(warehouse, entry(running, revoked), inbox, control=RunControl())
    return inbox, waiting, result


def _revoked_key(running: RunningSandbox) -> str:
    key = new_key(running, scopes=["read"])
    admin(running, "POST", "/keys/revoke", {"key": key})
    return key


def test_a_load_waits_for_a_drains_brief_hold_and_a_drain_never_waits(tmp_path: Path) -> None:
    warehouse = Warehouse.at(tmp_path / "signing.duckdb")
    released = threading.Event()
    taken: list[str] = []

    def load() -> None:
        with warehouse.exclusive():
            taken.append("load" if released.is_set() else "load before the drain ended")

    with warehouse.exclusive(brief=HOLD):
        waiting = threading.Thread(target=load)
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive()  # the load waits instead of failing
        released.set()
    waiting.join()
    assert taken == ["load"]
    # A load's hold is not brief: a drain meeting it fails at once (and is tried again later).
    with warehouse.exclusive(), pytest.raises(AlreadyRunning), warehouse.exclusive(brief=HOLD):
        pass


def test_a_drain_reads_for_its_hold_at_most_and_the_next_drains_take_the_rest(
    loaded: tuple[RunningSandbox, Path],
) -> None:
    running, path = loaded
    warehouse = Warehouse.at(path)
    inbox = Inbox.open(warehouse.webhooks_dir)
    workspace_id = running.store.workspace.id
    made = [new_records(running) for _ in range(8)]  # eight shipments; one contact, made again
    named = [("shipment.sent", "shipments", s) for s, _ in made]
    named += [("contact.created", "contacts", c) for _, c in made]
    waiting = [
        Delivery("default", f"dlv_slow_{n}", workspace_id, event, kind, record_id)
        for n, (event, kind, record_id) in enumerate(named)
    ]
    for each in waiting:
        inbox.accept(each)
    # A slow key: the 26 requests of all sixteen deliveries (/me, each shipment with its audit
    # trail and fields, the contact) take over three seconds at 8 a second; a drain may hold the
    # warehouse for two. The first drain takes all sixteen, as a key thought faster would.
    slow = Pacing(requests_per_second=8, burst=1)
    sizes = DrainSizes(first=16)
    results: list[DrainResult] = []
    while inbox.waiting("default", 100) and len(results) < 40:
        results += drain(
            warehouse, [entry(running)], inbox, sizes=sizes, pacing=slow, hold_seconds=2
        )
    first = results[0]
    assert first.outcome == "completed", first.reason
    assert first.left > 0  # its hold spent: what it did not read whole waits
    assert first.more_waiting
    assert "left for the next drain" in first.line()
    assert inbox.waiting("default", 100) == []  # the next, smaller drains took the rest
    assert [r.outcome for r in results] == ["completed"] * len(results)
    assert sum(r.deliveries for r in results) == len(waiting)  # each delivery done once
    assert not results[-1].more_waiting
    assert differences(path, running.store) == {}
    assert duplicate_keys(path) == {}
    with duckdb.connect(str(path), read_only=True) as db:
        stream = db.execute(
            "select delivery_id, count(*) from raw.webhook_deliveries"
            " where delivery_id like 'dlv_slow_%' group by 1"
        ).fetchall()
    assert sorted(stream) == sorted((d.delivery_id, 1) for d in waiting)


def test_drain_sizes_start_at_the_pace_halve_after_a_spent_hold_and_grow_after_a_full_one() -> None:
    sizes = DrainSizes()
    assert sizes.size("a", Pacing(requests_per_second=10, burst=1), 60) == 200  # 600 requests
    assert sizes.size("a", Pacing(requests_per_second=0.01, burst=1), 60) == 1
    sizes.learn(DrainResult("a", "completed", deliveries=30, left=170, more_waiting=True), 200)
    assert sizes.size("a", None, 60) == 100  # half of what it took
    sizes.learn(DrainResult("a", "completed", deliveries=100, more_waiting=True), 100)
    assert sizes.size("a", None, 60) == 200  # a full batch in time: twice as many
    sizes.learn(DrainResult("a", "completed", deliveries=7), 200)
    assert sizes.size("a", None, 60) == 200  # all taken: as it was
    sizes.learn(DrainResult("a", "busy"), 200)
    assert sizes.size("a", None, 60) == 200
    assert sizes.size("b", None, 60) == 200  # each workspace its own
