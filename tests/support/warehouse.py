"""Reading a loaded DuckDB warehouse: its `raw` schema, and which marts the models built."""

from __future__ import annotations

from pathlib import Path

import duckdb

from sources.signing import SOURCE_TABLES

# The six marts the analysts' guide (docs/models.md) promises, written out here rather than taken
# from the code.
MARTS = (
    "fct_shipments",
    "fct_recipients",
    "fct_signing_funnel",
    "fct_time_to_sign",
    "dim_documents",
    "dim_contacts",
)


# What a whole `dbt build` builds: 10 staging views, 18 mart tables (the six above, the status
# intervals, signer waits, waiting by day, three version marts, the workspaces, completions by
# week of completion, shipments waiting now, deleted records and deletions by day), 3 snapshots
# and the semantic layer's time spine (`semantic.metricflow_time_spine`); intermediate models
# are ephemeral.
MODELS_BUILT = 32


def tables_in(connection: duckdb.DuckDBPyConnection, schema: str) -> set[str]:
    """The tables of `schema` that exist so far."""
    return {
        row[0]
        for row in connection.execute(
            "select table_name from information_schema.tables where table_schema = ?", [schema]
        ).fetchall()
    }


def raw_tables(connection: duckdb.DuckDBPyConnection) -> set[str]:
    """The tables of `raw` that exist so far (a run may stop before creating some)."""
    return tables_in(connection, "raw")


def mart_tables(warehouse: Path) -> set[str]:
    """The tables the models built in `marts`."""
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return tables_in(connection, "marts")


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
