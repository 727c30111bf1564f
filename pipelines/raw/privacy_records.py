"""What a warehouse records about personal data beside the rows: the privacy policy each
workspace's rows are under (`raw._signing_privacy`: the action on every personal column and the
id of the hash key, never the key), and the erasures `signing-etl forget` made
(`raw._signing_erasures`: a keyed hash of the address, never the address), which every later
load honours. Both are written with plain SQL through dlt's SQL client, like the run records;
every writer of rows reads them through the gate (`privacy_gate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from pipelines.warehouse import SqlClient, columns_by_table, ensure_table
from sources.signing import PERSONAL_COLUMNS, PrivacyPolicy, describe_policy

POLICY_TABLE = "_signing_privacy"
ERASURES_TABLE = "_signing_erasures"
POLICY_COLUMNS = {
    "workspace_id": "varchar",
    "preset": "varchar",
    "actions": "varchar",
    "key_id": "varchar",
    "recorded_at": "timestamp with time zone",
}
ERASURE_COLUMNS = {
    "subject": "varchar",
    "key_id": "varchar",
    "erased_at": "timestamp with time zone",
    "changed_rows": "varchar",
}


@dataclass(frozen=True)
class PolicyRecord:
    """The policy one workspace's rows are under. A workspace loaded before policies were
    recorded is under `keep`, with no key."""

    workspace_id: str
    preset: str = "keep"
    actions: Mapping[str, str] = field(default_factory=dict)
    key_id: str | None = None

    @classmethod
    def of(cls, workspace_id: str, policy: PrivacyPolicy) -> PolicyRecord:
        return cls(workspace_id, policy.preset, dict(policy.actions), policy.key_id)

    def action(self, column: str) -> str:
        """The action `column` (`table.column`) is under; `keep` for one it does not name."""
        return self.actions.get(column, "keep")

    def same_as(self, policy: PrivacyPolicy) -> bool:
        """Whether this record says exactly `policy` (its actions and its key)."""
        same_actions = all(self.action(c) == a for c, a in policy.actions.items())
        # A column the presets do not know counts only where it is named: named is released.
        released = {c for c in self.actions if c not in PERSONAL_COLUMNS}
        same_actions &= released == {c for c in policy.actions if c not in PERSONAL_COLUMNS}
        return same_actions and self.preset == policy.preset and self.key_id == policy.key_id

    def describe(self) -> str:
        """One line for `status`: the preset, the columns it does not decide, the key's id."""
        return describe_policy(self.preset, self.actions, self.key_id)


@dataclass(frozen=True)
class Erasure:
    """One person erased: the keyed hash of their address, the key's id, when, and how many
    rows of each table changed."""

    subject: str
    key_id: str
    erased_at: datetime
    changed_rows: Mapping[str, int] = field(default_factory=dict)


def read_policies(
    client: SqlClient, existing: Mapping[str, set[str]] | None = None
) -> dict[str, PolicyRecord]:
    """Each workspace's recorded policy (none before the first load that recorded one);
    `existing`: the dataset's tables, when the caller has read them."""
    if POLICY_TABLE not in (existing if existing is not None else columns_by_table(client)):
        return {}
    table = client.make_qualified_table_name(POLICY_TABLE)
    rows = client.execute_sql(f"select workspace_id, preset, actions, key_id from {table}")
    return {
        str(workspace_id): PolicyRecord(
            str(workspace_id), str(preset), orjson.loads(actions or "{}"), key_id
        )
        for workspace_id, preset, actions, key_id in rows or []
    }


def write_policy(client: Any, record: PolicyRecord) -> None:
    """Record the policy a workspace's rows are under (replacing what was recorded)."""
    table = _created(client, POLICY_TABLE, POLICY_COLUMNS)
    client.execute_sql(f"delete from {table} where workspace_id = %s", record.workspace_id)
    client.execute_sql(
        f"insert into {table} (workspace_id, preset, actions, key_id, recorded_at) "
        "values (%s, %s, %s, %s, %s)",
        record.workspace_id,
        record.preset,
        orjson.dumps(dict(record.actions), option=orjson.OPT_SORT_KEYS).decode(),
        record.key_id,
        datetime.now(UTC),
    )


def read_erasures(
    client: SqlClient, existing: Mapping[str, set[str]] | None = None
) -> list[Erasure]:
    """Every recorded erasure, oldest first."""
    if ERASURES_TABLE not in (existing if existing is not None else columns_by_table(client)):
        return []
    table = client.make_qualified_table_name(ERASURES_TABLE)
    rows = client.execute_sql(
        f"select subject, key_id, erased_at, changed_rows from {table} order by erased_at"
    )
    return [
        Erasure(str(subject), str(key_id), erased_at, orjson.loads(changed or "{}"))
        for subject, key_id, erased_at, changed in rows or []
    ]


def record_erasure(client: Any, erasure: Erasure) -> None:
    table = _created(client, ERASURES_TABLE, ERASURE_COLUMNS)
    client.execute_sql(
        f"insert into {table} (subject, key_id, erased_at, changed_rows) values (%s, %s, %s, %s)",
        erasure.subject,
        erasure.key_id,
        erasure.erased_at,
        orjson.dumps(dict(erasure.changed_rows), option=orjson.OPT_SORT_KEYS).decode(),
    )


def _created(client: Any, name: str, columns: Mapping[str, str]) -> str:
    """The qualified name of one of these tables, created when it does not exist yet."""
    return ensure_table(client, name, columns).name
