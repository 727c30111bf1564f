"""A service that changes under its clients: with `new_personal_fields` the sandbox sends fields
the API reference does not list (a contact's `address` and `previous_emails`, a recipient's
`mobile_number`, an audit actor's `device` and `location`), and with `new_values_and_types` a
recipient who opened a document is `viewed` (a status the reference does not list) and
`view_count` is text. Both are switched on at start (`signing-etl sandbox --new-personal-fields
--new-values-and-types`) or at run time (PATCH /_sandbox/config); they change only what is
served, never the stored data, so switching them off serves the reference's shape again."""

from __future__ import annotations

import hashlib

from ._config import SandboxConfig
from ._model import JSON

STREETS = ("Linden Row", "Quay Street", "Mill Lane", "Harbour Walk", "Orchard Close")


def _number(seed: str) -> int:
    return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:4], "big")


def contact(body: JSON, config: SandboxConfig) -> JSON:
    """A contact as served: with a postal address and former addresses when switched on."""
    if config.new_personal_fields:
        n = _number(str(body["id"]))
        body["address"] = f"{n % 200 + 1} {STREETS[n % len(STREETS)]}, {body['id']}"
        body["previous_emails"] = [f"former.{body['id']}@old-mail.example"]
    return body


def shipment(body: JSON, config: SandboxConfig) -> JSON:
    """A shipment as served: its recipients with a mobile number, an unknown status and a
    view count as text, as switched on."""
    for recipient in body.get("recipients") or []:
        if config.new_personal_fields:
            recipient["mobile_number"] = f"+44 7700 {_number(str(recipient['id'])) % 1_000_000:06d}"
        if config.new_values_and_types:
            if recipient.get("status") == "opened":
                recipient["status"] = "viewed"
            recipient["view_count"] = f"{recipient.get('view_count') or 0} views"
    return body


def audit_events(events: list[JSON], config: SandboxConfig) -> list[JSON]:
    """Audit events as served: their actor with a device and a location when switched on."""
    if config.new_personal_fields:
        for event in events:
            actor = event.get("actor")
            if isinstance(actor, dict):
                n = _number(str(event["id"]))
                actor["device"] = f"device-{n % 100_000:05d}-{event['id']}"
                actor["location"] = f"{STREETS[n % len(STREETS)]} area, {event['id']}"
    return events
