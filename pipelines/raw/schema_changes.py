"""How the service's shape changed in one load, told in its summary, its run record, `status` and
the log: tables and columns the service started sending (what dlt created that `columns.py`
does not declare), columns whose type changed (dlt's variant columns, `col__v_text`), status
values the models do not know, and the columns of people the privacy policy held back. Found by
comparing the warehouse's catalog before and after the load, so every destination and every
writer (`LoadSteps`: loads and drains) finds them alike. A workspace's first load into an empty
warehouse creates every table: that is no change, and only the values and the held-back
columns are told then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from pipelines.warehouse import SqlClient, columns_by_table
from sources.signing.columns import TABLES
from sources.signing.errors import one_line
from sources.signing.privacy import ACTIONS, SECTIONS

# The table the drains load the deliveries into (through dlt, like the service's): the
# pipeline's own, so its first appearance is no change of the service's shape.
DELIVERIES_TABLE: Final = "webhook_deliveries"

# The values of the columns the models sort rows by, as the models know them (their
# accepted_values tests and `models/tests/singular/assert_known_status_values.sql`); any
# other value would be misfiled by the marts.
KNOWN_VALUES: Final[dict[str, tuple[str, ...]]] = {
    "shipments.status": ("sent", "completed", "expired", "revoked"),
    "shipments.activity_status": ("sent", "opened", "signed", "expired", "revoked"),
    "shipments__recipients.status": ("pending", "sent", "opened", "signed"),
    "audit_events.type": (
        "sent",
        "delivered",
        "opened",
        "signed",
        "completed",
        "expired",
        "revoked",
        "delivery_failed",
    ),
}
VALUES_SHOWN = 20  # unknown values named per column, at most
VALUE_LENGTH = 60  # characters of each, at most (the service's text, on one line)
VARIANT_MARK = "__v_"  # dlt's name of a column holding values of another type: `col__v_text`
COLUMNS_VARIABLE = "SOURCES__SIGNING__PRIVACY__COLUMNS"


@dataclass
class SchemaChanges:
    """What one load found changed in the service's shape (each list sorted, names as
    `table.column`)."""

    new_tables: list[str] = field(default_factory=list)
    new_columns: list[str] = field(default_factory=list)
    variant_columns: list[str] = field(default_factory=list)
    unknown_values: dict[str, list[str]] = field(default_factory=dict)
    held_back: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(asdict(self).values())

    def to_record(self) -> dict[str, Any]:
        """The non-empty parts, for the run record and the JSON log."""
        return {name: value for name, value in asdict(self).items() if value}

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None) -> SchemaChanges:
        known = set(asdict(cls()))
        return cls(**{k: v for k, v in (record or {}).items() if k in known})

    def lines(self) -> list[str]:
        """One line per kind of change, for the summary, the drain's log and `status`."""
        lines = []
        if self.new_tables:
            lines.append(f"new nested tables from the service: {', '.join(self.new_tables)}")
        if self.new_columns:
            lines.append(f"new columns from the service: {', '.join(self.new_columns)}")
        if self.variant_columns:
            lines.append(
                "columns whose type changed (the new values are in these variant columns): "
                + ", ".join(self.variant_columns)
            )
        for column, values in sorted(self.unknown_values.items()):
            lines.append(
                f"{column} has values the models do not know (the marts misfile them): "
                + ", ".join(values)
            )
        lines.extend(held_back_line(column) for column in self.held_back)
        return lines


def held_back_line(column: str) -> str:
    """What a held-back column is, and the setting that releases it."""
    resource = "contacts" if column.startswith("contacts") else "shipments"
    section = ".".join(SECTIONS)
    return (
        f"{column} is new from the service and held back by the privacy policy (not loaded): "
        f'name it under [{section}.columns] ("{column}" = "hash", or one of '
        f"{', '.join(ACTIONS)}; {COLUMNS_VARIABLE} replaces that whole table), then "
        f"`signing-etl load --resources {resource} --full-refresh` loads its values"
    )


def catalog(client: SqlClient) -> dict[str, set[str]]:
    """The dataset's tables of rows (not dlt's or ours, `_`) with their columns."""
    return {t: c for t, c in columns_by_table(client).items() if not t.startswith("_")}


def find_changes(
    client: SqlClient,
    before: Mapping[str, set[str]],
    workspace_id: str,
    held_back: set[str],
) -> SchemaChanges:
    """The changes a load made to the warehouse's tables (`before`: `catalog` as it started),
    the unknown values in the workspace's rows, and the columns the policy held back."""
    after = catalog(client)
    changes = SchemaChanges(held_back=sorted(held_back))
    if before:  # else the first load: every table is new, and none is a change
        for table, columns in sorted(after.items()):
            if table not in before:
                if table not in TABLES and table != DELIVERIES_TABLE:
                    changes.new_tables.append(table)
                continue
            for column in sorted(columns - before[table]):
                if VARIANT_MARK in column:
                    changes.variant_columns.append(f"{table}.{column}")
                elif column not in TABLES.get(table, {}) and not column.startswith("_"):
                    changes.new_columns.append(f"{table}.{column}")
    changes.unknown_values = unknown_values(client, after, workspace_id)
    return changes


def unknown_values(
    client: SqlClient, tables: Mapping[str, set[str]], workspace_id: str
) -> dict[str, list[str]]:
    """The values of the workspace's rows that `KNOWN_VALUES` does not list, per column."""
    found: dict[str, list[str]] = {}
    for qualified, known in KNOWN_VALUES.items():
        table, _, column = qualified.partition(".")
        if column not in tables.get(table, set()) or "workspace_id" not in tables[table]:
            continue
        marks = ", ".join(["%s"] * len(known))
        rows = client.execute_sql(
            f"select distinct {column} from {client.make_qualified_table_name(table)} "
            f"where workspace_id = %s and {column} is not null and {column} not in ({marks}) "
            f"order by 1 limit {VALUES_SHOWN}",
            workspace_id,
            *known,
        )
        if rows:
            found[qualified] = [one_line(value, VALUE_LENGTH) for (value,) in rows]
    return found
