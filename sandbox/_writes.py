"""The changes the API makes to a workspace: shipments sent, contacts upserted, webhooks
subscribed and deleted, each by the rules of its request.

Sending a shipment checks its document, field values and recipients, answers a repeated
`Idempotency-Key` with its first answer, spends the daily allowance and plans the shipment's
future. The caller holds `Store.lock`.
"""

from __future__ import annotations

import hashlib
import random
import secrets

from ._errors import DailyAllowanceExhausted, SandboxError
from ._generate import Ids, Person, new_shipment
from ._model import JSON, Contact, Document, IdempotentReply, Webhook
from ._store import StepEvent, Store
from ._timeline import DAY_MS

MAX_RECIPIENTS = 200


def create_shipment(store: Store, body: JSON, idempotency_key: str | None) -> tuple[int, JSON]:
    """Validate, resolve recipients, spend the daily allowance and plan the shipment."""
    digest = hashlib.sha256(repr(sorted(body.items())).encode()).hexdigest()
    if idempotency_key:
        stored = store.idempotency.get(idempotency_key)
        if stored is not None:
            if stored.body_digest != digest:
                raise SandboxError(
                    422, "invalid_request", "Idempotency-Key was used with a different body"
                )
            return stored.status_code, stored.body
    document = store.documents.by_id.get(str(body.get("document_id")))
    if document is None:
        raise SandboxError(404, "not_found", "document not found")
    _check_field_values(document, body.get("field_values") or {})
    people = _resolve_recipients(store, body)
    if not people:
        raise SandboxError(422, "invalid_request", "at least one recipient is required")
    now = store.clock.now_ms()
    _spend_daily_allowance(store, now)
    rng = random.Random(f"{store.config.seed}:{now}:{digest}:{len(store.shipments)}")
    shipment = new_shipment(
        rng,
        Ids.from_rng(rng),
        now,
        document,
        people,
        store.contact_list,
        store.config.behaviour,
        channel=body.get("channel"),
        signature_level=body.get("signature_level"),
        expires_in_days=body.get("expires_in_days"),
        password=body.get("password"),
        placeholders={str(k): str(v) for k, v in (body.get("placeholders") or {}).items()},
        field_values=body.get("field_values") or {},
    )
    store.add_shipment(shipment)
    # What the dispatch queue gets out at once: every step within the first few seconds.
    store.apply_due(shipment, now + 30_000)
    sent = sum(1 for r in shipment.recipients if r.sent_at is not None)
    failed = sum(1 for r in shipment.recipients if r.delivery_status == "failed")
    dispatch = {
        "sent": sent - failed,
        "failed": failed,
        "remaining": len(shipment.recipients) - sent,
    }
    reply = {"data": shipment.to_json(), "dispatch": dispatch}
    if idempotency_key:
        store.idempotency[idempotency_key] = IdempotentReply(digest, 201, reply)
    return 201, reply


def _spend_daily_allowance(store: Store, now: int) -> None:
    """One shipment of the sandbox day's allowance, or 429 until the sandbox's midnight."""
    day = now // DAY_MS
    if store.daily_shipments_used.get(day, 0) >= store.config.daily_shipments:
        raise DailyAllowanceExhausted((day + 1) * DAY_MS - now)
    store.daily_shipments_used[day] = store.daily_shipments_used.get(day, 0) + 1


def _resolve_recipients(store: Store, body: JSON) -> list[Person]:
    """Recipients given directly, then by contact ids, then by groups; one per e-mail."""
    people: dict[str, Person] = {}
    for item in body.get("recipients") or []:
        email = str(item.get("email") or "").strip()
        if "@" not in email:
            raise SandboxError(422, "invalid_request", "each recipient needs an e-mail")
        people.setdefault(
            email.lower(),
            (str(item.get("name") or email), email, None, item.get("company"), None),
        )
    contacts = [_contact_or_422(store, cid) for cid in body.get("contact_ids") or []]
    for group in body.get("group_ids") or []:
        contacts.extend(c for c in store.contact_list if group in c.group_ids)
    for c in contacts:
        people.setdefault(c.email.lower(), (c.name, c.email, c.phone, c.company, c.id))
    if len(people) > MAX_RECIPIENTS:
        raise SandboxError(
            422, "invalid_request", f"at most {MAX_RECIPIENTS} recipients per shipment"
        )
    return list(people.values())


