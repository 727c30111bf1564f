"""What a policy that holds back takes from rows loaded before it: the fields of a person the
service added (columns the source's tables do not name) and the tables it added under a person,
as the source holds them back from new rows. `change` plans and applies it with the rest of a
policy's rewrite."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sources.signing import PrivacyPolicy
from sources.signing.columns import TABLES, describes_person
from sources.signing.privacy import unnamed_person_columns


@dataclass(frozen=True)
class NestedRows:
    """A table the service added under a person (a contact's former addresses), to empty of
    some workspaces' rows."""

    table: str
    workspaces: tuple[str, ...]


def held_back_in(
    existing: Mapping[str, set[str]], policy: PrivacyPolicy
) -> tuple[list[str], list[str]]:
    """What a policy that holds back (`PrivacyPolicy.holds_back`) takes from rows loaded before
    it: the warehouse's columns of a person that the source's tables and the policy do not
    name (`table.column`: a recipient's `mobile_number` the service added), and the tables the
    service added under a person (a contact's `previous_emails`). None for another policy."""
    if not policy.holds_back:
        return [], []
    columns = [
        f"{table}.{column}"
        for table in sorted(existing)
        if table in TABLES
        for column in unnamed_person_columns(table, sorted(existing[table]))
        if f"{table}.{column}" not in policy.actions
    ]
    tables = []
    for table in sorted(existing):
        parent, _, column = table.rpartition("__")
        if (
            table not in TABLES
            and parent in TABLES
            and "_dlt_root_id" in existing[table]
            and describes_person(f"{parent}.{column}")
            and f"{parent}.{column}" not in policy.actions
        ):
            tables.append(table)
    return columns, tables


def empty_nested(client: Any, emptied: NestedRows) -> int:
    """Delete the rows of a nested table of some workspaces: those whose root row is one of
    theirs. The rows deleted."""
    table = client.make_qualified_table_name(emptied.table)
    root = client.make_qualified_table_name(emptied.table.split("__")[0])
    marks = ", ".join(["%s"] * len(emptied.workspaces))
    where = f"_dlt_root_id in (select _dlt_id from {root} where workspace_id in ({marks}))"
    counted = client.execute_sql(f"select count(*) from {table} where {where}", *emptied.workspaces)
    client.execute_sql(f"delete from {table} where {where}", *emptied.workspaces)
    return int(counted[0][0]) if counted else 0
