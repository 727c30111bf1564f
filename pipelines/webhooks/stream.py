"""The event stream kept in the warehouse: `raw.webhook_deliveries`, one row per accepted
delivery (deduplicated on the workspace and the delivery id), loaded with the records it named.

A row says what the service announced and when: the event, the shipment (and recipient) or
contact it named, the event's time, the delivery's signed timestamp and when the receiver
accepted it. Never its body, signature or secret.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dlt
from dlt.sources import DltResource

from pipelines.raw.schema_changes import DELIVERIES_TABLE
from pipelines.webhooks.inbox import Delivery

TABLE = DELIVERIES_TABLE
COLUMNS: dict[str, dict[str, Any]] = {
    "workspace_id": {"data_type": "text", "nullable": False},
    "delivery_id": {"data_type": "text", "nullable": False},
    "event": {"data_type": "text"},
    "shipment_id": {"data_type": "text"},
    "recipient_id": {"data_type": "text"},
    "contact_id": {"data_type": "text"},
    "occurred_at": {"data_type": "timestamp"},  # the event, as the payload dates it
    "sent_at": {"data_type": "timestamp"},  # X-Service-Timestamp (the service's clock)
    "received_at": {"data_type": "timestamp"},  # when the receiver accepted it (its clock)
}


def stream_row(delivery: Delivery) -> dict[str, Any]:
    kind, record_id = delivery.record_kind, delivery.record_id
    return {
        "workspace_id": delivery.workspace_id,
        "delivery_id": delivery.delivery_id,
        "event": delivery.event,
        "shipment_id": record_id if kind == "shipments" else None,
        "recipient_id": delivery.recipient_id,
        "contact_id": record_id if kind == "contacts" else None,
        "occurred_at": delivery.occurred_at,
        "sent_at": delivery.sent_at,
        "received_at": delivery.received_at,
    }


def deliveries_resource(deliveries: Sequence[Delivery]) -> DltResource:
    """The deliveries as `raw.webhook_deliveries` rows, merged on (workspace, delivery id)."""
    rows = {(d.workspace_id, d.delivery_id): stream_row(d) for d in deliveries}
    columns: Any = {name: {**hints, "name": name} for name, hints in COLUMNS.items()}
    return dlt.resource(
        list(rows.values()),
        name=TABLE,
        write_disposition="merge",
        primary_key=("workspace_id", "delivery_id"),
        columns=columns,
    )
