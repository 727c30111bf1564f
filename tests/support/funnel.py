"""The funnel metrics as the sandbox's own records say they must be, computed from its stores
(never through the pipeline, the marts or MetricFlow): per workspace and period of sending."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime
from typing import Any

from sandbox import Shipment, Store

from .truth import earliest, week_of

# One shipment's period: a function of the epoch-millisecond time it was sent.
Period = Callable[[int], Any]


def first_sent(shipment: Shipment) -> int | None:
    """When the shipment was sent: its first recipient's sending (None: not sent)."""
    return earliest([r.sent_at for r in shipment.recipients])


def funnel_by_period(
    stores: Iterable[Store], period: Period = week_of
) -> dict[tuple[Any, str], dict[str, int]]:
    """Per (period, workspace id): the live shipments sent then, and how many of them were
    completed, expired or revoked by now."""
    found: dict[tuple[Any, str], dict[str, int]] = {}
    for store in stores:
        with store.lock:
            workspace = store.workspace.id
            shipments = list(store.shipments.by_id.values())
        for shipment in shipments:
            sent = first_sent(shipment)
            if sent is None:
                continue
            counts = found.setdefault(
                (period(sent), workspace), {"sent": 0, "completed": 0, "expired": 0, "revoked": 0}
            )
            counts["sent"] += 1
            for status in ("completed", "expired", "revoked"):
                counts[status] += shipment.status == status
    return found


def sent_between(store: Store, start: date, end: date) -> list[Shipment]:
    """The live shipments of one workspace sent from `start` to `end` (UTC days, included)."""
    with store.lock:
        shipments = list(store.shipments.by_id.values())
    return [
        s for s in shipments if (sent := first_sent(s)) is not None and start <= _day(sent) <= end
    ]


def _day(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()
