"""Whom `signing-etl forget` erases: the person an e-mail address names, or the one a contact's
id names, known by the address as the warehouse stores it (kept, or hashed with this key)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipelines.errors import SigningEtlError
from pipelines.privacy.change import participle
from pipelines.raw.privacy_records import PolicyRecord
from pipelines.raw.run_records import (
    configured_names,
    described_workspace,
    read_runs,
    workspaces_named,
)
from pipelines.warehouse import (
    columns_by_table,
    loaded_workspaces,
)
from sources.signing import PrivacyPolicy
from sources.signing.pseudonyms import normalised


class ErasureRefused(SigningEtlError):
    """The person cannot be named or found as asked (an unknown or ambiguous contact id)."""


@dataclass(frozen=True)
class Person:
    """Whom to erase: the normalised address when it is known, and its keyed hash."""

    address: str | None
    subject: str


def named_person(
    client: Any,
    policy: PrivacyPolicy,
    records: dict[str, PolicyRecord],
    email: str | None,
    contact_id: str | None,
    workspace: str | None,
) -> Person:
    """The person an address names, or the one a contact id names (its stored address)."""
    if email is not None:
        address = normalised("email", email)
        if "@" not in address:
            raise ErasureRefused("--email needs an e-mail address")
        return Person(address, policy.subject(address))
    if not contact_id:
        raise ErasureRefused("name the person: --email ADDRESS or --contact-id ID")
    found = _contacts_with_id(client, contact_id, workspace)
    if len(found) != 1:
        where = ", ".join(sorted(w for w, _ in found))
        raise ErasureRefused(
            f"contact {contact_id!r} is in {len(found)} workspaces ({where}): add --workspace ID"
            if found
            else f"no contact {contact_id!r} in this warehouse"
            + (f" (workspace {workspace})" if workspace else "")
        )
    ((workspace_id, stored),) = found
    record = records.get(workspace_id, PolicyRecord(workspace_id))
    action = record.action("contacts.email")
    if stored and action == "keep":
        address = normalised("email", stored)
        return Person(address, policy.subject(address))
    if stored and action == "hash" and record.key_id == policy.key_id:
        return Person(None, stored)
    held = "missing" if not stored else participle(action)
    if stored and action == "hash":
        held = "hashed with another key"
    raise ErasureRefused(
        f"contact {contact_id!r}'s address is {held} in this warehouse, so the person cannot "
        "be known by it: use --email ADDRESS"
    )


def _contacts_with_id(
    client: Any, contact_id: str, workspace: str | None
) -> list[tuple[str, str | None]]:
    """(workspace id, stored address) of each contact with this id (in `workspace`: its id,
    the name `load` ran it under, or its name at the service, in any case).

    Raises:
        ErasureRefused: `workspace` names no workspace of the warehouse (one line).
    """
    columns = columns_by_table(client)
    if "contacts" not in columns:
        return []
    table = client.make_qualified_table_name("contacts")
    rows = client.execute_sql(f"select workspace_id, email from {table} where id = %s", contact_id)
    configured = configured_names(read_runs(client, columns))
    known = loaded_workspaces(client)
    named = {w.id for w in workspaces_named(known, workspace or "", configured)}
    if workspace is not None and not named:
        listed = ", ".join(described_workspace(w, configured) for w in known)
        raise ErasureRefused(
            f"no workspace {workspace!r} in this warehouse; its workspaces: {listed}"
        )
    return [
        (str(w), email)
        for w, email in rows or []
        if workspace is None or w == workspace or w in named
    ]
