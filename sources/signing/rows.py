"""Row shaping: API records into warehouse rows, each carrying `workspace_id` (nested rows too),
with the nested lists and values arranged the way the raw tables expect them.

The API's field names are not trusted: a field that dlt would load into a column of its own
(`_dlt_id`, `_dlt_parent_id`, ...) or of this project (`_fetch_seq`) could rewrite which rows a
merge replaces or deletes, in another workspace too. So every field whose column name (after
dlt's snake_case naming: `$dlt_id` and `_DLT_ID` are `_dlt_id` too) starts with `_` is dropped,
at every level: root rows, nested lists (recipients, fields, blocks, custom, anything new) and
the objects flattened into them. The columns the source sets itself (`workspace_id`, a nested
row's `shipment_id`, `document_id` or `contact_id`, ...) take the source's value; an API field
of that name with another value is dropped. `FieldGuard` says each of these once per run, per
table and field. Free-form values stay verbatim: custom property keys, placeholder names.

Then the privacy policy (`privacy.PrivacyPolicy`) keeps, hashes, masks or drops each personal
column, and clears the people erased from the warehouse, before a row leaves the source.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from .columns import column_name
from .errors import one_line
from .paging import Record

if TYPE_CHECKING:
    from .privacy import PrivacyPolicy

# Field warnings said in one run before the rest only count (a service could send thousands).
MAX_FIELD_WARNINGS = 50
# Objects nested deeper than this are not flattened into columns (dlt keeps them as JSON at
# `max_table_nesting=1`), so no name inside them can become a column: they pass as they are,
# and an object nested a thousand deep costs no recursion here.
MAX_DEPTH = 3


class FieldGuard:
    """Keeps API fields off the columns that dlt and the source own (see the module's
    docstring), and says what it dropped once per run, table and field; thread-safe."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._said: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def clean(
        self,
        table: str,
        record: Record,
        sets: Mapping[str, Any] | None = None,
        *,
        verbatim: Collection[str] = (),
        keep: Collection[str] = (),
        depth: int = 0,
    ) -> Record:
        """`record` as a row of `table`: without the warehouse's own fields, with `sets` (the
        columns the source sets) on top. Fields named in `verbatim` are passed on as they are
        (the caller shapes them); `keep` names fields the source itself put there."""
        if depth > MAX_DEPTH:
            return record
        sets = sets or {}
        row: Record = {}
        for field, value in record.items():
            name = column_name(field)
            if field in keep:
                row[field] = value
            elif name.startswith("_"):
                self.dropped(table, field, "dlt and this project keep names that begin with _")
            elif name in sets:
                if value != sets[name]:
                    self.dropped(table, field, f"the source sets `{name}` itself")
            elif field in verbatim:
                row[field] = value
            elif isinstance(value, dict):  # flattened into `field__*` columns
                row[field] = self.clean(table, value, depth=depth + 1)
            elif isinstance(value, list):
                nested = f"{table}__{name}"
                row[field] = [
                    self.clean(nested, v, depth=depth + 1) if isinstance(v, dict) else v
                    for v in value
                ]
            else:
                row[field] = value
        row.update(sets)
        return row

    def dropped(self, table: str, field: str, why: str) -> None:
        """Say once per run that `table` lost the API's `field`, and why."""
        with self._lock:
            if (table, field) in self._said:
                return
            self._said.add((table, field))
            count = len(self._said)
        if count <= MAX_FIELD_WARNINGS:
            self._warn(f"{table}: dropped the API's field `{one_line(field, 60)}` ({why})")
        elif count == MAX_FIELD_WARNINGS + 1:
            self._warn(
                f"{table}: more API fields dropped; only the first {MAX_FIELD_WARNINGS} are named"
            )


def objects(value: Any) -> list[Record]:
    """The objects of a list the API sent (nothing when it sent no list)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def shape_document(document: Record, workspace_id: str, guard: FieldGuard) -> Record:
    document = guard.clean(
        "documents",
        document,
        {"workspace_id": workspace_id},
        verbatim=("placeholders", "fields", "blocks"),
    )
    link = {"document_id": document["id"], "workspace_id": workspace_id}
    placeholders = document.get("placeholders")
    document["placeholders"] = [
        {"value": name, **link} for name in (placeholders if isinstance(placeholders, list) else [])
    ]
    document["fields"] = [
        guard.clean("documents__fields", f, link) for f in objects(document.get("fields"))
    ]
    if "blocks" in document:
        document["blocks"] = [
            guard.clean("documents__blocks", b, link) for b in objects(document.get("blocks"))
        ]
    return document


def shape_shipment(
    shipment: Record, workspace_id: str, guard: FieldGuard, privacy: PrivacyPolicy
) -> Record:
    """A listed shipment (already stamped with `_fetch_seq`) and its recipients, under the
    privacy policy: an erased recipient's place, or an erased sender, says no longer who."""
    shipment = guard.clean(
        "shipments",
        shipment,
        {"workspace_id": workspace_id},
        verbatim=("recipients",),
        keep=("_fetch_seq",),
    )
    if privacy.erases(shipment.get("owner_email")):
        privacy.erased_row("shipments", shipment)
    link = {"shipment_id": shipment["id"], "workspace_id": workspace_id}
    recipients = []
    for listed in objects(shipment.get("recipients")):
        recipient = guard.clean("shipments__recipients", listed, link)
        if privacy.erases(recipient.get("email")):
            privacy.erased_row("shipments__recipients", recipient)
        recipients.append(privacy.protect("shipments__recipients", recipient))
    shipment["recipients"] = recipients
    return privacy.protect("shipments", shipment)


