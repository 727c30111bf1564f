"""The demo's webhook step: a shipment sent in the sandbox reaches `raw` through the receiver,
loaded by a drain (the shipment's row and its delivery's row share one load)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipelines.demo import run_demo


@pytest.mark.slow
def test_the_demo_shows_a_shipment_sent_in_the_sandbox_reaching_raw_through_the_receiver(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    result = run_demo(tmp_path / "demo.duckdb", shipments=150, weeks=1, say=said.append)
    trip = result.webhook
    assert trip is not None
    with duckdb.connect(str(tmp_path / "demo.duckdb"), read_only=True) as db:
        shipment = db.execute(
            "select _dlt_load_id from raw.shipments where id = ?", [trip.shipment_id]
        ).fetchall()
        stream = db.execute(
            "select event, _dlt_load_id from raw.webhook_deliveries where shipment_id = ?",
            [trip.shipment_id],
        ).fetchall()
    assert len(shipment) == 1
    assert stream == [("shipment.sent", shipment[0][0])]
    assert any(trip.shipment_id in line and "through the webhook receiver" in line for line in said)