def _contact_or_422(store: Store, contact_id: str) -> Contact:
    contact = store.contacts.by_id.get(contact_id)
    if contact is None:
        raise SandboxError(422, "invalid_request", f"unknown contact id {contact_id!r}")
    return contact


def _check_field_values(document: Document, values: JSON) -> None:
    """Pre-filled values must have the shape the filled-in content shows for their field type:
    a string for text, `{variantId, extras}` for payment. Ids of no field are ignored."""
    for fld in document.fields:
        if fld.id not in values:
            continue
        value = values[fld.id]
        if fld.type == "payment":
            extras = value.get("extras") if isinstance(value, dict) else None
            valid = (
                isinstance(value, dict)
                and isinstance(value.get("variantId"), str)
                and isinstance(extras, dict)
                and all(isinstance(v, str) for v in extras.values())
            )
            expected = "an object with variantId (string) and extras (strings)"
        else:
            valid = isinstance(value, str)
            expected = "a string"
        if not valid:
            raise SandboxError(
                422, "invalid_request", f"field_values[{fld.id!r}] must be {expected}"
            )


def upsert_contact(store: Store, body: JSON) -> tuple[int, Contact]:
    """Update by e-mail or id when the contact exists (200), else create it (201)."""
    email, contact_id = body.get("email"), body.get("id")
    if not email and not contact_id:
        raise SandboxError(422, "invalid_request", "email or id is required")
    now = store.clock.now_ms()
    existing = (store.contacts.by_id.get(contact_id) if contact_id else None) or (
        store.contacts_by_email.get(email.lower()) if email else None
    )
    if existing is None:
        if not email:
            raise SandboxError(422, "invalid_request", "a new contact needs an email")
        contact = Contact(
            id=contact_id or f"ct_{secrets.token_hex(6)}",
            name=body.get("name") or email,
            email=email,
            phone=body.get("phone"),
            company=body.get("company"),
            position=body.get("position"),
            notes=body.get("notes"),
            custom=dict(body.get("custom") or {}),
            group_ids=sorted(set(body.get("group_ids") or [])),
            created_at=now,
            updated_at=now,
        )
        # A deleted contact whose id is given again is gone for good: no restore then.
        store.deleted.contacts.pop(contact.id, None)
        store.deleted.at_ms.pop(("contacts", contact.id), None)
        store.add_contact(contact)
        store.emit(StepEvent("contact.created", now, contact=contact))
        return 201, contact
    if email and email.lower() != existing.email.lower():
        store.change_email(existing, email)
    for name in ("name", "phone", "company", "position", "notes"):
        if name in body:
            setattr(existing, name, body[name])
    existing.custom.update(body.get("custom") or {})
    if "group_ids" in body:
        existing.group_ids = sorted(set(body["group_ids"] or []))
    store.contacts.touch(existing, max(now, existing.updated_at))
    return 200, existing


def create_webhook(store: Store, event: str, target_url: str) -> Webhook:
    """A subscription with a secret of its own; its id comes from the workspace's id stream."""
    hook = Webhook(
        id=f"wh_{store.ids.webhooks.getrandbits(64):016x}",  # collide across workspaces
        event=event,
        target_url=target_url,
        secret=f"whsec_{secrets.token_hex(24)}",
        created_at=store.clock.now_ms(),
    )
    store.webhooks[hook.id] = hook
    return hook


def delete_webhook(store: Store, hook_id: str) -> None:
    if store.webhooks.pop(hook_id, None) is None:
        raise SandboxError(404, "not_found", f"webhook {hook_id!r} not found")
