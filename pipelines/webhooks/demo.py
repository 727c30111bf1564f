"""The demo's webhook step: a change in the sandbox reaching `raw` through the receiver.

The receiver is served in this process on a free loopback port, the sandbox's workspace is
subscribed to it (its secret kept beside the demo warehouse, as `webhooks subscribe` keeps it),
a shipment is sent in the sandbox, and the step waits until that shipment is in
`raw.shipments`: a signed delivery, verified and kept in the inbox, drained by a small load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from pipelines.configuration import WorkspaceEntry
from pipelines.errors import WarehouseError, WebhooksError
from pipelines.warehouse import Warehouse
from pipelines.webhooks.receiver import ReceiverSettings
from pipelines.webhooks.secrets_file import SecretsFile
from pipelines.webhooks.service import WebhookReceiver
from pipelines.webhooks.subscriptions import subscribe
from sources.signing import Pacing

QUIET_SECONDS = 0.5  # the demo's drain follows its one delivery closely
LONGEST_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class WebhookTrip:
    """The shipment the demo sent, and how long it took to reach `raw` (seconds)."""

    shipment_id: str
    seconds: float


def webhook_step(
    warehouse: Warehouse,
    base_url: str,
    api_key: str,
    say: Callable[[str], None],
    pacing: Pacing | None = None,
) -> WebhookTrip:
    """The demo's step: `webhook_trip`, said before and after."""
    say("Webhooks: a receiver subscribed, a shipment sent in the sandbox…")
    trip = webhook_trip(warehouse, base_url, api_key, pacing)
    say(
        f"  shipment {trip.shipment_id} reached raw.shipments through the webhook receiver in "
        f"{trip.seconds:.1f} s (a signed delivery, kept in the inbox, drained by a small load)"
    )
    return trip


def webhook_trip(
    warehouse: Warehouse, base_url: str, api_key: str, pacing: Pacing | None = None
) -> WebhookTrip:
    """Send a shipment in the sandbox at `base_url` and wait for it in `raw.shipments` (its
    drain paced by `pacing`, when given, instead of the configured pacing)."""
    entry = WorkspaceEntry("default", base_url, api_key)
    receiver = WebhookReceiver(
        warehouse,
        [entry],
        ReceiverSettings(port=0),
        load_after=QUIET_SECONDS,
        load_within=QUIET_SECONDS * 4,
        pacing=pacing,
    )
    receiver.start()
    try:
        target = f"http://127.0.0.1:{receiver.server.port}"
        subscribe(entry, SecretsFile(warehouse.webhooks_dir), target, ["shipment.sent"])
        started = time.monotonic()
        shipment_id = _send_shipment(base_url, api_key)
        _wait_for(warehouse, shipment_id, started)
        return WebhookTrip(shipment_id, time.monotonic() - started)
    finally:
        receiver.stop()


def _send_shipment(base_url: str, api_key: str) -> str:
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30
    ) as api:
        document = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        sent = api.post(
            "/shipments",
            json={
                "document_id": document,
                "recipients": [
                    {"name": "Webhook Demo", "email": "webhook.demo@example.com", "company": "Demo"}
                ],
            },
        )
        sent.raise_for_status()
        return str(sent.json()["data"]["id"])


def _wait_for(warehouse: Warehouse, shipment_id: str, started: float) -> None:
    """Until the shipment is in `raw.shipments` (read as an analyst reads: read-only, between
    the drain's loads)."""
    while time.monotonic() - started < LONGEST_WAIT_SECONDS:
        try:
            with warehouse.reader() as client:
                found = client.execute_sql(
                    f"select count(*) from {client.make_qualified_table_name('shipments')} "
                    "where id = %s",
                    shipment_id,
                )
            if found and found[0][0]:
                return
        except WarehouseError:
            pass  # the drain holds the file for a moment
        time.sleep(0.1)
    raise WebhooksError(
        f"the shipment sent in the sandbox did not reach raw.shipments within "
        f"{LONGEST_WAIT_SECONDS:.0f} s"
    )