def shape_contact(
    contact: Record, workspace_id: str, guard: FieldGuard, privacy: PrivacyPolicy
) -> Record | None:
    """A listed contact (already stamped with `_fetch_seq`) under the privacy policy, or None
    when it was erased: `custom` becomes key/value rows (keys with dots stay verbatim, unlike
    flattened columns)."""
    if privacy.erases(contact.get("email")):
        return None
    contact = guard.clean(
        "contacts",
        contact,
        {"workspace_id": workspace_id},
        verbatim=("custom", "group_ids"),
        keep=("_fetch_seq",),
    )
    link = {"contact_id": contact["id"], "workspace_id": workspace_id}
    custom = contact.get("custom")
    contact["custom"] = [
        privacy.protect("contacts__custom", {"key": str(key), "value": value, **link})
        for key, value in (custom.items() if isinstance(custom, dict) else [])
    ]
    groups = contact.get("group_ids")
    contact["group_ids"] = [
        {"value": group, **link} for group in (groups if isinstance(groups, list) else [])
    ]
    return privacy.protect("contacts", contact)


@dataclass(frozen=True)
class ErasedPeople:
    """The people of one shipment who were erased: recipients by id, with their names as the
    API gives them, and the sender's name when the sender was."""

    recipients: dict[str, Any]
    owner_erased: bool = False
    owner_name: Any = None

    @classmethod
    def of(cls, shipment: Record | None, privacy: PrivacyPolicy) -> ErasedPeople | None:
        """Who of `shipment`'s people was erased; None when no one was (or it is unknown)."""
        if shipment is None or not privacy.erased:
            return None
        recipients = {
            str(r.get("id")): r.get("name")
            for r in objects(shipment.get("recipients"))
            if privacy.erases(r.get("email"))
        }
        owner = privacy.erases(shipment.get("owner_email"))
        if not recipients and not owner:
            return None
        return cls(recipients, owner, shipment.get("owner_name") if owner else None)

    def acted(self, row: Record) -> bool:
        """Whether an erased person acted in this audit event: its recipient, when the actor
        is them (or may be: an actor without a name), or the sender."""
        actor = row.get("actor")
        acted_by = actor.get("name") if isinstance(actor, dict) else None
        recipient = row.get("recipient_id")
        if recipient in self.recipients:
            name = self.recipients[recipient]
            if acted_by is None or name is None or acted_by == name:
                return True
        return self.owner_erased and acted_by is not None and acted_by == self.owner_name


def audit_event_rows(
    shipment_id: str,
    events: list[Record],
    workspace_id: str,
    guard: FieldGuard,
    privacy: PrivacyPolicy,
    erased: ErasedPeople | None = None,
) -> list[Record]:
    """The audit trail's rows under the privacy policy; an event an erased person acted in
    keeps its type and time, without its actor."""
    link = {"shipment_id": shipment_id, "workspace_id": workspace_id}
    rows = [guard.clean("audit_events", event, link) for event in events]
    for row in rows:
        if erased is not None and erased.acted(row):
            privacy.erased_row("audit_events", row)
    return [privacy.protect("audit_events", row) for row in rows]


def _field_value(value: Any) -> str | None:
    """Text values verbatim; anything else (a payment object) as JSON text, so one text
    column holds every field type losslessly (`type` says which it is)."""
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def field_rows(
    shipment_id: str, body: Record, workspace_id: str, guard: FieldGuard, privacy: PrivacyPolicy
) -> list[Record]:
    """One row per shipment, recipient and field, with the value as text (see _field_value),
    under the privacy policy (an erased recipient's rows say neither who nor what). The rows
    belong to the shipment that was asked for, whatever id the body names."""
    if body.get("shipment_id") not in (None, shipment_id):
        guard.dropped(
            "shipment_fields", "shipment_id", "it names another shipment than the one asked for"
        )
    rows = []
    for entry in objects(body.get("data")):
        erased = privacy.erases(entry.get("recipient_email"))
        for filled in objects(entry.get("fields")):
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
            if erased:
                privacy.erased_row("shipment_fields", rows[-1])
    return [privacy.protect("shipment_fields", row) for row in rows]


def workspace_row(me: Record, guard: FieldGuard) -> Record:
    """The workspace `/me` names, with the key's name and the API version it answered with."""
    workspace = me["workspace"]
    sets = {
        "workspace_id": workspace["id"],
        "key_name": me.get("key_name"),
        "api_version": me.get("api_version"),
    }
    return guard.clean("workspaces", workspace, sets)


def webhook_rows(hooks: list[Record], workspace_id: str, guard: FieldGuard) -> dict[str, Record]:
    """Subscriptions by id, without their signing secret (never stored, even if sent, under
    any spelling of its name)."""
    rows: dict[str, Record] = {}
    for hook in hooks:
        row = {k: v for k, v in hook.items() if column_name(k) != "secret"}
        sets = {"workspace_id": workspace_id, "deleted": False}
        rows[row["id"]] = guard.clean("webhooks", row, sets)
    return rows
