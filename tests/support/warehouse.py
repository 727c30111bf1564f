"""Reading a loaded DuckDB warehouse's `raw` schema."""

from __future__ import annotations

from pathlib import Path

import duckdb

from pipelines.signing_pipeline import SOURCE_TABLES


def raw_tables(connection: duckdb.DuckDBPyConnection) -> set[str]:
    """The tables of `raw` that exist so far (a run may stop before creating some)."""
    return {
        row[0]
        for row in connection.execute(
            "select table_name from information_schema.tables where table_schema = 'raw'"
        ).fetchall()
    }


def raw_row_counts(warehouse: Path) -> dict[str, int]:
    """Rows per source table of `raw` (tables not created yet are left out)."""
    if not warehouse.exists():
        return {}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        existing = raw_tables(connection)
        counts: dict[str, int] = {}
        for table in SOURCE_TABLES:
            if table in existing:
                found = connection.execute(f'select count(*) from raw."{table}"').fetchone()
                counts[table] = int(found[0]) if found else 0
    return counts
