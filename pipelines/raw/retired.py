"""Workspaces retired from `status`: a workspace taken out of the configuration keeps its rows
in the warehouse, and `status --retire NAME` records that its runs are over, so `status` and
`--check` leave it out instead of calling it stale for ever. A later run of the workspace
brings it back (its newest run began after the retirement).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pipelines.warehouse import SqlClient, Warehouse, ensure_table, insert_rows, transaction

RETIRED_TABLE = "_signing_retired_workspaces"
RETIRED_COLUMNS = {"workspace_id": "varchar", "retired_at": "timestamp with time zone"}


def retire_workspace(warehouse: Warehouse, workspace_id: str, when: datetime) -> None:
    """Record `workspace_id` as retired at `when` (again: the newer time counts), in one run
    of the warehouse (published, so analysts' `status` sees it)."""
    with warehouse.publishing(), warehouse.sql_client() as client:
        table = ensure_table(client, RETIRED_TABLE, RETIRED_COLUMNS).name

        def replace() -> None:
            client.execute_sql(f"delete from {table} where workspace_id = %s", workspace_id)
            insert_rows(client, table, list(RETIRED_COLUMNS), [[workspace_id, when]])

        transaction(client, "recording the retired workspace", replace)


def read_retired(client: SqlClient, columns: Mapping[str, set[str]]) -> dict[str, datetime]:
    """When each retired workspace was retired, by id (none before the first retirement)."""
    if RETIRED_TABLE not in columns:
        return {}
    table = client.make_qualified_table_name(RETIRED_TABLE)
    rows = client.execute_sql(f"select workspace_id, retired_at from {table}")
    return {str(workspace_id): when for workspace_id, when in rows or []}
