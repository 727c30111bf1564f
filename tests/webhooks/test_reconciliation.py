"""Webhooks turned on for a loaded warehouse, with deliveries dropped on purpose: what the
receiver drained reaches `raw` (read by an analyst while the receiver runs), and the next poll
loads the rest, counting as missed exactly the records whose deliveries the sender dropped (its
own record is the truth), in its summary and in `status`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import duckdb
import pytest

from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox
from tests.support import (
    SandboxFactory,
    admin,
    cli_env,
    client_for,
    describe,
    differences,
    load_args,
    run_cli,
)
from tests.support.webhooks import ServedReceiver, drained, free_port, sender_done

pytestmark = pytest.mark.slow  # loads and drains with dropped deliveries

CHANGES = 12  # of each: contacts created, shipments sent (one event each)


def make_changes(running: RunningSandbox) -> list[tuple[str, str]]:
    """Contacts created and shipments sent (one recipient: one `shipment.sent` each), one
    after another: (table, id) in the order their events happen."""
    made = []
    with client_for(running) as api:
        document = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        for number in range(CHANGES):
            contact = api.post("/contacts", json={"email": f"hook.{number}@example.com"})
            made.append(("contacts", contact.json()["data"]["id"]))
            recipient = {"name": "Ada", "email": f"ada.{number}@example.com", "company": "Acme"}
            shipment = api.post(
                "/shipments", json={"document_id": document, "recipients": [recipient]}
            )
            made.append(("shipments", shipment.json()["data"]["id"]))
    return made


def test_dropped_deliveries_are_caught_by_the_next_poll_and_counted_as_missed(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=150, seed=23, webhook_retry_base_s=0.05)
    env = cli_env(running)
    warehouse = tmp_path / "signing.duckdb"
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0
    port = free_port()
    target = f"http://127.0.0.1:{port}"
    events = ["--event", "contact.created", "--event", "shipment.sent"]
    subscribe = ["webhooks", "subscribe", "--duckdb", str(warehouse), "--target-url", target]
    subscribed = run_cli([*subscribe, *events], cwd=tmp_path, env=env)
    assert subscribed.returncode == 0, describe(subscribed)
    admin(running, "PATCH", "/config", {"webhook_drop_rate": 0.4})
    receiver = ServedReceiver(
        tmp_path, warehouse, env, "--port", str(port), "--load-after", "0.2", "--load-within", "2"
    )
    receiver.start()
    try:
        changes = make_changes(running)
        sent = running.app.state.dispatcher.deliveries(running.store)
        assert len(sent) == len(changes)  # one delivery per change, in the order they happened
        dropped = {change for change, d in zip(changes, sent, strict=True) if d.dropped}
        assert 0 < len(dropped) < len(changes)
        delivered = len(changes) - len(dropped)
        assert sender_done(running)["counts"]["delivered"] == delivered
        drained(tmp_path, warehouse, env, accepted=delivered)
        # An analyst reads the warehouse while the receiver runs: between its drains.
        with duckdb.connect(str(warehouse), read_only=True) as db:
            in_raw = {
                (table, row[0])
                for table in ("contacts", "shipments")
                for row in db.execute(f"select id from raw.{table}").fetchall()
            }
        assert set(changes) - in_raw == dropped
    finally:
        receiver.stop()
    poll = run_cli(load_args(warehouse), cwd=tmp_path, env=env)
    assert poll.returncode == 0, describe(poll)
    said = re.search(
        r"webhooks: (\d+) changed .* missed .*, (\d+) had come by webhook", poll.stderr
    )
    assert said is not None, describe(poll)
    assert (int(said[1]), int(said[2])) == (len(dropped), delivered)
    assert differences(warehouse, running.store) == {}
    shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)
    assert f"webhooks: {len(dropped)} changed shipments and contacts had been missed" in (
        shown.stdout
    )

    # A full refresh reads every record again, not only the changes: none is counted as missed,
    # and status keeps the count of the last poll that compared.
    refresh = run_cli([*load_args(warehouse), "--full-refresh"], cwd=tmp_path, env=env)
    assert refresh.returncode == 0, describe(refresh)
    assert "missed" not in refresh.stderr, describe(refresh)
    with duckdb.connect(str(warehouse), read_only=True) as db:
        last = db.execute(
            "select missed_by_webhooks from raw._signing_runs order by started_at desc limit 1"
        ).fetchone()
    assert last == (None,)
    shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)
    assert f"webhooks: {len(dropped)} changed shipments and contacts had been missed" in (
        shown.stdout
    )


def test_a_first_load_of_a_subscribed_workspace_counts_nothing_as_missed(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """Subscribed before its first load, a workspace's first poll reads every record, not the
    changes since a cursor: none of them was missed by the webhooks, so none is said to be."""
    running = make_sandbox(limits_enabled=False, shipments=30, seed=23)
    env = cli_env(running)
    warehouse = tmp_path / "signing.duckdb"
    target = f"http://127.0.0.1:{free_port()}"
    subscribe = ["webhooks", "subscribe", "--duckdb", str(warehouse), "--target-url", target]
    subscribed = run_cli(subscribe, cwd=tmp_path, env=env)
    assert subscribed.returncode == 0, describe(subscribed)

    first = run_cli(load_args(warehouse), cwd=tmp_path, env=env)

    assert first.returncode == 0, describe(first)
    assert "missed" not in first.stderr, describe(first)
    with duckdb.connect(str(warehouse), read_only=True) as db:
        counted = db.execute("select missed_by_webhooks from raw._signing_runs").fetchall()
    assert counted == [(None,)]
    shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)
    assert shown.returncode == 0, describe(shown)
    assert "missed" not in shown.stdout, shown.stdout

    # A later load counts again, also when its local working folder is new (as after `forget`,
    # or on a shared database, where each run has one of its own): the cursors are the
    # warehouse's, not the folder's. No receiver runs, so every change is missed.
    admin(running, "POST", "/touch", {"entity": "contacts", "count": 3})
    shutil.rmtree(Warehouse.at(warehouse).pipelines_dir)
    later = run_cli(load_args(warehouse), cwd=tmp_path, env=env)
    assert later.returncode == 0, describe(later)
    said = re.search(r"webhooks: (\d+) changed .* missed", later.stderr)
    assert said is not None, describe(later)
    assert int(said[1]) >= 3
