"""Row shaping: API records into warehouse rows, each carrying `workspace_id` (nested rows too),
with the nested lists and values arranged the way the raw tables expect them."""

from __future__ import annotations

from typing import Any

import orjson

from .paging import Record


def shape_document(document: Record, workspace_id: str) -> Record:
    document = dict(document)
    document["workspace_id"] = workspace_id
    document["placeholders"] = [
        {"value": name, "document_id": document["id"], "workspace_id": workspace_id}
        for name in document.get("placeholders") or []
    ]
    document["fields"] = [
        {**f, "document_id": document["id"], "workspace_id": workspace_id}
        for f in document.get("fields") or []
    ]
    if "blocks" in document:
        document["blocks"] = [
            {**b, "document_id": document["id"], "workspace_id": workspace_id}
            for b in document.get("blocks") or []
        ]
    return document


def shape_shipment(shipment: Record, workspace_id: str) -> Record:
    shipment = dict(shipment)
    shipment["workspace_id"] = workspace_id
    shipment["recipients"] = [
        {**r, "shipment_id": shipment["id"], "workspace_id": workspace_id}
        for r in shipment.get("recipients") or []
    ]
    return shipment


def shape_contact(contact: Record, workspace_id: str) -> Record:
    """`custom` becomes key/value rows (keys with dots stay verbatim, unlike flattened columns)."""
    contact = dict(contact)
    contact["workspace_id"] = workspace_id
    custom = contact.get("custom") or {}
    contact["custom"] = [
        {"key": str(key), "value": value, "contact_id": contact["id"], "workspace_id": workspace_id}
        for key, value in (custom.items() if isinstance(custom, dict) else [])
    ]
    contact["group_ids"] = [
        {"value": group, "contact_id": contact["id"], "workspace_id": workspace_id}
        for group in contact.get("group_ids") or []
    ]
    return contact


def audit_event_rows(shipment_id: str, events: list[Record], workspace_id: str) -> list[Record]:
    return [{**e, "shipment_id": shipment_id, "workspace_id": workspace_id} for e in events]


def _field_value(value: Any) -> str | None:
    """Text values verbatim; anything else (a payment object) as JSON text, so one text
    column holds every field type losslessly (`type` says which it is)."""
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def field_rows(body: Record, workspace_id: str) -> list[Record]:
    """One row per shipment, recipient and field, with the value as text (see _field_value)."""
    shipment_id = body.get("shipment_id")
    rows = []
    for entry in body.get("data") or []:
        for filled in entry.get("fields") or []:
            rows.append(
                {
                    "shipment_id": shipment_id,
                    "recipient_id": entry.get("recipient_id"),
                    "field_id": filled.get("field_id"),
                    "workspace_id": workspace_id,
                    "document_name": body.get("document_name"),
                    "recipient_name": entry.get("recipient_name"),
                    "recipient_email": entry.get("recipient_email"),
                    "recipient_status": entry.get("status"),
                    "recipient_signed_at": entry.get("signed_at"),
                    "placeholders": entry.get("placeholders"),
                    "external_id": filled.get("external_id"),
                    "label": filled.get("label"),
                    "type": filled.get("type"),
                    "required": filled.get("required"),
                    "value": _field_value(filled.get("value")),
                }
            )
    return rows


def workspace_row(me: Record) -> Record:
    """The workspace `/me` names, with the key's name and the API version it answered with."""
    return {
        **me["workspace"],
        "workspace_id": me["workspace"]["id"],
        "key_name": me.get("key_name"),
        "api_version": me.get("api_version"),
    }


def webhook_rows(hooks: list[Record], workspace_id: str) -> dict[str, Record]:
    """Subscriptions by id, without their signing secret (never stored, even if sent)."""
    rows: dict[str, Record] = {}
    for hook in hooks:
        row = {k: v for k, v in hook.items() if k != "secret"}
        rows[row["id"]] = {**row, "workspace_id": workspace_id, "deleted": False}
    return rows
