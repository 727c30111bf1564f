"""Sync state kept per workspace in a shared warehouse.

Each workspace loads through a dlt pipeline of its own, named after the workspace id that `/me`
answers with (`signing_<workspace id>`), into the one dataset `raw`. dlt keeps each pipeline's
state in `raw._dlt_pipeline_state` under its name, so cursors, fingerprints and pending children
follow the workspace: a rotated key continues, a new workspace starts with a full load, and a
refresh of one workspace (rows and state) leaves the others alone.

Versions before this kept one pipeline, `signing`, for the whole warehouse. Its state is handed
over to the workspace it belongs to on the first run of this version (`adopt_legacy_state`).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dlt
from dlt.common.versioned_state import compress_state, decompress_state

from pipelines.errors import LegacyStateError
from pipelines.warehouse import (
    DATASET,
    SqlClient,
    Warehouse,
    columns_by_table,
    has_table,
    loaded_workspaces,
    transaction,
)

LEGACY_PIPELINE_NAME = "signing"
PIPELINE_PREFIX = "signing_"
STATE_TABLE = "_dlt_pipeline_state"
LOADS_TABLE = "_dlt_loads"
# The run history and the erasures outlive a refresh (an erased person must stay erased).
KEPT_TABLES = {"_signing_runs", "_signing_erasures"}


def pipeline_name_for(workspace_id: str) -> str:
    """The dlt pipeline name of one workspace: `signing_<id>`, with characters dlt cannot use
    in a folder name replaced and a short hash added so that two ids never share a name."""
    safe = re.sub(r"[^A-Za-z0-9_]", "_", workspace_id)
    if safe != workspace_id or not safe:
        safe += "_" + hashlib.sha256(workspace_id.encode()).hexdigest()[:8]
    return PIPELINE_PREFIX + safe


@dataclass(frozen=True)
class StoredState:
    """A pipeline's newest state as the warehouse holds it."""

    pipeline_name: str
    state: dict[str, Any]


def stored_states(client: SqlClient) -> dict[str, StoredState]:
    """Each pipeline's newest completed state in the dataset, by pipeline name; empty when
    the dataset or its state table does not exist yet."""
    if not has_table(client, STATE_TABLE) or not has_table(client, LOADS_TABLE):
        return {}
    state_table = client.make_qualified_table_name(STATE_TABLE)
    loads_table = client.make_qualified_table_name(LOADS_TABLE)
    rows = client.execute_sql(
        f"select s.pipeline_name, s.state from {state_table} s join {loads_table} l "
        "on l.load_id = s._dlt_load_id where l.status = 0 order by s._dlt_load_id desc"
    )
    newest: dict[str, StoredState] = {}
    for name, blob in rows or []:
        if name not in newest:
            newest[name] = StoredState(name, decompress_state(blob))
    return newest


def adopt_legacy_state(pipeline: dlt.Pipeline) -> str | None:
    """Hand the state of the single pipeline of earlier versions to the workspace its rows
    belong to, in one transaction: its newest state row is copied under that workspace's
    pipeline name and the old rows are deleted. Rows need no change: every row already carries
    its `workspace_id`.

    Returns the workspace id that received the state, or None when there was nothing to adopt.

    Raises:
        LegacyStateError: the old state served several workspaces (loaded before state was kept
            per workspace), so no one workspace can continue from it.
    """
    with pipeline.sql_client() as client:
        if not client.has_dataset() or not has_table(client, STATE_TABLE):
            return None
        state_table = client.make_qualified_table_name(STATE_TABLE)
        legacy = client.execute_sql(
            f"select version, engine_version, state, created_at, version_hash, _dlt_load_id "
            f"from {state_table} where pipeline_name = %s order by _dlt_load_id desc limit 1",
            LEGACY_PIPELINE_NAME,
        )
        if not legacy:
            return None
        owners = sorted(workspace.id for workspace in loaded_workspaces(client))
        if len(owners) != 1:
            raise LegacyStateError(
                "this warehouse was loaded by an earlier version with "
                f"{len(owners)} workspaces sharing one state ({', '.join(owners) or 'none'}), "
                "so their rows may have overwritten each other; reload it with "
                "`signing-etl load --full-refresh` (every workspace), or move the file away"
            )
        (owner,) = owners
        name = pipeline_name_for(owner)
        version, engine_version, blob, created_at, version_hash, load_id = legacy[0]
        state = decompress_state(blob)
        state["pipeline_name"] = name

        def hand_over() -> None:
            client.execute_sql(f"delete from {state_table} where pipeline_name = %s", name)
            client.execute_sql(
                f"insert into {state_table} (version, engine_version, pipeline_name, state, "
                "created_at, version_hash, _dlt_load_id, _dlt_id) "
                "values (%s, %s, %s, %s, %s, %s, %s, %s)",
                version,
                engine_version,
                name,
                compress_state(state),  # type: ignore[arg-type]
                created_at,
                version_hash,
                load_id,
                uuid.uuid4().hex[:14],
            )
            client.execute_sql(
                f"delete from {state_table} where pipeline_name = %s", LEGACY_PIPELINE_NAME
            )

        transaction(client, "handing the old state over", hand_over)
    return owner


def forget_workspace(pipeline: dlt.Pipeline, workspace_id: str) -> dict[str, int]:
    """Delete one workspace's rows from every table of the dataset and its pipeline's state,
    in one transaction, so that its next load is a full one; other workspaces keep theirs.

    Returns the rows deleted per table."""
    with pipeline.sql_client() as client:
        if not client.has_dataset():
            return {}
        tables = columns_by_table(client)
        roots = {t for t, cols in tables.items() if "workspace_id" in cols and "__" not in t}

        def delete() -> dict[str, int]:
            deleted: dict[str, int] = {}
            # Nested tables first: those without workspace_id are found through their root row.
            for table in sorted(set(tables) - KEPT_TABLES, key=lambda t: -t.count("__")):
                columns = tables[table]
                qualified = client.make_qualified_table_name(table)
                if "workspace_id" in columns:
                    where, args = "workspace_id = %s", [workspace_id]
                elif "_dlt_root_id" in columns and table.split("__")[0] in roots:
                    root = client.make_qualified_table_name(table.split("__")[0])
                    where = f"_dlt_root_id in (select _dlt_id from {root} where workspace_id = %s)"
                    args = [workspace_id]
                elif table == STATE_TABLE:
                    where, args = "pipeline_name = %s", [pipeline_name_for(workspace_id)]
                else:
                    continue
                count = client.execute_sql(f"select count(*) from {qualified} where {where}", *args)
                client.execute_sql(f"delete from {qualified} where {where}", *args)
                deleted[table] = int(count[0][0]) if count else 0
            return deleted

        deleted = transaction(client, f"deleting workspace {workspace_id}", delete)
    return {table: n for table, n in deleted.items() if n}


def make_pipeline(
    warehouse: Warehouse | Path, workspace_id: str, pipelines_dir: Path | None = None
) -> dlt.Pipeline:
    """The pipeline of one workspace (`pipeline_name_for`) into the warehouse; every
    workspace's pipeline writes the one dataset `raw`."""
    place = Warehouse.of(warehouse)
    pipeline = dlt.pipeline(
        pipeline_name=pipeline_name_for(workspace_id),
        pipelines_dir=str(pipelines_dir or place.pipelines_dir),
        destination=place.dlt_destination(workspace_id),
        dataset_name=DATASET,
    )
    # dlt's own handlers would abort normalize and load on a signal; `stop_on_signals` lets
    # them finish instead, so that what was fetched is kept.
    pipeline.config.runtime.intercept_signals = False
    return pipeline
