"""Where a shared database's webhook receiver keeps its inbox and secrets: the folder, by host,
recorded in the database (a path, never a secret), so that a load on that host run from any
folder or by a worker with an empty one finds them. A DuckDB file's are beside it."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._catalog import has_table
from ._conflicts import transaction
from ._ddl import ensure_table
from ._rows import insert_rows

HOMES_TABLE = "_signing_webhook_homes"
HOMES_COLUMNS = {"host": "varchar", "folder": "varchar", "recorded_at": "timestamp with time zone"}


def record_home(client: Any, folder: Path) -> None:
    """Record `folder` as this host's webhook folder (replacing what it recorded before)."""
    table = ensure_table(client, HOMES_TABLE, HOMES_COLUMNS).name
    host = socket.gethostname()

    def replace() -> None:
        client.execute_sql(f"delete from {table} where host = %s", host)
        row = [host, str(folder.resolve()), datetime.now(UTC)]
        insert_rows(client, table, list(HOMES_COLUMNS), [row])

    transaction(client, "recording the webhooks' folder", replace)


def recorded_home(client: Any) -> Path | None:
    """This host's webhook folder as the database records it; None when none is."""
    if not has_table(client, HOMES_TABLE):
        return None
    table = client.make_qualified_table_name(HOMES_TABLE)
    rows = client.execute_sql(
        f"select folder from {table} where host = %s order by recorded_at desc",
        socket.gethostname(),
    )
    return Path(str(rows[0][0])) if rows else None
