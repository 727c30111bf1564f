"""Two workspaces whose ids collide, loaded into one warehouse: each workspace's marts (its rows,
selected by `workspace_id`) equal the numbers of its own sandbox store, and every mart's key is
unique per workspace although the ids themselves repeat across workspaces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from sandbox import RunningSandbox
from tests.models.test_marts import assert_marts_match, truth
from tests.models.workspaces import (
    SHARED_SEED,
    colliding_workspaces,
    shared_workspaces,
    workspace_marts,
)

# Each mart's key within a workspace (the models' YAML tests the same per workspace).
MART_KEYS = {
    "fct_shipments": ("shipment_id",),
    "fct_recipients": ("recipient_id",),
    "fct_signing_funnel": ("sent_week", "document_id", "signature_level"),
    "fct_time_to_sign": ("time_grain", "document_id", "sent_week"),
    "dim_documents": ("document_id",),
    "dim_contacts": ("contact_id",),
}
# Ids of one workspace that the other one uses too: the sandbox makes them collide on purpose.
COLLIDING_IDS = {
    "fct_shipments": "shipment_id",
    "fct_recipients": "recipient_id",
    "dim_documents": "document_id",
    "dim_contacts": "contact_id",
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningSandbox, Path]]:
    """One sandbox serving two colliding workspaces (150 shipments each), both loaded into one
    warehouse with their own keys, models built; shared by the tests of this module."""
    configs = colliding_workspaces(seed=SHARED_SEED)
    with RunningSandbox(*configs) as running:
        yield running, shared_workspaces(tmp_path_factory, configs).warehouse


@pytest.mark.parametrize("position", [0, 1], ids=["first workspace", "second workspace"])
def test_each_workspace_marts_equal_its_own_sandbox_although_ids_collide(
    loaded: tuple[RunningSandbox, Path], position: int, tmp_path: Path
) -> None:
    running, warehouse = loaded
    store = running.stores[position]
    own = workspace_marts(warehouse, store.workspace.id, tmp_path / "own.duckdb")
    assert_marts_match(own, store)


def test_the_two_workspaces_differ_and_the_whole_warehouse_holds_both(
    loaded: tuple[RunningSandbox, Path],
) -> None:
    running, warehouse = loaded
    first, second = (truth(store) for store in running.stores)
    assert first["shipment_milestones"] != second["shipment_milestones"]
    with duckdb.connect(str(warehouse), read_only=True) as db:
        rows = db.execute(
            "select workspace_id, workspace_name, count(*), count_if(is_sent) "
            "from marts.fct_shipments group by all order by all"
        ).fetchall()
    assert rows == sorted(
        (s.workspace.id, s.workspace.name, t["shipments"], t["sent"])
        for s, t in zip(running.stores, (first, second), strict=True)
    )


def test_mart_keys_are_unique_per_workspace_while_ids_repeat_across_workspaces(
    loaded: tuple[RunningSandbox, Path],
) -> None:
    _, warehouse = loaded
    with duckdb.connect(str(warehouse), read_only=True) as db:

        def count(sql: str) -> int:
            found = db.execute(sql).fetchone()
            return int(found[0]) if found else 0

        duplicated = {
            mart: count(
                f"select count(*) from (select 1 from marts.{mart} "
                f"group by workspace_id, {', '.join(key)} having count(*) > 1)"
            )
            for mart, key in MART_KEYS.items()
        }
        shared = {
            mart: count(
                f"select count(*) from (select {column} from marts.{mart} "
                f"group by {column} having count(distinct workspace_id) > 1)"
            )
            for mart, column in COLLIDING_IDS.items()
        }
    assert duplicated == dict.fromkeys(MART_KEYS, 0)
    assert all(shared.values()), f"the test needs colliding ids: {shared}"
