"""The privacy policy and erasures in dbt's snapshots (`snapshots.snp_signing__*`), which copy
personal columns of the raw tables into every version a model build saw: a copy that would
outlive the rows (docs/design.md, hazard 13).

A new policy rewrites a snapshot column as it rewrites the raw column it copies, value by value
through the same function, so a snapshot's current version equals what staging yields afterwards
and dbt records no new version (one with the same `observed_at` would be a duplicate). `forget`
clears the person's values in every version of the records they are in, leaving the versions and
their validity: the history of statuses stays, the person goes. A warehouse whose models never
ran has no snapshots: nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pipelines.raw.deletions import SNAPSHOTS_SCHEMA
from pipelines.warehouse import columns_by_table, insert_rows
from sources.signing import PrivacyPolicy
from sources.signing.columns import TABLES
from sources.signing.privacy import ERASED_COLUMNS, Action

VERSIONS_REWRITE_TABLE = "_signing_privacy_versions"  # old and new text of a snapshot column
BATCH = 300  # rows of new values per INSERT

# Each personal raw column (`columns.PERSONAL_COLUMNS`) a snapshot copies, with the snapshot and
# the column's name there (the staging model's: models/models/staging). A column derived from
# one follows it (the delivery error is `last_error`). The personal columns no snapshot reads
# (audit events, filled-in forms, custom properties) are not listed.
SNAPSHOT_COLUMNS: Final[dict[str, tuple[str, str]]] = {
    "shipments.owner_name": ("snp_signing__shipments", "owner_name"),
    "shipments.owner_email": ("snp_signing__shipments", "owner_email"),
    "shipments__recipients.name": ("snp_signing__recipients", "recipient_name"),
    "shipments__recipients.email": ("snp_signing__recipients", "recipient_email"),
    "shipments__recipients.phone": ("snp_signing__recipients", "recipient_phone"),
    "shipments__recipients.company": ("snp_signing__recipients", "recipient_company"),
    "shipments__recipients.last_error": ("snp_signing__recipients", "delivery_error"),
    "contacts.name": ("snp_signing__contacts", "contact_name"),
    "contacts.email": ("snp_signing__contacts", "contact_email"),
    "contacts.phone": ("snp_signing__contacts", "contact_phone"),
    "contacts.company": ("snp_signing__contacts", "contact_company"),
    "contacts.position": ("snp_signing__contacts", "job_position"),
    "contacts.notes": ("snp_signing__contacts", "notes"),
}


@dataclass(frozen=True)
class Versioned:
    """A snapshot as an erasure sees it: the raw table whose records it versions, the column
    that names a record there, and the raw address column by which forget finds the person."""

    raw_table: str
    snapshot: str
    id_column: str
    address: str  # `table.column`


VERSIONED: Final[tuple[Versioned, ...]] = (
    Versioned("contacts", "snp_signing__contacts", "contact_id", "contacts.email"),
    Versioned(
        "shipments__recipients",
        "snp_signing__recipients",
        "recipient_id",
        "shipments__recipients.email",
    ),
    Versioned("shipments", "snp_signing__shipments", "shipment_id", "shipments.owner_email"),
)

# The condition that finds a person's address in a column holding the values of a raw address
# column (`table.column`, the column's quoted name), as the workspace's policy stores them.
AddressMatch = Callable[[str, str], tuple[str, list[Any]] | None]


def snapshot_columns(client: Any) -> dict[str, set[str]]:
    """Every table of the snapshots schema with its column names; none before the models ran."""
    return columns_by_table(client, SNAPSHOTS_SCHEMA)


def rewrite_versions(
    client: Any, column: str, action: Action, workspaces: Sequence[str], policy: PrivacyPolicy
) -> int:
    """Bring the snapshot column that copies `column` (`table.column`) under `action` in the
    workspaces' versions, each value as the raw column's (`policy.value`); the versions changed.
    """
    target = SNAPSHOT_COLUMNS.get(column)
    if target is None or target[1] not in snapshot_columns(client).get(target[0], set()):
        return 0
    table = _snapshot_table(client, target[0])
    name = client.escape_column_name(target[1])
    marks = ", ".join(["%s"] * len(workspaces))
    where = f"{name} is not null and workspace_id in ({marks})"
    if action == "drop":
        counted = client.execute_sql(f"select count(*) from {table} where {where}", *workspaces)
        client.execute_sql(f"update {table} set {name} = null where {where}", *workspaces)
        return int(counted[0][0]) if counted else 0
    rows = client.execute_sql(f"select distinct {name} from {table} where {where}", *workspaces)
    changes = [
        (old, new)
        for (old,) in rows or []
        if (new := str(policy.value(column, old, action))) != old
    ]
    return _apply_values(client, table, name, changes, workspaces)


def _apply_values(
    client: Any,
    table: str,
    column: str,
    changes: Sequence[tuple[str, str]],
    workspaces: Sequence[str],
) -> int:
    """Set each old text of `column` to its new one, through a table of (old, new) pairs, in
    the workspaces' versions; the versions changed."""
    if not changes:
        return 0
    mapping = client.make_qualified_table_name(VERSIONS_REWRITE_TABLE)
    client.execute_sql(f"drop table if exists {mapping}")
    client.execute_sql(f"create table {mapping} (old_text varchar, new_text varchar)")
    insert_rows(client, mapping, ("old_text", "new_text"), changes, BATCH)
    workspace_marks = ", ".join(["%s"] * len(workspaces))
    where = f"t.{column} = m.old_text and t.workspace_id in ({workspace_marks})"
    counted = client.execute_sql(
        f"select count(*) from {table} as t, {mapping} as m where {where}", *workspaces
    )
    client.execute_sql(
        f"update {table} as t set {column} = m.new_text from {mapping} as m where {where}",
        *workspaces,
    )
    client.execute_sql(f"drop table {mapping}")
    return int(counted[0][0]) if counted else 0


