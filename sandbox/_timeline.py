"""Sandbox time: the clock, and every shipment's planned future and what each step does.

Every shipment gets its whole future planned when it is created (sent, delivered, opened,
signed, completed, or expired, revoked, failed, archived), drawn from one seeded random stream.
The store then applies the steps whose time has come, so history and later activity follow one
set of rules and the same seed always gives the same data.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ._model import Recipient, Shipment
from ._steps import Kind, pack_step, unpack_step

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
FAILED_DELIVERY_ERROR = "550 5.1.1 mailbox unavailable"


class SandboxClock:
    """Sandbox time: the start instant plus real elapsed time plus every advance."""

    def __init__(self, start_ms: int) -> None:
        self._start_ms = start_ms
        self._real_start = time.monotonic()
        self._advanced_ms = 0

    def now_ms(self) -> int:
        elapsed = int((time.monotonic() - self._real_start) * 1000)
        return self._start_ms + self._advanced_ms + elapsed

    def advance(self, milliseconds: int) -> None:
        self._advanced_ms += max(0, milliseconds)


@dataclass(frozen=True, slots=True)
class Behaviour:
    """How recipients behave; defaults give a realistic funnel (about 92% open, 90% of those
    sign, a few percent revoked or undeliverable)."""

    p_delivery_failure: float = 0.02
    p_open: float = 0.92
    p_sign_after_open: float = 0.9
    p_revoke: float = 0.03
    p_archive: float = 0.25
    median_open_hours: float = 3.0
    median_sign_hours: float = 1.5
    max_extra_views: int = 3


def _lognormal_ms(rng: random.Random, median_hours: float, sigma: float = 1.3) -> int:
    return int(rng.lognormvariate(math.log(median_hours), sigma) * HOUR_MS) + 1_000


def plan_timeline(
    rng: random.Random,
    created_ms: int,
    recipients: list[Recipient],
    sign_mode: str,
    expires_ms: int,
    behaviour: Behaviour,
) -> list[int]:
    """Every step the shipment will go through, sorted by time (packed ints)."""
    steps: list[int] = []
    revoke_at = (
        created_ms + rng.randrange(HOUR_MS, max(HOUR_MS + 1, expires_ms - created_ms))
        if rng.random() < behaviour.p_revoke
        else None
    )
    cutoff = min(expires_ms, revoke_at) if revoke_at else expires_ms
    send_at = created_ms + rng.randrange(1_000, 30_000)
    all_signed_at: int | None = 0
    for recipient in recipients:
        if send_at >= cutoff:
            all_signed_at = None
            break
        signed_at = _plan_recipient(rng, steps, recipient, send_at, cutoff, behaviour)
        if signed_at is None:
            # A sequential flow stops at the first recipient who does not sign.
            all_signed_at = None
            if sign_mode == "sequential":
                break
            continue
        if all_signed_at is not None:
            all_signed_at = max(all_signed_at, signed_at)
        if sign_mode == "sequential":
            send_at = signed_at + rng.randrange(1_000, 10_000)
    _plan_end(rng, steps, all_signed_at, revoke_at, expires_ms, behaviour)
    steps.sort()
    return steps


def _plan_recipient(
    rng: random.Random,
    steps: list[int],
    recipient: Recipient,
    send_at: int,
    cutoff: int,
    behaviour: Behaviour,
) -> int | None:
    """One recipient's steps from sending on, added to `steps`; when they sign (None: never,
    or the delivery failed)."""
    index = recipient.position
    steps.append(pack_step(send_at, Kind.SENT, index))
    if recipient.email.endswith(".invalid") or rng.random() < behaviour.p_delivery_failure:
        steps.append(pack_step(send_at + rng.randrange(2_000, 60_000), Kind.DELIVERY_FAILED, index))
        return None
    delivered = send_at + rng.randrange(1_000, 120_000)
    steps.append(pack_step(delivered, Kind.DELIVERED, index))
    if rng.random() >= behaviour.p_open:
        return None
    opened = delivered + _lognormal_ms(rng, behaviour.median_open_hours)
    if opened >= cutoff:
        return None
    steps.append(pack_step(opened, Kind.OPENED, index))
    view_at = opened
    for _ in range(rng.randint(0, behaviour.max_extra_views)):
        view_at += _lognormal_ms(rng, 6.0)
        if view_at < cutoff:
            steps.append(pack_step(view_at, Kind.VIEWED, index))
    if rng.random() >= behaviour.p_sign_after_open:
        return None
    signed_at = opened + _lognormal_ms(rng, behaviour.median_sign_hours)
    if signed_at >= cutoff:
        return None
    steps.append(pack_step(signed_at, Kind.SIGNED, index))
    return signed_at


def _plan_end(
    rng: random.Random,
    steps: list[int],
    all_signed_at: int | None,
    revoke_at: int | None,
    expires_ms: int,
    behaviour: Behaviour,
) -> None:
    """How the shipment ends (completed, revoked or expired), and maybe its archiving."""
    if all_signed_at:
        end = all_signed_at + 1
        steps.append(pack_step(end, Kind.COMPLETED, 0))
    elif revoke_at is not None:
        end = revoke_at
        steps.append(pack_step(revoke_at, Kind.REVOKED, 0))
    else:
        end = expires_ms
        steps.append(pack_step(expires_ms, Kind.EXPIRED, 0))
    if rng.random() < behaviour.p_archive:
        steps.append(pack_step(end + rng.randrange(7 * DAY_MS, 60 * DAY_MS), Kind.ARCHIVED, 0))


def next_step_ms(shipment: Shipment) -> int | None:
    """When the shipment's next planned step happens; None once it has no more."""
    if shipment.applied >= len(shipment.timeline):
        return None
    return unpack_step(shipment.timeline[shipment.applied])[0]


