"""The receiver brings the marts up to date after each drain, not only raw: shipments sent in
the sandbox while `signing-etl webhooks serve` runs are counted in the marts of the published
warehouse without another load, as the sandbox's own records say, and an analyst reading the
warehouse meanwhile never fails."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from sandbox import RunningSandbox
from tests.support import SandboxFactory, cli_env, client_for, describe, run_cli
from tests.support.waiting import wait_until
from tests.support.webhooks import ServedReceiver, free_port

pytestmark = pytest.mark.slow  # drains with a build after each

SENT = 4  # shipments sent through the API while the receiver runs
MARTS_DEADLINE_S = 600.0  # a generous bound on a loaded machine; no time is asserted


def send_shipments(running: RunningSandbox) -> list[str]:
    """Shipments sent through the API (one `shipment.sent` delivery each): their ids."""
    sent = []
    with client_for(running) as api:
        document = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        for number in range(SENT):
            recipients = [
                {"name": "Ada", "email": f"ada.{number}@example.com", "company": "Acme"},
                {"name": "Grace", "email": f"grace.{number}@example.com"},
            ]
            shipment = api.post(
                "/shipments", json={"document_id": document, "recipients": recipients}
            )
            sent.append(shipment.json()["data"]["id"])
    return sent


def marts_of(warehouse: Path, shipment_ids: list[str]) -> dict[str, tuple[str, int, bool]]:
    """What the published warehouse's fct_shipments says of those shipments, read as an analyst
    reads it (read-only, while the receiver may be draining)."""
    with duckdb.connect(str(warehouse), read_only=True) as db:
        rows = db.execute(
            "select shipment_id, shipment_status, count_recipients, is_sent "
            "from marts.fct_shipments where shipment_id in (select unnest(?))",
            [shipment_ids],
        ).fetchall()
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def sent_in_funnel(warehouse: Path) -> int:
    with duckdb.connect(str(warehouse), read_only=True) as db:
        found = db.execute(
            "select sum(count_shipments_sent) from marts.fct_signing_funnel"
        ).fetchone()
    return int(found[0]) if found and found[0] is not None else 0


def test_shipments_sent_while_the_receiver_runs_are_counted_in_the_marts_without_a_load(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=40, seed=31)
    env = cli_env(running)
    warehouse = tmp_path / "signing.duckdb"
    loaded = run_cli(["load", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)  # with models
    assert loaded.returncode == 0, describe(loaded)
    port = free_port()
    subscribe = ["webhooks", "subscribe", "--duckdb", str(warehouse)]
    subscribe += ["--target-url", f"http://127.0.0.1:{port}", "--event", "shipment.sent"]
    subscribed = run_cli(subscribe, cwd=tmp_path, env=env)
    assert subscribed.returncode == 0, describe(subscribed)
    receiver = ServedReceiver(
        tmp_path, warehouse, env, "--port", str(port), "--load-after", "0.2", "--load-within", "2"
    )
    receiver.start()
    try:
        sent = send_shipments(running)
        wait_until(
            lambda: len(marts_of(warehouse, sent)) == SENT,
            MARTS_DEADLINE_S,
            "the marts to hold the shipments sent",
        )
        found = marts_of(warehouse, sent)
    finally:
        receiver.stop()
    with running.store.lock:
        shipments = [running.store.shipments.by_id[i] for i in sent]
        every_sent = sum(
            any(r.sent_at is not None for r in s.recipients)
            for s in running.store.shipments.by_id.values()
        )
    assert found == {s.id: (s.status, len(s.recipients), True) for s in shipments}
    assert sent_in_funnel(warehouse) == every_sent
    assert "marts refreshed" in receiver.log(), receiver.log()