def erase_versions(
    client: Any, workspace_id: str, match: AddressMatch, found: Mapping[str, Collection[str]]
) -> dict[str, int]:
    """Clear what says who a person was in every version of one workspace's records they are
    in: those forget found in raw (`found`: the ids per raw table of the contacts it deleted,
    the recipients it cleared, the shipments they sent) and those whose address column holds
    theirs (`match`). Returns the versions found per snapshot (`snapshots.<table>`)."""
    existing = snapshot_columns(client)
    changed: dict[str, int] = {}
    for versioned in VERSIONED:
        present = existing.get(versioned.snapshot, set())
        columns = [c for c in _cleared(versioned) if c in present]
        conditions: list[str] = []
        arguments: list[Any] = []
        ids = sorted(found.get(versioned.raw_table, ()))
        if ids:
            conditions.append(f"{versioned.id_column} in ({', '.join(['%s'] * len(ids))})")
            arguments.extend(ids)
        address = SNAPSHOT_COLUMNS[versioned.address][1]
        matched = match(versioned.address, client.escape_column_name(address))
        if address in present and matched is not None:
            conditions.append(matched[0])
            arguments.extend(matched[1])
        if not columns or not conditions:
            continue
        table = _snapshot_table(client, versioned.snapshot)
        where = f"workspace_id = %s and ({' or '.join(conditions)})"
        counted = client.execute_sql(
            f"select count(*) from {table} where {where}", workspace_id, *arguments
        )
        changes = ", ".join(f"{client.escape_column_name(c)} = null" for c in columns)
        client.execute_sql(f"update {table} set {changes} where {where}", workspace_id, *arguments)
        if counted and counted[0][0]:
            changed[f"{SNAPSHOTS_SCHEMA}.{versioned.snapshot}"] = int(counted[0][0])
    return changed


def _cleared(versioned: Versioned) -> list[str]:
    """The snapshot's columns that copy what forget clears in the raw rows (`ERASED_COLUMNS`);
    all of a contact's personal columns, since forget deletes contacts whole."""
    table = versioned.raw_table
    erased = ERASED_COLUMNS.get(table, tuple(TABLES[table]))
    return [
        name
        for raw, (snapshot, name) in SNAPSHOT_COLUMNS.items()
        if snapshot == versioned.snapshot and raw.partition(".")[2] in erased
    ]


def _snapshot_table(client: Any, table: str) -> str:
    return ".".join(client.make_qualified_table_name_path(table, dataset_name=SNAPSHOTS_SCHEMA))
