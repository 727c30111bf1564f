"""The privacy policy on a warehouse that is already loaded. Before each load, the rows already
there are brought under the configured policy, in every workspace, table and nested table, or
the load stops with one line naming the one command that can (`load --full-refresh`): a column
never holds plaintext beside hashes. Each workspace's policy is recorded in the same transaction
as the rewrite (`raw._signing_privacy`), so a rewrite is never applied twice. The rows the load
then writes are under that recorded policy and its erasures, as every writer's are: the gate
(`pipelines.raw.privacy_gate`) gives it to the source.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipelines.modeling.record import record_marts_dropped
from pipelines.privacy.held_back import NestedRows, empty_nested, held_back_in
from pipelines.privacy.snapshots import rewrite_versions
from pipelines.raw.privacy_gate import PrivacyRefused, erasures_in_force
from pipelines.raw.privacy_records import PolicyRecord, read_policies, write_policy
from pipelines.raw.run_records import RUNS_TABLE
from pipelines.warehouse import (
    PRIVACY_KEY,
    SqlClient,
    Warehouse,
    columns_by_table,
    insert_rows,
    loaded_workspaces,
    lock_for_transaction,
    staging_datasets,
    tables_in,
    transaction,
)
from sources.signing import PrivacyPolicy, RunStats
from sources.signing.columns import TABLES
from sources.signing.privacy import EXCEPT_WHERE, Action

REFRESH_COMMAND = "signing-etl load --full-refresh"
REWRITE_TABLE = "_signing_privacy_rewrite"  # old and new values of one column, while it changes
BATCH = 300  # rows of new values per INSERT


class PolicyChangeRefused(PrivacyRefused):
    """The configured policy needs values the warehouse no longer holds (a hash cannot be
    turned back into its address), or erasures recorded under another hash key."""


@dataclass(frozen=True)
class ColumnRewrite:
    """One personal column to bring under its new action, in some workspaces' rows."""

    column: str  # `table.column`
    action: Action  # hash, mask or drop
    workspaces: tuple[str, ...]


