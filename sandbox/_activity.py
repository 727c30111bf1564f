"""Simulated activity in a workspace: moving its clock, scattered edits and bulk updates.

Advancing applies that period's activity in time order (new shipments, the application's
restores and deletes, the planned steps of every shipment, contact edits), by the same rules
that made the history.
"""

from __future__ import annotations

import asyncio
import heapq
import random

from ._errors import SandboxError
from ._generate import new_shipment
from ._steps import unpack_step
from ._store import RECORD_KINDS, Store
from ._timeline import DAY_MS, next_step_ms

BACKGROUND_TICK_S = 0.05


def advance(store: Store, milliseconds: int) -> dict[str, int]:
    """Move the clock forward and let that period's activity happen, in time order."""
    with store.lock:
        start = store.clock.now_ms()
        end = start + max(0, milliseconds)
        counts = {"new_shipments": 0, "steps": 0, "contacts_changed": 0}
        rng, config = store.activity_rng, store.config
        per_day = config.shipments / max(1, config.history_days)
        new_count = _draw_count(rng, per_day * milliseconds / DAY_MS)
        if not store.document_list:
            new_count = 0  # every template deleted: nothing to send
        for created in sorted(rng.randrange(start, end + 1) for _ in range(new_count)):
            shipment = new_shipment(
                rng,
                store.ids,
                created,
                rng.choice(store.document_list),
                None,
                store.contact_list,
                config.behaviour,
            )
            store.add_shipment(shipment)
            heapq.heappush(store.pending, (unpack_step(shipment.timeline[0])[0], shipment.id))
            counts["new_shipments"] += 1
        counts.update(_restore_and_delete(store, start, end))
        while store.pending and store.pending[0][0] <= end:
            due_ms, shipment_id = heapq.heappop(store.pending)
            due = store.shipments.by_id.get(shipment_id)
            if due is None or next_step_ms(due) != due_ms:
                continue  # deleted, or a stale entry: the step was applied by another path
            before = due.applied
            store.apply_due(due, end)
            counts["steps"] += due.applied - before
        edits = int(len(store.contacts) * 0.002 * milliseconds / DAY_MS)
        for at_ms in sorted(rng.randrange(start, end + 1) for _ in range(edits)):
            contact = rng.choice(store.contact_list)
            contact.custom["crm.last_touch"] = f"t{at_ms}"
            store.contacts.touch(contact, max(contact.updated_at, at_ms))
            counts["contacts_changed"] += 1
        store.clock.advance(end - store.clock.now_ms())
        return counts


def _draw_count(rng: random.Random, expected: float) -> int:
    """A whole number of events whose mean is `expected`: the fraction decides by chance."""
    return int(expected) + (rng.random() < expected % 1)


def _restore_and_delete(store: Store, start: int, end: int) -> dict[str, int]:
    """The application's restores and deletes between `start` and `end`: each kind gets back
    `restore_rate` of its deleted records a day (without a change stamp) and loses
    `delete_rate` of its live ones a day. A shipment deleted at some instant has its steps
    up to then applied first; the rest of its plan is cancelled. Nothing is drawn while both
    rates are 0, so the rest of the activity is what it was before these existed."""
    config, rng = store.config, store.deletion_rng
    days = (end - start) / DAY_MS
    counts = {"restored": 0, "deleted": 0}
    for kind in RECORD_KINDS:
        if config.restore_rate > 0:
            waiting = list(store.deleted.of(kind))
            count = _draw_count(rng, config.restore_rate * len(waiting) * days)
            for record_id in rng.sample(waiting, min(len(waiting), count)):
                try:
                    store.restore(kind, record_id)
                except SandboxError:
                    continue  # a contact whose e-mail another took meanwhile stays deleted
                counts["restored"] += 1
        if config.delete_rate > 0:
            live = store.live_ids(kind)
            count = _draw_count(rng, config.delete_rate * len(live) * days)
            chosen = rng.sample(live, min(len(live), count))
            times = sorted(rng.randrange(start, end + 1) for _ in chosen)
            instants = dict(zip(chosen, times, strict=True))
            if kind == "shipments":
                for record_id, at_ms in instants.items():
                    shipment = store.shipments.by_id[record_id]
                    instants[record_id] = max(at_ms, shipment.created_at)
                    store.apply_due(shipment, instants[record_id])
            counts["deleted"] += len(store.delete_at(kind, instants))
    return counts


def jiggle(store: Store, count: int) -> None:
    """Update `count` random old records one by one, as people edit contacts and reopen
    finished documents: the changes that shift records between pages of a list."""
    if count <= 0:
        return
    with store.lock:
        rng = store.activity_rng
        for _ in range(count):
            now = store.clock.now_ms()
            if rng.random() < 0.5:
                if not store.contact_list:
                    continue
                contact = rng.choice(store.contact_list)
                contact.custom["crm.last_touch"] = str(now)
                store.contacts.touch(contact, max(contact.updated_at, now))
            elif store.shipments:
                shipment = store.shipments.by_id[rng.choice(store.shipment_ids())]
                recipient = shipment.recipients[0]
                if recipient.sent_at is None:
                    continue
                recipient.view_count += 1
                recipient.last_viewed_at = now
                store.move_shipment(shipment, max(shipment.updated_at, now))


def touch(store: Store, entity: str, count: int) -> int:
    """Give `count` records one shared `updated_at` (a bulk update), as real data has."""
    with store.lock:
        now, rng = store.clock.now_ms(), store.activity_rng
        if entity == "contacts":
            contacts = rng.sample(store.contact_list, min(count, len(store.contacts)))
            for contact in contacts:
                contact.notes = f"bulk update {now}"
                store.contacts.touch(contact, now)
            return len(contacts)
        if entity == "shipments":
            ids = rng.sample(store.shipment_ids(), min(count, len(store.shipments)))
            for shipment_id in ids:
                shipment = store.shipments.by_id[shipment_id]
                shipment.recipients[0].view_count += 1
                shipment.recipients[0].last_viewed_at = now
                store.move_shipment(shipment, now)
            return len(ids)
        if entity == "documents":
            documents = rng.sample(store.document_list, min(count, len(store.documents)))
            for doc in documents:
                doc.status = "active"
                store.documents.touch(doc, now)
            return len(documents)
        raise SandboxError(422, "invalid_request", f"unknown entity {entity!r}")


async def run_in_background(store: Store, speed: float, touches_per_second: float) -> None:
    """Until cancelled: `speed` simulated seconds per real second, plus `touches_per_second`
    single-record edits scattered over all records."""
    carry = 0.0
    while True:
        await asyncio.sleep(BACKGROUND_TICK_S)
        advance(store, int(speed * BACKGROUND_TICK_S * 1000))
        carry += touches_per_second * BACKGROUND_TICK_S
        jiggle(store, int(carry))
        carry -= int(carry)
