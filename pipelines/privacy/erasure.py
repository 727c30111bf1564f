"""Erasing one person from a warehouse (`signing-etl forget`).

A person is named by their e-mail address, or by a contact's id (the warehouse then knows the
address, or its keyed hash). In every workspace, in one transaction: their contacts go, with
every table nested in them (custom properties, groups, a list the service added). Where they
were a recipient, their place in the shipment stays (its status and times keep the funnel
true) and everything that says who they were or what they typed is cleared
(`erased_columns`): name, address, phone, company, signing link, filled-in values, the actor
of the audit events they acted in, and any column of a person the service added since.
Where they sent shipments, the sender's name and address and the events they acted in are
cleared likewise. The marts go
(the caller rebuilds them). The erasure is recorded as a keyed hash of the address, never the
address (`raw._signing_erasures`), and every later load clears the person the same way while the
service still holds them. dlt's working folder, whose packages keep rows as they were loaded,
is deleted.

Rows are found by the address as each column holds it under the workspace's recorded policy:
as it is (compared trimmed and lower-cased) or hashed with the same key. A masked or dropped
address column cannot be searched; the result names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipelines.errors import ConfigError, WarehouseMissing
from pipelines.privacy.change import drop_derived_copies
from pipelines.privacy.person import Person, named_person
from pipelines.privacy.snapshots import erase_versions
from pipelines.raw.privacy_gate import erasures_in_force
from pipelines.raw.privacy_records import Erasure, PolicyRecord, read_policies, record_erasure
from pipelines.warehouse import (
    Warehouse,
    batches,
    columns_by_table,
    loaded_workspaces,
    transaction,
)
from sources.signing import PrivacyPolicy, configured_privacy
from sources.signing.privacy import KEY_VARIABLE, erased_columns

# Conditions (of two or three values each) ORed into one statement by `_clear_any`.
CONDITIONS_PER_STATEMENT = 200


@dataclass
class ErasureResult:
    """What an erasure changed: rows per table, and the address columns it could not search."""

    subject: str = ""  # the keyed hash the erasure is recorded under
    key_id: str = ""  # the id of the hash key it was made with, which later loads need
    changed: dict[str, int] = field(default_factory=dict)
    unsearchable: list[str] = field(default_factory=list)
    compacted: bool = True  # a DuckDB file written afresh, old values gone from its free blocks

    def add(self, table: str, rows: int) -> None:
        if rows:
            self.changed[table] = self.changed.get(table, 0) + rows

    def cannot_search(self, column: str) -> None:
        """Say once (not once per workspace) that `column` could not be searched."""
        if column not in self.unsearchable:
            self.unsearchable.append(column)


def forget_person(
    warehouse: Warehouse,
    *,
    email: str | None = None,
    contact_id: str | None = None,
    workspace: str | None = None,
) -> ErasureResult:
    """Erase one person (by `email`, or by `contact_id`, in `workspace` when that id is in
    several) from every workspace of the warehouse, and record the erasure.

    Raises:
        ConfigError: no hash key, or a privacy policy the configuration gets wrong.
        ErasureRefused: the contact id is unknown, ambiguous, or its address unreadable.
        PrivacyRefused: erasures recorded under another hash key.
    """
    policy = configured_privacy()
    if policy.key is None:
        raise ConfigError(
            f"forget records the erasure as a keyed hash of the address: set {KEY_VARIABLE} "
            "(the key the loads use)"
        )
    if not warehouse.loaded_before():
        raise WarehouseMissing(f"no warehouse at {warehouse.path}; nothing to erase")
    # Every workspace's lock, and the models' lock alone, as a build holds it: no build reads
    # `raw` while the person goes, or writes them back into the marts and their history.
    with warehouse.holding_every_workspace(), warehouse.models_hold():
        result = _erase(warehouse, policy, email, contact_id, workspace)
        result.compacted = warehouse.compact()
    warehouse.clear_working_folders()
    return result


def _erase(
    warehouse: Warehouse,
    policy: PrivacyPolicy,
    email: str | None,
    contact_id: str | None,
    workspace: str | None,
) -> ErasureResult:
    """The erasure itself, in one transaction, with its record."""
    with warehouse.writing_client() as client:
        records = read_policies(client)
        ids = sorted({w.id for w in loaded_workspaces(client)} | set(records))
        if not ids:
            raise WarehouseMissing(f"{warehouse.label} holds no workspace yet; nothing to erase")
        erasures_in_force(client, policy)  # earlier erasures must be under this key
        person = named_person(client, policy, records, email, contact_id, workspace)

        def erase() -> ErasureResult:
            result = ErasureResult(person.subject, str(policy.key_id))
            for workspace_id in ids:
                record = records.get(workspace_id, PolicyRecord(workspace_id))
                _Erasing(client, person, policy, record, result).run()
            record_erasure(
                client,
                Erasure(person.subject, str(policy.key_id), datetime.now(UTC), result.changed),
            )
            drop_derived_copies(client)
            return result

        return transaction(client, "the erasure", erase)


class _Erasing:
    """One person erased from one workspace's rows, counted in `result`."""

    def __init__(
        self,
        client: Any,
        person: Person,
        policy: PrivacyPolicy,
        record: PolicyRecord,
        result: ErasureResult,
    ) -> None:
        self.client = client
        self.person = person
        self.policy = policy
        self.record = record
        self.result = result
        self.existing = columns_by_table(client)
        self.workspace = record.workspace_id
        self.found: dict[str, set[str]] = {}  # ids of the records found, per raw table

    def run(self) -> None:
        self._contacts()
        recipients = self._recipients()
        self._filled_in(recipients)
        self._events_of_recipients(recipients)
        self._sender()
        history = erase_versions(self.client, self.workspace, self._condition, self.found)
        for table, rows in history.items():
            self.result.add(table, rows)

    def _match(self, column: str) -> tuple[str, list[Any]] | None:
        """A condition that finds the person's address in `column` (`table.column`), as the
        recorded policy stores it; None (and said in the result) when it cannot."""
        table, _, name = column.partition(".")
        if name not in self.existing.get(table, set()):
            return None
        found = self._condition(column, self.client.escape_column_name(name))
        if found is None:
            self.result.cannot_search(column)
        return found

    def _condition(self, column: str, quoted: str) -> tuple[str, list[Any]] | None:
        """A condition that finds the person's address in `quoted`, a column holding the values
        of `column` (`table.column`, or a copy of them) as the recorded policy stores them."""
        action = self.record.action(column)
        if action == "keep" and self.person.address is not None:
            return f"lower(trim({quoted})) = %s", [self.person.address]
        if action == "hash" and self.record.key_id == self.policy.key_id:
            return f"{quoted} = %s", [self.person.subject]
        return None

    def _table(self, name: str) -> str:
        return str(self.client.make_qualified_table_name(name))

    def _execute(self, sql: str, *arguments: Any) -> list[tuple[Any, ...]]:
        return list(self.client.execute_sql(sql, *arguments) or [])

    def _delete(self, table: str, where: str, arguments: Sequence[Any]) -> None:
        """Delete the workspace's rows of `table` that `where` finds, counted."""
        self._counted(table, where, arguments)
        condition = f"workspace_id = %s and ({where})"
        self._execute(
            f"delete from {self._table(table)} where {condition}", self.workspace, *arguments
        )

    def _update(self, table: str, changes: str, where: str, arguments: Sequence[Any]) -> None:
        """Set `changes` in the workspace's rows of `table` that `where` finds, counted."""
        self._counted(table, where, arguments)
        condition = f"workspace_id = %s and ({where})"
        self._execute(
            f"update {self._table(table)} set {changes} where {condition}",
            self.workspace,
            *arguments,
        )

    def _counted(self, table: str, where: str, arguments: Sequence[Any]) -> None:
        """Count the workspace's rows of `table` that `where` finds."""
        scoped = f"workspace_id = %s and ({where})"
        self._counted_where(table, scoped, [self.workspace, *arguments])

    def _counted_where(self, table: str, where: str, arguments: Sequence[Any]) -> None:
        """Count the rows of `table` that `where` finds (a condition that names the workspace)."""
        counted = self._execute(
            f"select count(*) from {self._table(table)} where {where}", *arguments
        )
        self.result.add(table, int(counted[0][0]) if counted else 0)

    def _contacts(self) -> None:
        match = self._match("contacts.email")
        if match is None:
            return
        where, arguments = match
        contacts = self._table("contacts")
        ids = self._execute(
            f"select id from {contacts} where workspace_id = %s and {where}",
            self.workspace,
            *arguments,
        )
        self.found["contacts"] = {str(contact) for (contact,) in ids}
        self._delete_nested("contacts", "_dlt_root_id", where, arguments)
        self._delete("contacts", where, arguments)

    def _delete_nested(self, parent: str, key: str, where: str, arguments: Sequence[Any]) -> None:
        """Delete the rows of every table nested in `parent` (the catalog's `<parent>__*`: the
        source's, and any list the service added, such as a contact's former addresses) whose
        `key` (`_dlt_root_id`, `_dlt_parent_id`) is a row of `parent` that `where` finds."""
        rows = f"select _dlt_id from {self._table(parent)} where workspace_id = %s and ({where})"
        for nested in sorted(self.existing):
            if nested.startswith(f"{parent}__") and key in self.existing[nested]:
                found = f"{key} in ({rows})"
                self._counted_where(nested, found, [self.workspace, *arguments])
                self._execute(
                    f"delete from {self._table(nested)} where {found}", self.workspace, *arguments
                )

    def _clear(self, table: str, where: str, arguments: Sequence[Any]) -> None:
        """Clear what says who the person was (`erased_columns`: also the columns of a person
        the service added) in the rows `where` finds."""
        present = erased_columns(table, sorted(self.existing.get(table, set())))
        if present:
            changes = ", ".join(f"{self.client.escape_column_name(c)} = null" for c in present)
            self._update(table, changes, where, arguments)

    def _clear_any(self, table: str, conditions: list[tuple[str, list[Any]]]) -> None:
        """`_clear` of the rows any of `conditions` finds, a few hundred to a statement (a
        sender of thousands of shipments costs a handful of statements, not one each). The
        conditions must find disjoint rows: each statement counts what it clears."""
        for chunk in batches(conditions, CONDITIONS_PER_STATEMENT):
            where = " or ".join(f"({condition})" for condition, _ in chunk)
            self._clear(table, where, [value for _, values in chunk for value in values])

    def _recipients(self) -> list[tuple[str, str, Any]]:
        """Clear the person's places among the recipients; (shipment id, recipient id, the
        name as stored) of each."""
        match = self._match("shipments__recipients.email")
        if match is None:
            return []
        where, arguments = match
        table = self._table("shipments__recipients")
        name = "name" if "name" in self.existing["shipments__recipients"] else "null"
        found = self._execute(
            f"select shipment_id, id, {name} from {table} where workspace_id = %s and {where}",
            self.workspace,
            *arguments,
        )
        self._delete_nested("shipments__recipients", "_dlt_parent_id", where, arguments)
        self._clear("shipments__recipients", where, arguments)
        self.found["shipments__recipients"] = {str(recipient) for _, recipient, _ in found}
        return [(str(shipment), str(recipient), stored) for shipment, recipient, stored in found]

    def _filled_in(self, recipients: list[tuple[str, str, Any]]) -> None:
        """Clear what the person typed, and who they were, in the filled-in forms."""
        if "shipment_fields" not in self.existing:
            return
        conditions, arguments = [], []
        match = self._match("shipment_fields.recipient_email")
        if match is not None:
            conditions.append(match[0])
            arguments.extend(match[1])
        for shipment, recipient, _ in recipients:
            conditions.append("(shipment_id = %s and recipient_id = %s)")
            arguments.extend([shipment, recipient])
        if conditions:
            self._clear("shipment_fields", " or ".join(conditions), arguments)

    def _names_comparable(self, column: str) -> bool:
        """Whether `column` and the audit events' actor hold a name alike (both kept, both
        hashed or both masked), so an event's actor can be told to be the person."""
        first, second = self.record.action(column), self.record.action("audit_events.actor__name")
        return first == second and first != "drop"

    def _events_of_recipients(self, recipients: list[tuple[str, str, Any]]) -> None:
        """No actor in the events the person acted in as a recipient (or may have: an actor
        without a name, or names that cannot be compared); their type and time stay."""
        if "audit_events" not in self.existing:
            return
        comparable = self._names_comparable("shipments__recipients.name")
        named = "actor__name" in self.existing["audit_events"]
        conditions: list[tuple[str, list[Any]]] = []
        for shipment, recipient, name in recipients:
            where = "shipment_id = %s and recipient_id = %s"
            arguments: list[Any] = [shipment, recipient]
            if named and comparable and name is not None:
                where += " and (actor__name is null or actor__name = %s)"
                arguments.append(name)
            conditions.append((where, arguments))
        self._clear_any("audit_events", conditions)

    def _sender(self) -> None:
        """Where the person sent shipments: no sender's name and address, and no actor in
        the events they acted in."""
        match = self._match("shipments.owner_email")
        if match is None:
            return
        where, arguments = match
        owner = "owner_name" if "owner_name" in self.existing["shipments"] else "null"
        sent = self._execute(
            f"select id, {owner} from {self._table('shipments')} "
            f"where workspace_id = %s and {where}",
            self.workspace,
            *arguments,
        )
        self.found["shipments"] = {str(shipment) for shipment, _ in sent}
        events = self.existing.get("audit_events", set())
        if "actor__name" in events and not self._names_comparable("shipments.owner_name"):
            self.result.cannot_search("audit_events.actor__name")
        elif "actor__name" in events:
            acted = "shipment_id = %s and actor__name = %s"
            conditions = [(acted, [shipment, name]) for shipment, name in sent if name is not None]
            self._clear_any("audit_events", conditions)
        self._clear("shipments", where, arguments)