@dataclass
class PrivacyPlan:
    """What a load does about the policy before it fetches: the columns to rewrite and the
    workspaces whose recorded policy changes."""

    policy: PrivacyPolicy
    records: list[PolicyRecord] = field(default_factory=list)
    rewrites: list[ColumnRewrite] = field(default_factory=list)
    # The snapshots' columns of workspaces about to be loaded again, whose raw rows are deleted
    # instead of rewritten: their history is brought under the policy all the same.
    history: list[ColumnRewrite] = field(default_factory=list)
    versions_changed: int = 0  # snapshot versions the rewrites changed
    # Workspaces that only their own reload can bring under the policy, left as they are by
    # a load with --full-refresh of another (`load --full-refresh` reloads each in turn).
    waiting: list[str] = field(default_factory=list)
    # Tables the service added under a person (a contact's former addresses), which a policy
    # that holds back empties in some workspaces' rows, as the source holds them back.
    emptied: list[NestedRows] = field(default_factory=list)

    def apply(self, client: Any) -> dict[str, int]:
        """Rewrite the columns (with the snapshots' copies of them) and record the policy, in
        one transaction; the marts built under the old policy are dropped (the models rebuild
        them). Returns the raw rows changed per column."""
        if not self.records and not self.rewrites and not self.emptied:
            return {}
        changed = transaction(client, "the privacy policy's rewrite", lambda: self._rewrite(client))
        return {column: rows for column, rows in changed.items() if rows}

    def _rewrite(self, client: Any) -> dict[str, int]:
        """The rewrites and records themselves, inside `apply`'s transaction (run again from
        here when a conflict ended it)."""
        changed: dict[str, int] = {}
        self.versions_changed = 0
        # Loads side by side (on PostgreSQL, of several hosts) each plan the change for every
        # workspace: one rewrites at a time, and what another has recorded meanwhile is done.
        # Held alone, the lock also waits for the load steps under way (they share it), and
        # keeps new ones out until the new policy is recorded: a run that passed the privacy
        # gate before sees the change when it asks again in its load step (`LoadSteps`).
        lock_for_transaction(client, PRIVACY_KEY)
        self._leave_out(read_policies(client))
        existing = columns_by_table(client)
        for rewrite in self.rewrites:
            table, _, column = rewrite.column.partition(".")
            if column in existing.get(table, set()):
                changed[rewrite.column] = _rewrite(client, rewrite, self.policy)
        for emptied in self.emptied:
            changed[emptied.table] = empty_nested(client, emptied)
        for rewrite in [*self.rewrites, *self.history]:
            self.versions_changed += rewrite_versions(
                client, rewrite.column, rewrite.action, rewrite.workspaces, self.policy
            )
        for record in self.records:
            write_policy(client, record)
        if self.rewrites or self.history or self.emptied:
            drop_derived_copies(client)
        return changed

    def _leave_out(self, recorded: Mapping[str, PolicyRecord]) -> None:
        """Take out of the plan the workspaces whose rows `recorded` says are under the policy
        already (another run's rewrite, committed since this plan was read): a value hashed
        twice would match no address again."""
        done = {w for w, record in recorded.items() if record.same_as(self.policy)}
        if not done:
            return

        def left(workspaces: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(w for w in workspaces if w not in done)

        self.records = [record for record in self.records if record.workspace_id not in done]
        self.rewrites = [
            ColumnRewrite(r.column, r.action, left(r.workspaces))
            for r in self.rewrites
            if left(r.workspaces)
        ]
        self.emptied = [
            NestedRows(e.table, left(e.workspaces)) for e in self.emptied if left(e.workspaces)
        ]

    @property
    def changes_rows(self) -> bool:
        """Whether the plan changes rows already loaded (then dlt's packages, which keep rows
        as they were loaded, and the file's free blocks must not keep the old values)."""
        return bool(self.rewrites or self.history or self.emptied)


def drop_derived_copies(client: Any) -> None:
    """Delete the copies of raw rows made under an earlier policy or before an erasure: the
    rows dlt's merges leave in its staging datasets (`raw_staging`, and each workspace's of a
    shared database), and the marts (the models build them again; until then the builds'
    record says they are gone)."""
    marts = sorted(tables_in(client, "marts"))
    for mart in marts:
        client.execute_sql(f"drop table if exists marts.{_quoted(client, mart)}")
    if marts:
        record_marts_dropped(client)
    for schema in staging_datasets(client, client.dataset_name):
        for table in sorted(tables_in(client, schema)):
            if not table.startswith("_dlt"):  # dlt's own record of the staging schema stays
                client.execute_sql(
                    f"delete from {_quoted(client, schema)}.{_quoted(client, table)}"
                )


def plan_privacy(
    client: SqlClient, policy: PrivacyPolicy, workspace_id: str, refreshing: bool
) -> PrivacyPlan:
    """What must change for `policy` to hold in every workspace's rows, read from the warehouse;
    `refreshing`: this workspace's rows are about to be deleted and loaded again (then the
    workspaces only a reload can change wait for theirs, instead of stopping this one).

    Raises:
        PolicyChangeRefused: a change only reloading can make, or erasures under another key.
    """
    existing = columns_by_table(client)
    erasures_in_force(client, policy, existing)  # refused before any rewrite when foreign
    recorded = read_policies(client, existing)
    plan = PrivacyPlan(policy)
    wanted = PolicyRecord.of(workspace_id, policy)
    workspaces = sorted(set(recorded) | _workspaces_loaded(client, existing) | {workspace_id})
    rewrites: dict[tuple[str, Action], list[str]] = {}
    held_columns, held_tables = held_back_in(existing, policy)
    emptied: dict[str, list[str]] = {}
    for workspace in workspaces:
        record = recorded.get(workspace, PolicyRecord(workspace))
        if workspace == workspace_id and refreshing:
            plan.records.append(wanted)  # its rows are deleted before it loads again
            plan.history = [ColumnRewrite(c, a, (workspace,)) for c, a in _history(record, policy)]
            continue
        if workspace in recorded and record.same_as(policy):
            continue
        try:
            changes = list(_changes(record, policy))
        except PolicyChangeRefused:
            if not refreshing:
                raise
            plan.waiting.append(workspace)
            continue
        for column, action in [*changes, *((column, "drop") for column in held_columns)]:
            rewrites.setdefault((column, action), []).append(workspace)
        for table in held_tables:
            emptied.setdefault(table, []).append(workspace)
        plan.records.append(PolicyRecord.of(workspace, policy))
    plan.rewrites = [ColumnRewrite(c, a, tuple(w)) for (c, a), w in sorted(rewrites.items())]
    plan.emptied = [NestedRows(t, tuple(w)) for t, w in sorted(emptied.items())]
    return plan


def _changes(record: PolicyRecord, policy: PrivacyPolicy) -> Iterator[tuple[str, Action]]:
    """The columns of rows under `record` that change under `policy`, with their new action;
    refused when the rows no longer hold what the new action needs."""
    for column, new in policy.actions.items():
        old = record.action(column)
        if not _differs(record, policy, column):
            continue
        if old == "keep" or new == "drop":
            yield column, new
            continue
        rehash = old == "hash" == new
        held = f"hashed with key {record.key_id}" if rehash else participle(old)
        asked = f"hash it with {_key_said(policy)}" if new == "hash" else f"{new} it"
        raise PolicyChangeRefused(
            f"{column} is {held} in workspace {record.workspace_id}'s rows and the privacy "
            f"policy now asks to {asked}, which needs the service's data again: run "
            f"`{REFRESH_COMMAND}` (every workspace), or set the policy back"
        )


def _history(record: PolicyRecord, policy: PrivacyPolicy) -> Iterator[tuple[str, Action]]:
    """The columns whose snapshot versions change when a workspace whose rows are under
    `record` is loaded again under `policy`, with their action: the new one where the stored
    values allow it, else drop (a masked value, or a hash under another key, cannot be made
    into the new one, and the history is not left under the old policy)."""
    for column, new in policy.actions.items():
        if _differs(record, policy, column):
            yield column, new if record.action(column) == "keep" or new == "drop" else "drop"


def _differs(record: PolicyRecord, policy: PrivacyPolicy, column: str) -> bool:
    """Whether `column` is stored otherwise under `record` than `policy` wants it: another
    action, or hashed with another key."""
    old, new = record.action(column), policy.actions[column]
    return old != new or (old == "hash" and record.key_id != policy.key_id)


def participle(action: str) -> str:
    return {"hash": "hashed", "mask": "masked", "drop": "dropped"}.get(action, action)


def _key_said(policy: PrivacyPolicy) -> str:
    return f"key {policy.key_id}" if policy.key_id else "no key"


def _workspaces_loaded(client: SqlClient, existing: Mapping[str, set[str]]) -> set[str]:
    """The workspaces the warehouse has loaded: those of `raw.workspaces` and of the run
    records (small tables; a load of some resources only may have no workspace row)."""
    found = {workspace.id for workspace in loaded_workspaces(client)}
    if RUNS_TABLE in existing:
        table = client.make_qualified_table_name(RUNS_TABLE)
        rows = client.execute_sql(f"select distinct workspace_id from {table}")
        found.update(str(workspace) for (workspace,) in rows or [] if workspace is not None)
    return found


def _rewrite(client: Any, rewrite: ColumnRewrite, policy: PrivacyPolicy) -> int:
    """Bring one column of some workspaces' rows under its new action; the rows changed."""
    table, _, column = rewrite.column.partition(".")
    qualified = client.make_qualified_table_name(table)
    name = _quoted(client, column)
    marks = ", ".join(["%s"] * len(rewrite.workspaces))
    where = f"{name} is not null and workspace_id in ({marks})"
    arguments: list[Any] = list(rewrite.workspaces)
    if rewrite.column in EXCEPT_WHERE:
        other, value = EXCEPT_WHERE[rewrite.column]
        where += f" and ({_quoted(client, other)} is null or {_quoted(client, other)} <> %s)"
        arguments.append(value)
    if rewrite.action == "drop":
        counted = client.execute_sql(f"select count(*) from {qualified} where {where}", *arguments)
        client.execute_sql(f"update {qualified} set {name} = null where {where}", *arguments)
        return int(counted[0][0]) if counted else 0
    rows = client.execute_sql(
        f"select _dlt_id, cast({name} as varchar) from {qualified} where {where}", *arguments
    )
    is_json = TABLES[table].get(column) == "json"
    changes = [
        (dlt_id, old, new)
        for dlt_id, old in rows or []
        if (new := _changed(policy, rewrite, old, is_json)) != old
    ]
    _apply_values(client, qualified, name, changes)
    return len(changes)


def _changed(policy: PrivacyPolicy, rewrite: ColumnRewrite, old: str, is_json: bool) -> str:
    """One stored value under the new action (a JSON object: each of its values)."""
    if not is_json:
        return str(policy.value(rewrite.column, old, rewrite.action))
    changed = policy.value(rewrite.column, orjson.loads(old), rewrite.action)
    return orjson.dumps(changed).decode()


def _apply_values(
    client: Any, table: str, column: str, changes: Sequence[tuple[str, str, str]]
) -> None:
    """Set new values by `_dlt_id` through a table of (id, old text, new value) typed like the
    column, where the value is still the old one (a load beside this one may have changed it)."""
    if not changes:
        return
    mapping = client.make_qualified_table_name(REWRITE_TABLE)
    client.execute_sql(f"drop table if exists {mapping}")
    client.execute_sql(
        f"create table {mapping} as select _dlt_id, cast({column} as varchar) as old_text, "
        f"{column} as new_value from {table} where 1 = 0"
    )
    insert_rows(client, mapping, ("_dlt_id", "old_text", "new_value"), changes, BATCH)
    client.execute_sql(
        f"update {table} as t set {column} = m.new_value from {mapping} as m "
        f"where t._dlt_id = m._dlt_id and cast(t.{column} as varchar) = m.old_text"
    )
    client.execute_sql(f"drop table {mapping}")


def _quoted(client: Any, name: str) -> str:
    quoted: str = client.escape_column_name(name)
    return quoted


def prepare_privacy(
    warehouse: Warehouse, policy: PrivacyPolicy, workspace_id: str, refreshing: bool
) -> PrivacyPlan:
    """A load's plan for the policy, read before its pipeline is made; when rows will be
    rewritten, dlt's working folder goes first (its packages hold rows under the old policy).

    Raises:
        PolicyChangeRefused: see `plan_privacy`.
    """
    if not warehouse.loaded_before():  # a first load: nothing to read, nothing to rewrite
        return PrivacyPlan(policy, [PolicyRecord.of(workspace_id, policy)])
    with warehouse.run_reader() as client:
        plan = plan_privacy(client, policy, workspace_id, refreshing)
    if plan.changes_rows:
        warehouse.clear_working_folders()
    return plan


def apply_privacy(warehouse: Warehouse, plan: PrivacyPlan, stats: RunStats) -> None:
    """Carry out the plan (after a full refresh has deleted what it deletes) and say what
    changed among the run's warnings. The rows the load then writes are under the policy now
    recorded (`LoadSteps` asks the gate)."""
    if not plan.records and not plan.rewrites:
        return
    # The models' lock alone, as a build holds it: no build reads `raw` half rewritten, or writes
    # marts and history from rows it read before the rewrite (on PostgreSQL, another host's).
    with warehouse.models_hold(), warehouse.writing_client() as client:
        changed = plan.apply(client)
    if plan.changes_rows and not warehouse.compact():
        stats.warn(f"{warehouse.label} could not be compacted: old values stay in its free blocks")
    if changed:
        said = ", ".join(  # a column or table the policy does not name: held back
            f"{column} {participle(plan.policy.actions.get(column, 'drop'))} in {rows:,} rows"
            for column, rows in changed.items()
        )
        stats.warn(f"the privacy policy now applies to the rows loaded before: {said}")
    if plan.versions_changed:
        stats.warn(
            f"the privacy policy now applies to the models' history too: "
            f"{plan.versions_changed:,} values of snapshot versions changed"
        )
    for workspace in plan.waiting:
        stats.warn(
            f"workspace {workspace}'s rows stay under their earlier privacy policy until it is "
            "loaded with --full-refresh too"
        )
