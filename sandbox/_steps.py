"""The steps of a shipment's timeline: their kinds, what each is called in the audit trail and
in webhook events, and their packing into sortable ints.

A shipment keeps its whole planned future as a list of packed steps, so 200,000 shipments with
a dozen steps each stay small; `_timeline` plans and applies them, `_model` derives the audit
trail from those that happened.
"""

from __future__ import annotations

from enum import IntEnum


class Kind(IntEnum):
    """What happens at one point of a shipment's timeline; the order breaks ties at one instant."""

    SENT = 1
    DELIVERED = 2
    DELIVERY_FAILED = 3
    OPENED = 4
    VIEWED = 5
    SIGNED = 6
    COMPLETED = 7
    EXPIRED = 8
    REVOKED = 9
    ARCHIVED = 10


# Audit trail `type` of each timeline kind (archiving leaves no audit event).
AUDIT_TYPE: dict[Kind, str] = {
    Kind.SENT: "sent",
    Kind.DELIVERED: "delivered",
    Kind.DELIVERY_FAILED: "delivery_failed",
    Kind.OPENED: "opened",
    Kind.VIEWED: "opened",
    Kind.SIGNED: "signed",
    Kind.COMPLETED: "completed",
    Kind.EXPIRED: "expired",
    Kind.REVOKED: "revoked",
}

# Webhook event fired by each timeline kind, for the kinds that have one.
WEBHOOK_EVENT: dict[Kind, str] = {
    Kind.SENT: "shipment.sent",
    Kind.OPENED: "shipment.opened",
    Kind.SIGNED: "shipment.signed",
    Kind.COMPLETED: "shipment.completed",
    Kind.EXPIRED: "shipment.expired",
    Kind.DELIVERY_FAILED: "shipment.delivery_failed",
}


def pack_step(at_ms: int, kind: Kind, recipient_index: int) -> int:
    """Pack one timeline step into an int that sorts by time, then kind, then recipient."""
    return (at_ms << 12) | (int(kind) << 8) | recipient_index


def unpack_step(step: int) -> tuple[int, Kind, int]:
    """Inverse of `pack_step`."""
    return step >> 12, Kind((step >> 8) & 0xF), step & 0xFF
