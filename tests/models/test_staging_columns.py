"""The staging models read the raw tables' columns as `sources/signing/columns.py` declares them:
one list of columns, held against the other, so a column renamed, retyped or added on one side
fails here instead of turning into a silent typed null in staging."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sources.signing.columns import TABLES, ColumnType

STAGING = Path(__file__).resolve().parents[2] / "models" / "models" / "staging"
READS = re.compile(r"signing_completed_rows\('(?P<table>\w+)'")
COLUMN = re.compile(r"\['(?P<name>\w+)',\s*(?P<type>[^\]]+)\]")
# What each staging type expression is in columns.py's vocabulary.
TYPES: dict[str, ColumnType] = {
    "text": "text",
    "dbt.type_boolean()": "bool",
    "dbt.type_int()": "bigint",
    "type_timestamp_tz()": "timestamp",
}
# Declared columns no staging model reads, each with the reason.
NOT_STAGED: dict[str, set[str]] = {
    # `workspace_id` repeats `id` on this one table; staging reads `id`.
    "workspaces": {"workspace_id"},
    # The recipient's placeholder values as JSON, kept in raw; no mart uses them.
    "shipment_fields": {"placeholders"},
    # Placeholders, blocks and group ids feed no mart yet; their tables stay in raw.
    "documents__placeholders": set(TABLES["documents__placeholders"]),
    "documents__blocks": set(TABLES["documents__blocks"]),
    "contacts__group_ids": set(TABLES["contacts__group_ids"]),
}


def staging_columns() -> dict[str, dict[str, str]]:
    """Per raw table: the columns its staging model selects, with their staging type."""
    found: dict[str, dict[str, str]] = {}
    for model in sorted(STAGING.glob("stg_signing__*.sql")):
        sql = model.read_text()
        reads = READS.search(sql)
        assert reads, f"{model.name} reads no raw table through signing_completed_rows"
        listed = sql[: reads.start()]
        found[reads["table"]] = {m["name"]: m["type"].strip() for m in COLUMN.finditer(listed)}
    return found


def test_every_staged_column_is_declared_with_the_same_type() -> None:
    staged = staging_columns()
    assert staged, "no staging model found"
    wrong = {
        (table, name): (staged_type, TABLES[table].get(name))
        for table, columns in staged.items()
        for name, staged_type in columns.items()
        # dlt's own columns (`_dlt_list_idx`), and the source's (`_deleted_at`), which it
        # declares beside the API's
        if not name.startswith("_") and TYPES.get(staged_type, "unknown") != TABLES[table].get(name)
    }
    assert wrong == {}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_declared_column_is_staged_or_named_as_not_staged(table: str) -> None:
    staged = staging_columns().get(table, {})
    not_read = set(TABLES[table]) - set(staged) - NOT_STAGED.get(table, set())
    assert not_read == set(), f"{table}: declared in columns.py, not read by staging"
