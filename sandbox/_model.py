"""In-memory records of the sandbox and their JSON form as the v1 API shows them.

Timestamps are kept as integer milliseconds since the epoch (UTC) and formatted only when a
record is served, which keeps 200,000 shipments small and fast to generate.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from ._steps import AUDIT_TYPE, Kind, unpack_step

JSON = dict[str, Any]


def iso(ms: int | None) -> str | None:
    """Format epoch milliseconds as an ISO 8601 UTC string with millisecond precision."""
    if ms is None:
        return None
    seconds, millis = divmod(ms, 1000)
    # time.gmtime + strftime is 2.5x faster than datetime here, and a page formats thousands.
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z"


# Every event a webhook may subscribe to (timeline steps fire some: `_steps.WEBHOOK_EVENT`).
WEBHOOK_EVENTS: tuple[str, ...] = (
    "shipment.sent",
    "shipment.opened",
    "shipment.signed",
    "shipment.completed",
    "shipment.expired",
    "shipment.delivery_failed",
    "contact.created",
    "inquiry.answered",
)


@dataclass(slots=True)
class Workspace:
    id: str
    name: str
    slug: str
    plan: str


@dataclass(slots=True, frozen=True)
class DocumentField:
    id: str
    type: str
    label: str
    required: bool
    external_id: str | None
    assigned_recipient_index: int | None

    def to_json(self) -> JSON:
        return {
            "id": self.id,
            "type": self.type,
            "label": self.label,
            "required": self.required,
            "external_id": self.external_id,
            "assigned_recipient_index": self.assigned_recipient_index,
        }


@dataclass(slots=True)
class Document:
    id: str
    name: str
    kind: str
    language: str
    folder_id: str | None
    status: str
    signer_count: int
    password_protected: bool
    placeholders: tuple[str, ...]
    fields: tuple[DocumentField, ...]
    created_at: int
    updated_at: int
    theme_id: str
    block_texts: tuple[str, ...]

    def to_json(self, *, detail: bool = False) -> JSON:
        body: JSON = {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "language": self.language,
            "folder_id": self.folder_id,
            "status": self.status,
            "signer_count": self.signer_count,
            "password_protected": self.password_protected,
            "placeholders": list(self.placeholders),
            "fields": [f.to_json() for f in self.fields],
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }
        if detail:
            body["blocks"] = [
                {"id": f"{self.id}-b{i}", "type": "paragraph", "content": text}
                for i, text in enumerate(self.block_texts)
            ]
            body["theme"] = {"id": self.theme_id}
        return body


@dataclass(slots=True)
class Contact:
    id: str
    name: str
    email: str
    phone: str | None
    company: str | None
    position: str | None
    notes: str | None
    custom: dict[str, str]
    group_ids: list[str]
    created_at: int
    updated_at: int

    def to_json(self) -> JSON:
        return {
            "id": self.id,
            "name": self.name,
            "email": self.email,
            "phone": self.phone,
            "company": self.company,
            "position": self.position,
            "notes": self.notes,
            "custom": dict(self.custom),
            "group_ids": list(self.group_ids),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }


@dataclass(slots=True)
class Recipient:
    id: str
    link_id: str
    position: int
    name: str
    email: str
    phone: str | None
    company: str | None
    contact_id: str | None
    expires_at: int
    status: str = "pending"
    delivery_status: str = "pending"
    last_error: str | None = None
    sent_at: int | None = None
    delivered_at: int | None = None
    first_opened_at: int | None = None
    signed_at: int | None = None
    view_count: int = 0
    last_viewed_at: int | None = None

    def to_json(self) -> JSON:
        return {
            "id": self.id,
            "link_id": self.link_id,
            "position": self.position,
            "name": self.name,
            "email": self.email,
            "phone": self.phone,
            "company": self.company,
            "status": self.status,
            "delivery_status": self.delivery_status,
            "last_error": self.last_error,
            "sent_at": iso(self.sent_at),
            "expires_at": iso(self.expires_at),
            "signed_at": iso(self.signed_at),
            "view_count": self.view_count,
            "last_viewed_at": iso(self.last_viewed_at),
        }


@dataclass(slots=True)
class Shipment:
    """A document sent for signature; `timeline` holds every planned step, `applied` how many
    of them have happened by the sandbox clock."""

    id: str
    uuid: str
    document_id: str
    document_name: str
    document_fields: tuple[DocumentField, ...]
    channel: str
    sign_mode: str
    signature_level: str
    password_protected: bool
    folder_id: str | None
    owner_name: str
    owner_email: str
    created_at: int
    expires_at: int
    recipients: list[Recipient]
    timeline: list[int]
    placeholders: dict[str, str]
    field_values: dict[str, Any]
    updated_at: int
    applied: int = 0
    status: str = "sent"
    archived_at: int | None = None
    revoked_at: int | None = None
    completed_at: int | None = None
    expired_at: int | None = None

    @property
    def activity_status(self) -> str:
        """The list filter's view of progress: revoked, expired, signed (all), opened, sent."""
        if self.status == "revoked":
            return "revoked"
        if self.status == "expired":
            return "expired"
        if self.status == "completed":
            return "signed"
        if any(r.status in ("opened", "signed") for r in self.recipients):
            return "opened"
        return "sent"

    def to_json(self) -> JSON:
        return {
            "id": self.id,
            "document_id": self.document_id,
            "document_name": self.document_name,
            "status": self.status,
            "activity_status": self.activity_status,
            "channel": self.channel,
            "sign_mode": self.sign_mode,
            "signature_level": self.signature_level,
            "password_protected": self.password_protected,
            "folder_id": self.folder_id,
            "owner_name": self.owner_name,
            "owner_email": self.owner_email,
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "archived_at": iso(self.archived_at),
            "revoked_at": iso(self.revoked_at),
            "final_pdf_ready": self.status == "completed",
            "sealed": self.status == "completed" and self.signature_level != "fes",
            "recipients": [r.to_json() for r in self.recipients],
        }

    def audit_events(self) -> list[JSON]:
        """The audit trail, oldest first, derived from the steps that have happened."""
        events: list[JSON] = []
        for number, step in enumerate(self.timeline[: self.applied]):
            at_ms, kind, index = unpack_step(step)
            if kind not in AUDIT_TYPE:
                continue
            recipient = self.recipients[index]
            by_recipient = kind in (Kind.OPENED, Kind.VIEWED, Kind.SIGNED)
            events.append(
                {
                    "id": f"evt_{self.id[4:]}_{number:03d}",
                    "type": AUDIT_TYPE[kind],
                    "at": iso(at_ms),
                    "recipient_id": recipient.id,
                    "actor": {
                        "name": recipient.name if by_recipient else self.owner_name,
                        "ip": _fake_ip(recipient.id) if by_recipient else "10.20.0.1",
                    },
                }
            )
        return events

    def filled_fields(self) -> JSON:
        """Filled-in content per recipient: values exist once a recipient has signed, or when
        the sender pre-filled them."""
        data = []
        for recipient in self.recipients:
            fields = []
            for fld in self.document_fields:
                if fld.assigned_recipient_index not in (None, recipient.position):
                    continue
                value: Any
                if fld.id in self.field_values:
                    value = self.field_values[fld.id]
                elif recipient.signed_at is not None:
                    value = synthetic_field_value(fld, f"{self.id}:{recipient.id}")
                else:
                    value = None
                fields.append(
                    {
                        "field_id": fld.id,
                        "external_id": fld.external_id,
                        "label": fld.label,
                        "type": fld.type,
                        "required": fld.required,
                        "value": value,
                    }
                )
            data.append(
                {
                    "recipient_id": recipient.id,
                    "recipient_name": recipient.name,
                    "recipient_email": recipient.email,
                    "status": recipient.status,
                    "signed_at": iso(recipient.signed_at),
                    "placeholders": dict(self.placeholders),
                    "fields": fields,
                }
            )
        return {"shipment_id": self.id, "document_name": self.document_name, "data": data}


