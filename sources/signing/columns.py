"""Every column of the raw tables with its warehouse type, in one place.

Each table's columns are the fields the API reference names (signing API v1, see docs/api.md),
as they land in the warehouse, plus `workspace_id` and the link columns the source adds. Nested
lists are tables of their own (`parent__list`, max_table_nesting=1) and nested objects are
flattened into `object__field` columns. Declaring every column, with its type, makes dlt create
it on the first load even when all its values are null so far, instead of leaving it out and
warning that it "did not receive any data".

Fields the reference does not name still load: dlt infers their columns from the data.
dlt's own columns (`_dlt_id`, `_dlt_load_id`, ...) and the merge tie-breaker `_fetch_seq` are
not listed here; `_fetch_seq` is declared where the resources are.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final, Literal

from dlt.common.normalizers.naming.snake_case import NamingConvention

# The dlt data types the tables use; `json` is for values whose structure is free-form.
ColumnType = Literal["text", "bigint", "double", "bool", "timestamp", "json"]
Columns = dict[str, ColumnType]

# One row per workspace (GET /me): the workspace's fields, the calling key's name and the
# API version; `workspace_id` repeats `id` so every table has it.
WORKSPACES: Final[Columns] = {
    "id": "text",
    "name": "text",
    "slug": "text",
    "plan": "text",
    "key_name": "text",
    "api_version": "text",
    "workspace_id": "text",
}

# One row per document (read whole from GET /documents/{id}); `theme` is flattened into
# `theme__*` columns; placeholders, fields and blocks are the nested tables below.
DOCUMENTS: Final[Columns] = {
    "id": "text",
    "name": "text",
    "kind": "text",
    "language": "text",
    "folder_id": "text",
    "status": "text",
    "signer_count": "bigint",
    "password_protected": "bool",
    "created_at": "timestamp",
    "updated_at": "timestamp",
    "theme__id": "text",
    "workspace_id": "text",
}

# One row per field of a document.
DOCUMENTS__FIELDS: Final[Columns] = {
    "id": "text",
    "type": "text",
    "label": "text",
    "required": "bool",
    "external_id": "text",
    "assigned_recipient_index": "bigint",
    "document_id": "text",
    "workspace_id": "text",
}

# One row per placeholder name of a document (`value` is the name).
DOCUMENTS__PLACEHOLDERS: Final[Columns] = {
    "value": "text",
    "document_id": "text",
    "workspace_id": "text",
}

# One row per content block of a document.
DOCUMENTS__BLOCKS: Final[Columns] = {
    "id": "text",
    "type": "text",
    "content": "text",
    "document_id": "text",
    "workspace_id": "text",
}

# One row per shipment, archived ones included; recipients are the nested table below.
SHIPMENTS: Final[Columns] = {
    "id": "text",
    "document_id": "text",
    "document_name": "text",
    "status": "text",
    "activity_status": "text",
    "channel": "text",
    "sign_mode": "text",
    "signature_level": "text",
    "password_protected": "bool",
    "folder_id": "text",
    "owner_name": "text",
    "owner_email": "text",
    "created_at": "timestamp",
    "expires_at": "timestamp",
    "archived_at": "timestamp",
    "revoked_at": "timestamp",
    "final_pdf_ready": "bool",
    "sealed": "bool",
    "workspace_id": "text",
}

# One row per recipient of a shipment.
SHIPMENTS__RECIPIENTS: Final[Columns] = {
    "id": "text",
    "link_id": "text",
    "position": "bigint",
    "name": "text",
    "email": "text",
    "phone": "text",
    "company": "text",
    "status": "text",
    "delivery_status": "text",
    "last_error": "text",
    "sent_at": "timestamp",
    "expires_at": "timestamp",
    "signed_at": "timestamp",
    "view_count": "bigint",
    "last_viewed_at": "timestamp",
    "shipment_id": "text",
    "workspace_id": "text",
}

# One row per audit event of a shipment (GET /shipments/{id}/events); `actor` is flattened.
AUDIT_EVENTS: Final[Columns] = {
    "id": "text",
    "type": "text",
    "at": "timestamp",
    "recipient_id": "text",
    "actor__name": "text",
    "actor__ip": "text",
    "shipment_id": "text",
    "workspace_id": "text",
}

# One row per shipment, recipient and filled-in field (GET /shipments/{id}/fields, shaped by
# `rows.field_rows`): the recipient entry's fields are prefixed `recipient_`, `placeholders`
# (name to filled value) is JSON, and `value` is text (payment objects as JSON text).
SHIPMENT_FIELDS: Final[Columns] = {
    "shipment_id": "text",
    "document_name": "text",
    "recipient_id": "text",
    "recipient_name": "text",
    "recipient_email": "text",
    "recipient_status": "text",
    "recipient_signed_at": "timestamp",
    "placeholders": "json",
    "field_id": "text",
    "external_id": "text",
    "label": "text",
    "type": "text",
    "required": "bool",
    "value": "text",
    "workspace_id": "text",
}

# One row per contact; custom properties and group ids are the nested tables below.
CONTACTS: Final[Columns] = {
    "id": "text",
    "name": "text",
    "email": "text",
    "phone": "text",
    "company": "text",
    "position": "text",
    "notes": "text",
    "created_at": "timestamp",
    "updated_at": "timestamp",
    "workspace_id": "text",
}

# One row per custom property of a contact (keys verbatim, dots included).
CONTACTS__CUSTOM: Final[Columns] = {
    "key": "text",
    "value": "text",
    "contact_id": "text",
    "workspace_id": "text",
}

# One row per group of a contact (`value` is the group id).
CONTACTS__GROUP_IDS: Final[Columns] = {
    "value": "text",
    "contact_id": "text",
    "workspace_id": "text",
}

# One row per webhook subscription, without its secret.
WEBHOOKS: Final[Columns] = {
    "id": "text",
    "event": "text",
    "target_url": "text",
    "is_active": "bool",
    "delivery_count": "bigint",
    "failure_count": "bigint",
    "last_delivered_at": "timestamp",
    "last_error": "text",
    "created_at": "timestamp",
    "workspace_id": "text",
}

# Every table the source loads, by name.
TABLES: Final[dict[str, Columns]] = {
    "workspaces": WORKSPACES,
    "documents": DOCUMENTS,
    "documents__fields": DOCUMENTS__FIELDS,
    "documents__placeholders": DOCUMENTS__PLACEHOLDERS,
    "documents__blocks": DOCUMENTS__BLOCKS,
    "shipments": SHIPMENTS,
    "shipments__recipients": SHIPMENTS__RECIPIENTS,
    "audit_events": AUDIT_EVENTS,
    "shipment_fields": SHIPMENT_FIELDS,
    "contacts": CONTACTS,
    "contacts__custom": CONTACTS__CUSTOM,
    "contacts__group_ids": CONTACTS__GROUP_IDS,
    "webhooks": WEBHOOKS,
}


def column_hints(table: str) -> dict[str, dict[str, Any]]:
    """dlt column hints of `table`'s columns: name and data type; timestamps in UTC."""
    return {
        name: {"name": name, "data_type": data_type, "timezone": True}
        if data_type == "timestamp"
        else {"name": name, "data_type": data_type}
        for name, data_type in TABLES[table].items()
    }


