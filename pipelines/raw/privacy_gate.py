"""The one gate of rows into `raw`: every writer (a load, a webhook drain, a full refresh, any
later one) runs dlt's steps through `LoadSteps`, which asks here, under the writer's hold and
just before it fetches, which privacy policy the rows are written under. The answer is the
policy the warehouse records for the workspace (`raw._signing_privacy`), with the hash key of
the writer's settings and every erasure recorded (`raw._signing_erasures`), never the policy
of the writer's own settings: a receiver started before a `load` changed the policy, or
without any privacy settings, writes under the warehouse's policy, or stops in one line naming
the setting it lacks (the hash key). Only a `load` changes the recorded policy
(`pipelines.privacy.change`, before it reaches the gate), because only a load can bring the
rows already there under a new one. On PostgreSQL another host's load may do so while a run
reads the service, so `LoadSteps` asks again inside its load step (`confirm_admitted`), which
that rewrite waits for: a run that read under the old policy writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from pipelines.errors import WarehouseError
from pipelines.raw.privacy_records import (
    PolicyRecord,
    read_erasures,
    read_policies,
    write_policy,
)
from pipelines.warehouse import SqlClient, columns_by_table, transaction
from sources.signing import PERSONAL_COLUMNS, PrivacyPolicy, RunStats
from sources.signing.privacy import ACTIONS, KEY_VARIABLE, Action

# Where the hash key is set, as every refusal that asks for it says.
KEY_SETTING = f"{KEY_VARIABLE} (or hash_key under [sources.signing.privacy] in .dlt/secrets.toml)"


class PrivacyRefused(WarehouseError):
    """Rows cannot be written under the privacy policy the warehouse is under with these
    settings (its hash key is not set, or another one is). The warehouse itself is usable,
    so the run that stops here is recorded."""

    warehouse_usable: ClassVar[bool] = True


class PrivacyChanged(WarehouseError):
    """The warehouse's privacy policy for the workspace changed after the run passed the gate
    (another host's load brought the warehouse under a new one, or erased a person, while this
    run read the service): what it read is under the old policy, so it is not loaded. Exit 75:
    the next run reads it again, under the new policy."""

    exit_code = 75
    warehouse_usable: ClassVar[bool] = True
    ends_every_workspace: ClassVar[bool] = False


def admit(client: Any, writer: PrivacyPolicy, workspace_id: str, stats: RunStats) -> PrivacyPolicy:
    """The policy the rows of `workspace_id` are written under (`policy_in_force`), with a
    warning when it is not the writer's own."""
    in_force = policy_in_force(client, writer, workspace_id)
    if not PolicyRecord.of(workspace_id, in_force).same_as(writer):
        stats.warn(
            f"rows written under this warehouse's privacy policy ({in_force.describe()}), "
            f"not this process's settings ({writer.describe()}); a `signing-etl load` with "
            "these settings brings the warehouse under them"
        )
    return in_force


def confirm_admitted(client: Any, admitted: PrivacyPolicy, workspace_id: str) -> None:
    """Before rows are written: the policy the gate gave the run (`admit`) is still the one
    in force. Asked inside the load step, which a policy's rewrite waits for and keeps out
    (`PRIVACY_KEY`), so no rewrite can come between this answer and the rows.

    Raises:
        PrivacyChanged: it is not (the run stops; nothing it read is written).
        PrivacyRefused: the run's settings cannot write under the policy now in force.
    """
    in_force = policy_in_force(client, admitted, workspace_id)
    if in_force != admitted:
        same_actions = (in_force.preset, in_force.actions) == (admitted.preset, admitted.actions)
        what = "a person was erased meanwhile" if same_actions else f"now {in_force.describe()}"
        raise PrivacyChanged(
            f"workspace {workspace_id}'s privacy policy changed while this run read the service "
            f"({what}): nothing it read was written, and the next run reads it again under "
            "the policy now in force"
        )


def policy_in_force(client: Any, writer: PrivacyPolicy, workspace_id: str) -> PrivacyPolicy:
    """The warehouse's policy for the workspace's rows, with the writer's hash key and the
    people erased so far.

    Raises:
        PrivacyRefused: the policy hashes and the writer lacks its key (or has another), or
            erasures were recorded under a key the writer does not have.
    """
    existing = columns_by_table(client)
    record = _record_for(client, writer, workspace_id, existing)
    named = [*PERSONAL_COLUMNS, *(c for c in sorted(record.actions) if c not in PERSONAL_COLUMNS)]
    actions = {column: _action(record, column) for column in named}  # new columns released
    policy = PrivacyPolicy(record.preset, actions, writer.key)
    if policy.hashed and writer.key_id != record.key_id:
        here = f"the one set here has id {writer.key_id}" if writer.key else "none is set here"
        raise PrivacyRefused(
            f"workspace {workspace_id}'s rows are under the privacy policy {record.describe()}, "
            f"which hashes with the key with id {record.key_id}, and {here}: set {KEY_SETTING} "
            "to that key"
        )
    return policy.with_erased(erasures_in_force(client, policy, existing))


def erasures_in_force(
    client: SqlClient, policy: PrivacyPolicy, existing: Mapping[str, set[str]] | None = None
) -> frozenset[str]:
    """The keyed hashes of the people erased so far, which `policy`'s key must have made.

    Raises:
        PrivacyRefused: erasures recorded under another key (or no key configured).
    """
    erasures = read_erasures(client, existing)
    foreign = sorted({e.key_id for e in erasures if e.key_id != policy.key_id})
    if foreign:
        now = f"the one set here has id {policy.key_id}" if policy.key_id else "none is set here"
        raise PrivacyRefused(
            f"this warehouse records {len(erasures)} erasure(s) under the hash key with id "
            f"{', '.join(foreign)}, and {now}: set {KEY_SETTING} to that key, or a later "
            "load could bring those people back"
        )
    return frozenset(e.subject for e in erasures)


def _record_for(
    client: Any, writer: PrivacyPolicy, workspace_id: str, existing: Mapping[str, set[str]]
) -> PolicyRecord:
    """The workspace's recorded policy. A workspace without one (its first rows) takes the
    policy the warehouse's other workspaces are under, or on an empty warehouse the writer's,
    and it is recorded now: the next load must know what these rows are under. A warehouse
    loaded before policies were recorded holds its rows as the service has them (`keep`)."""
    recorded = read_policies(client, existing)
    if workspace_id in recorded:
        return recorded[workspace_id]
    shared = {r.describe() for r in recorded.values()}
    if len(shared) > 1:
        raise PrivacyRefused(
            f"workspace {workspace_id} has no privacy policy recorded and this warehouse's "
            f"workspaces are under different ones ({'; '.join(sorted(shared))}): load it with "
            "`signing-etl load` first"
        )
    if recorded:
        record = replace(next(iter(recorded.values())), workspace_id=workspace_id)
    elif any(not table.startswith("_") for table in existing):
        return PolicyRecord(workspace_id)  # rows from before policies were recorded
    else:
        record = PolicyRecord.of(workspace_id, writer)
    transaction(client, "recording the privacy policy", lambda: write_policy(client, record))
    return record


def _action(record: PolicyRecord, column: str) -> Action:
    action = record.action(column)
    for known in ACTIONS:
        if action == known:
            return known
    raise PrivacyRefused(
        f"the privacy policy recorded for workspace {record.workspace_id} names an unknown "
        f"action for {column}; load it with `signing-etl load --full-refresh`"
    )