@dataclass(slots=True)
class Webhook:
    id: str
    event: str
    target_url: str
    secret: str
    created_at: int
    is_active: bool = True
    delivery_count: int = 0
    failure_count: int = 0
    last_delivered_at: int | None = None
    last_error: str | None = None

    def to_json(self, *, with_secret: bool = False) -> JSON:
        body: JSON = {
            "id": self.id,
            "event": self.event,
            "target_url": self.target_url,
            "is_active": self.is_active,
            "delivery_count": self.delivery_count,
            "failure_count": self.failure_count,
            "last_delivered_at": iso(self.last_delivered_at),
            "last_error": self.last_error,
            "created_at": iso(self.created_at),
        }
        if with_secret:
            body["secret"] = self.secret
        return body


@dataclass(slots=True)
class IdempotentReply:
    """What a POST with an Idempotency-Key answered, to answer a repeat the same way."""

    body_digest: str
    status_code: int
    body: JSON


_TEXT_VALUES = ("Berlin", "Hamburg", "yes", "no", "42", "DE89370400440532013000", "Q3 renewal")
_VARIANTS = ("var_basic", "var_plus", "var_pro")


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _fake_ip(seed: str) -> str:
    value = _digest(seed)
    return f"203.0.{(value >> 8) % 256}.{value % 254 + 1}"


def synthetic_field_value(fld: DocumentField, salt: str) -> Any:
    """Deterministic value a recipient filled in: text is a string, payment an object."""
    value = _digest(f"{salt}:{fld.id}")
    if fld.type == "payment":
        return {
            "variantId": _VARIANTS[value % len(_VARIANTS)],
            "extras": {"addon.insurance": "yes" if value & 1 else "no", "billing.cycle": "monthly"},
        }
    return _TEXT_VALUES[value % len(_TEXT_VALUES)]