# The columns that hold personal data, as `table.column`, and what kind of value each holds;
# the kind decides how a value is normalised before it is hashed, how it is masked, and what
# each preset of the privacy policy (`privacy.py`) does with it. A column of a flattened object
# is named as dlt names it (`actor__ip`). Ids are not listed: the models join on them, and an
# id alone names no one.
PersonalKind = Literal["email", "name", "phone", "ip", "text", "work"]
PERSONAL_COLUMNS: Final[dict[str, PersonalKind]] = {
    "shipments.owner_name": "name",
    "shipments.owner_email": "email",
    "shipments__recipients.name": "name",
    "shipments__recipients.email": "email",
    "shipments__recipients.phone": "phone",
    "shipments__recipients.company": "work",
    "shipments__recipients.last_error": "text",  # a bounce may quote the address
    "audit_events.actor__name": "name",
    "audit_events.actor__ip": "ip",
    "shipment_fields.recipient_name": "name",
    "shipment_fields.recipient_email": "email",
    "shipment_fields.placeholders": "text",  # each filled-in value of the JSON object
    "shipment_fields.value": "text",  # what a signer typed; payment objects are not free text
    "contacts.name": "name",
    "contacts.email": "email",
    "contacts.phone": "phone",
    "contacts.company": "work",
    "contacts.position": "work",
    "contacts.notes": "text",
    "contacts__custom.value": "text",
}


# The tables that hold people, with the columns of each that describe a person ("" for every
# column): a contact and its custom properties, a recipient, the filled-in fields (built from
# named fields only, so nothing new reaches them), an audit event's actor and a shipment's
# owner. Under a preset that hides personal data, a field the service starts sending in one of
# these, which the policy does not name, is held back until it does (`privacy.py`).
PEOPLE_COLUMNS: Final[dict[str, str]] = {
    "contacts": "",
    "contacts__custom": "",
    "shipments__recipients": "",
    "shipment_fields": "",
    "audit_events": "actor__",
    "shipments": "owner_",
}


def describes_person(qualified: str) -> bool:
    """Whether `table.column` is a column of a person (`PEOPLE_COLUMNS`), known or not."""
    table, _, column = qualified.partition(".")
    prefix = PEOPLE_COLUMNS.get(table)
    return prefix is not None and bool(column) and column.startswith(prefix)


_NAMING = NamingConvention()


@lru_cache(maxsize=4096)  # asked for every field of every record: a few hundred names
def column_name(field: str) -> str:
    """The column dlt's default naming (snake_case) makes of an API field name (an empty or
    blank name is `_empty` to dlt)."""
    try:
        return _NAMING.normalize_identifier(field)
    except ValueError:
        return "_empty"