def apply_until(shipment: Shipment, until_ms: int) -> Iterator[tuple[int, Kind, Recipient]]:
    """Apply the planned steps up to `until_ms` one by one, yielding each once it happened (a
    listener sees the records as they were right after that step)."""
    timeline = shipment.timeline
    while shipment.applied < len(timeline):
        at_ms, kind, index = unpack_step(timeline[shipment.applied])
        if at_ms > until_ms:
            return
        shipment.applied += 1
        recipient = shipment.recipients[index]
        apply_step(shipment, recipient, kind, at_ms)
        yield at_ms, kind, recipient


def apply_step(shipment: Shipment, recipient: Recipient, kind: Kind, at_ms: int) -> None:
    """What one planned step does to the records."""
    if kind is Kind.SENT:
        recipient.status = "sent"
        recipient.sent_at = at_ms
        recipient.delivery_status = "queued"
    elif kind is Kind.DELIVERED:
        recipient.delivery_status = "delivered"
        recipient.delivered_at = at_ms
    elif kind is Kind.DELIVERY_FAILED:
        recipient.delivery_status = "failed"
        recipient.last_error = FAILED_DELIVERY_ERROR
    elif kind in (Kind.OPENED, Kind.VIEWED):
        if recipient.status != "signed":
            recipient.status = "opened"
        if recipient.first_opened_at is None:
            recipient.first_opened_at = at_ms
        recipient.view_count += 1
        recipient.last_viewed_at = at_ms
    elif kind is Kind.SIGNED:
        recipient.status = "signed"
        recipient.signed_at = at_ms
    elif kind is Kind.COMPLETED:
        shipment.status = "completed"
        shipment.completed_at = at_ms
    elif kind is Kind.EXPIRED:
        shipment.status = "expired"
        shipment.expired_at = at_ms
    elif kind is Kind.REVOKED:
        shipment.status = "revoked"
        shipment.revoked_at = at_ms
    elif kind is Kind.ARCHIVED:
        shipment.archived_at = at_ms
