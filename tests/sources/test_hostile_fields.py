"""API fields named like the warehouse's own columns are not trusted, at any level.

A record that carried `_dlt_id` replaced dlt's row id, so a second workspace sharing the
warehouse could delete the first one's contact and its custom-property rows on a merge. Here two
workspaces of a stand-in API send the same forged `_dlt_*`, `_fetch_seq`, `workspace_id` and link
fields in every table, root and nested, and both load into one DuckDB file with the real
pipeline; the rows are then read back.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.load.run import LoadResult, load_incremental
from tests.support import FakeAPI, FakeWorkspace, StandIn, fast, source_env

STAMP = "2026-01-01T08:00:00.000Z"
FORGED = {"_dlt_id": "forged", "_dlt_parent_id": "forged", "_dlt_root_id": "forged"}
# Every table of the source with its workspace's rows: a workspace's count must never change
# when another workspace loads.
TABLES = (
    "workspaces",
    "documents",
    "documents__fields",
    "documents__blocks",
    "documents__placeholders",
    "shipments",
    "shipments__recipients",
    "audit_events",
    "shipment_fields",
    "contacts",
    "contacts__custom",
    "contacts__group_ids",
    "webhooks",
)
NESTED = {
    "documents__fields": "documents",
    "documents__blocks": "documents",
    "documents__placeholders": "documents",
    "shipments__recipients": "shipments",
    "contacts__custom": "contacts",
    "contacts__group_ids": "contacts",
}


def forged_workspace(workspace_id: str) -> FakeWorkspace:
    """A workspace whose every record, at every level, carries fields it has no say over."""
    elsewhere = {"workspace_id": "ws_someone_else"}
    return FakeWorkspace(
        workspace_id,
        me_extra={**FORGED, "_fetch_seq": 1},
        documents=[
            {
                "id": "doc_1",
                "name": "Contract",
                "updated_at": STAMP,
                "placeholders": ["client"],
                "fields": [
                    {"id": "fld_1", "type": "text", "document_id": "doc_other", **FORGED},
                ],
                "blocks": [{"id": "blk_1", "type": "text", "_dlt_list_idx": 9, **elsewhere}],
                "theme": {"id": "thm_1", "_dlt_id": "forged"},
                **FORGED,
                **elsewhere,
            }
        ],
        shipments=[
            {
                "id": "shp_1",
                "document_id": "doc_1",
                "status": "sent",
                "recipients": [
                    {"id": "rcp_1", "name": "Ann", "shipmentId": "shp_other", **FORGED},
                ],
                "$dlt_load_id": "forged",
                **FORGED,
                **elsewhere,
            }
        ],
        events={
            "shp_1": [
                {
                    "id": "evt_1",
                    "type": "sent",
                    "at": STAMP,
                    "recipient_id": "rcp_1",
                    "shipment_id": "shp_other",
                    "_fetch_seq": 10**12,
                    **FORGED,
                }
            ]
        },
        fields={
            "shp_1": {
                "shipment_id": "shp_other",
                "data": [
                    {
                        "recipient_id": "rcp_1",
                        "placeholders": {"_dlt_id": "a placeholder's name is data"},
                        "fields": [{"field_id": "fld_1", "type": "text", "value": "yes"}],
                        **FORGED,
                    }
                ],
            }
        },
        contacts=[
            {
                "id": "con_1",
                "name": "Ann",
                "updated_at": STAMP,
                "custom": {"_dlt_id": "a custom key is data", "tier": "gold"},
                "group_ids": ["grp_1"],
                "_DLT_ID": "forged",
                "workspaceId": "ws_someone_else",
                **FORGED,
            }
        ],
        webhooks=[
            {
                "id": "wh_1",
                "event": "shipment.sent",
                "target_url": "https://hooks.example.com/x",
                "Secret": "whsec_never_stored",
                "deleted": True,
                **FORGED,
            }
        ],
    )


def load(stand_in: StandIn, key: str, warehouse: Path) -> LoadResult:
    with source_env(stand_in.base_url, key):
        return load_incremental(warehouse, settings=fast())


def rows_per_workspace(warehouse: Path) -> dict[str, Counter[str]]:
    """Per table, how many rows each workspace has."""
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return {
            table: Counter(
                dict(
                    connection.execute(
                        f"select workspace_id, count(*) from raw.{table} group by 1"
                    ).fetchall()
                )
            )
            for table in TABLES
        }


def query(warehouse: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return connection.execute(sql).fetchall()


@pytest.mark.slow
def test_a_forged_dlt_id_changes_no_other_workspaces_rows(tmp_path: Path) -> None:
    first, second = forged_workspace("ws_first"), forged_workspace("ws_second")
    api = FakeAPI({"key_first": first, "key_second": second})
    warehouse = tmp_path / "signing.duckdb"

    with StandIn(api.app()) as stand_in:
        loaded_first = load(stand_in, "key_first", warehouse)
        first_rows = rows_per_workspace(warehouse)
        load(stand_in, "key_second", warehouse)
        # The second workspace changes every record, so the next load merges (replaces and
        # deletes nested rows) in each of its tables.
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        second.contacts[0] = {**second.contacts[0], "name": "Ann B", "updated_at": now}
        second.documents[0] = {**second.documents[0], "name": "Contract B", "updated_at": now}
        second.shipments[0] = {**second.shipments[0], "status": "completed"}
        second.webhooks[0] = {**second.webhooks[0], "event": "shipment.signed"}
        second.me_extra["name"] = "Second, renamed"
        reloaded_second = load(stand_in, "key_second", warehouse)

    assert loaded_first.stopped is None
    assert reloaded_second.stopped is None
    assert reloaded_second.rows.get("contacts") == 1  # the merge did happen
    after = rows_per_workspace(warehouse)
    assert {t: after[t]["ws_first"] for t in TABLES} == {
        t: first_rows[t]["ws_first"] for t in TABLES
    }
    assert all(first_rows[t]["ws_first"] >= 1 for t in TABLES), first_rows
    assert {t: after[t]["ws_second"] for t in TABLES} == {
        t: first_rows[t]["ws_first"] for t in TABLES
    }

    # No forged value is anywhere in dlt's columns, and every nested row hangs off its own
    # workspace's parent.
    for table in TABLES:
        columns = {row[0] for row in query(warehouse, f"describe raw.{table}")}
        dlt_columns = sorted(c for c in columns if c.startswith("_dlt_"))
        for column in dlt_columns:
            forged = query(
                warehouse, f"select count(*) from raw.{table} where {column}::text = 'forged'"
            )
            assert forged == [(0,)], (table, column)
    for nested, parent in NESTED.items():
        orphans = query(
            warehouse,
            f"select count(*) from raw.{nested} n left join raw.{parent} p "
            "on n._dlt_parent_id = p._dlt_id and n.workspace_id = p.workspace_id "
            "where p._dlt_id is null",
        )
        assert orphans == [(0,)], nested


def test_fields_the_source_sets_keep_the_sources_values_and_each_drop_is_said_once(
    tmp_path: Path,
) -> None:
    workspace = forged_workspace("ws_only")
    # The same records twice over (other ids): each table and field is still said once.
    workspace.contacts.append({**copy.deepcopy(workspace.contacts[0]), "id": "con_2"})
    warehouse = tmp_path / "signing.duckdb"

    with StandIn(FakeAPI({"key_only": workspace}).app()) as stand_in:
        result = load(stand_in, "key_only", warehouse)

    assert result.stopped is None
    links = {
        "documents__fields": ("document_id", "doc_1"),
        "documents__blocks": ("document_id", "doc_1"),
        "shipments__recipients": ("shipment_id", "shp_1"),
        "audit_events": ("shipment_id", "shp_1"),
        "shipment_fields": ("shipment_id", "shp_1"),
    }
    for table, (column, value) in links.items():
        assert query(warehouse, f"select distinct {column} from raw.{table}") == [(value,)], table
    for table in TABLES:
        found = query(warehouse, f"select distinct workspace_id from raw.{table}")
        assert found == [("ws_only",)], table
    assert query(warehouse, "select max(_fetch_seq) < 1000000 from raw.audit_events") == [(True,)]
    # Free-form values stay as they came: custom keys and placeholder names are data.
    custom = set(query(warehouse, "select key, value from raw.contacts__custom"))
    assert ("_dlt_id", "a custom key is data") in custom
    ((placeholders,),) = query(warehouse, "select placeholders from raw.shipment_fields")
    assert json.loads(placeholders) == {"_dlt_id": "a placeholder's name is data"}
    # A webhook's secret is never stored under any spelling, and `deleted` is the source's.
    webhook_columns = {row[0] for row in query(warehouse, "describe raw.webhooks")}
    assert "secret" not in webhook_columns
    assert query(warehouse, "select id, deleted from raw.webhooks") == [("wh_1", False)]

    warnings = result.stats.warnings
    assert len(warnings) == len(set(warnings)), warnings
    expected = {
        "contacts: dropped the API's field `_dlt_id`",
        "contacts: dropped the API's field `_DLT_ID`",
        "contacts: dropped the API's field `workspaceId` (the source sets `workspace_id`",
        "documents__fields: dropped the API's field `document_id` (the source sets",
        "documents__blocks: dropped the API's field `_dlt_list_idx`",
        "documents: dropped the API's field `workspace_id`",
        "shipments: dropped the API's field `$dlt_load_id`",
        "shipments__recipients: dropped the API's field `shipmentId`",
        "audit_events: dropped the API's field `_fetch_seq`",
        "audit_events: dropped the API's field `shipment_id`",
        "shipment_fields: dropped the API's field `shipment_id`",
        "webhooks: dropped the API's field `_dlt_root_id`",
        "workspaces: dropped the API's field `_fetch_seq`",
    }
    missing = {e for e in expected if not any(w.startswith(e) for w in warnings)}
    assert missing == set(), warnings
    assert all("\n" not in w for w in warnings)


def test_a_field_name_with_control_characters_is_said_as_one_clean_line(
    tmp_path: Path,
) -> None:
    workspace = FakeWorkspace(
        "ws_names",
        contacts=[{"id": "con_1", "updated_at": STAMP, "_x\n\x1b[31mERROR forged": 1}],
    )
    with StandIn(FakeAPI({"key": workspace}).app()) as stand_in:
        result = load(stand_in, "key", tmp_path / "signing.duckdb")

    said = [w for w in result.stats.warnings if w.startswith("contacts: dropped")]
    assert said == [
        "contacts: dropped the API's field `_x\\x0a\\x1b[31mERROR forged` "
        "(dlt and this project keep names that begin with _)"
    ], said
