"""Every column the API reference names exists in `raw`, with its type, from the first load.

dlt leaves out a column whose values are all null (it cannot infer a type) and warns that it
"did not receive any data". The source declares every column (`sources/signing/columns.py`);
these tests load a sandbox whose nullable fields are all null and check the warehouse.

The expected columns come from two places: `sandbox/openapi.yaml` (the machine-readable
reference, independent of the source's code) for the columns and their type families, and
`columns.py` for the declared types. The sandbox's own records are the expected values.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from pipelines.load.run import load_incremental
from sandbox import RunningSandbox
from sources.signing.columns import TABLES
from tests.support import SandboxFactory, client_for, differences, fast, pointed_at

OPENAPI = Path(__file__).resolve().parents[2] / "sandbox" / "openapi.yaml"
NO_DATA_WARNING = "did not receive any data"

# DuckDB's name of each dlt data type (information_schema.columns.data_type).
DUCKDB_TYPES = {
    "text": "VARCHAR",
    "bigint": "BIGINT",
    "double": "DOUBLE",
    "bool": "BOOLEAN",
    "timestamp": "TIMESTAMP WITH TIME ZONE",
    "json": "JSON",
}

# The column a nested table (`parent__list`) links its rows to its parent by.
LINK_COLUMNS = {"documents": "document_id", "shipments": "shipment_id", "contacts": "contact_id"}

Spec = dict[str, Any]
Tables = dict[str, dict[str, str]]


# ------------------------------------------------------------- expected columns from OpenAPI
def _resolve(spec: Spec, schema: Spec) -> Spec:
    """`schema` with its `$ref` followed and its `allOf` parts merged into one object."""
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = {
            **spec["components"]["schemas"][name],
            **{k: v for k, v in schema.items() if k != "$ref"},
        }
    if "allOf" in schema:
        merged: Spec = {"properties": {}}
        for part in schema["allOf"]:
            merged["properties"].update(_resolve(spec, part).get("properties", {}))
        return merged
    return schema


def _types(schema: Spec) -> set[str]:
    declared = schema.get("type", [])
    return ({declared} if isinstance(declared, str) else set(declared)) - {"null"}


def _family(spec: Spec, schema: Spec) -> str:
    """The dlt type an OpenAPI scalar (or free-form value) loads as."""
    schema = _resolve(spec, schema)
    types = _types(schema)
    if types == {"string"}:
        return "timestamp" if schema.get("format") == "date-time" else "text"
    if types == {"integer"}:
        return "bigint"
    if types == {"number"}:
        return "double"
    if types == {"boolean"}:
        return "bool"
    return "json"


def _properties(spec: Spec, schema: Spec) -> dict[str, Spec]:
    return {name: _resolve(spec, p) for name, p in _resolve(spec, schema)["properties"].items()}


def _row_table(spec: Spec, schema: Spec, table: str) -> Tables:
    """The tables one API object lands in with max_table_nesting=1: scalars are columns,
    objects with listed fields are flattened (`object__field`), lists become the nested table
    `table__list` (scalars as `value`), and string maps become key/value rows."""
    tables: Tables = {table: {"workspace_id": "text"}}
    for name, prop in _properties(spec, schema).items():
        types = _types(prop)
        if "array" in types:
            items = _resolve(spec, prop["items"])
            nested = f"{table}__{name}"
            if "object" in _types(items):
                tables.update(_row_table(spec, items, nested))
            else:
                tables[nested] = {"value": _family(spec, items), "workspace_id": "text"}
            tables[nested][LINK_COLUMNS[table]] = "text"
        elif "object" in types and "properties" in prop:
            for field, sub in _properties(spec, prop).items():
                tables[table][f"{name}__{field}"] = _family(spec, sub)
        elif "object" in types:
            value = _family(spec, prop.get("additionalProperties", {}))
            nested = f"{table}__{name}"
            tables[nested] = {"key": "text", "value": value, "workspace_id": "text"}
            tables[nested][LINK_COLUMNS[table]] = "text"
        else:
            tables[table][name] = _family(spec, prop)
    return tables


def _schema(spec: Spec, name: str) -> Spec:
    schema: Spec = spec["components"]["schemas"][name]
    return schema


def reference_tables() -> Tables:
    """Every raw table's columns and types as `sandbox/openapi.yaml` describes its records."""
    spec: Spec = yaml.safe_load(OPENAPI.read_text())
    me = _properties(spec, _schema(spec, "WorkspaceContext"))
    workspace = _row_table(spec, me.pop("workspace"), "workspaces")["workspaces"]
    workspace.update({name: _family(spec, prop) for name, prop in me.items()})

    tables: Tables = {"workspaces": workspace}
    tables.update(_row_table(spec, _schema(spec, "DocumentDetail"), "documents"))
    tables.update(_row_table(spec, _schema(spec, "Shipment"), "shipments"))
    tables.update(_row_table(spec, _schema(spec, "Contact"), "contacts"))
    tables.update(_row_table(spec, _schema(spec, "Webhook"), "webhooks"))
    tables.update(_row_table(spec, _schema(spec, "AuditEvent"), "audit_events"))
    tables["audit_events"]["shipment_id"] = "text"

    # GET /shipments/{id}/fields: one row per shipment, recipient and filled-in field; the
    # recipient entry's fields carry a `recipient_` prefix, `value` is text (JSON for objects).
    content = _properties(spec, _schema(spec, "ShipmentFields"))
    entry = _properties(spec, content.pop("data")["items"])
    filled = _properties(spec, entry.pop("fields")["items"])
    fields = {name: _family(spec, prop) for name, prop in content.items()}
    fields.update(
        {
            name if name.startswith("recipient_") else f"recipient_{name}": _family(spec, prop)
            for name, prop in entry.items()
            if name != "placeholders"
        }
    )
    fields["placeholders"] = _family(spec, entry["placeholders"])
    fields.update({name: _family(spec, prop) for name, prop in filled.items()})
    fields["value"] = "text"
    fields["workspace_id"] = "text"
    tables["shipment_fields"] = fields
    return tables


# ------------------------------------------------------------- helpers
@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "warehouse" / "signing.duckdb"


@pytest.fixture
def dlt_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Records of dlt's logger, which does not propagate to the root logger caplog watches."""
    dlt_logger = logging.getLogger("dlt")
    dlt_logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        dlt_logger.removeHandler(caplog.handler)


def no_data_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if NO_DATA_WARNING in r.getMessage()]


def query(warehouse: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return connection.execute(sql, params or []).fetchall()


def raw_columns(warehouse: Path) -> dict[str, dict[str, str]]:
    """Table -> column -> DuckDB type, for every table of `raw`."""
    found: dict[str, dict[str, str]] = {}
    for table, column, data_type in query(
        warehouse,
        "select table_name, column_name, data_type from information_schema.columns "
        "where table_schema = 'raw'",
    ):
        found.setdefault(table, {})[column] = data_type
    return found


def mismatches(
    expected: Mapping[str, Mapping[str, str]], found: dict[str, dict[str, str]]
) -> list[str]:
    """Expected columns missing from `raw` or of another type, one line each."""
    problems = []
    for table, columns in sorted(expected.items()):
        for column, family in sorted(columns.items()):
            actual = found.get(table, {}).get(column)
            if actual != DUCKDB_TYPES[family]:
                problems.append(f"{table}.{column}: want {DUCKDB_TYPES[family]}, got {actual}")
    return problems


def subscribe(running: RunningSandbox) -> None:
    """A fresh subscription: never delivered, so `last_delivered_at` and `last_error` are null."""
    with client_for(running) as client:
        response = client.post(
            "/webhooks",
            json={"event": "inquiry.answered", "target_url": "https://hooks.example.com/x"},
        )
    assert response.status_code == 201, response.text


def null_every_nullable_field(running: RunningSandbox, *, document_fields: bool) -> None:
    """Set every field the reference allows to be null to null in the sandbox's records (the
    document fields' nullable fields only with `document_fields`)."""
    store = running.store
    with store.lock:
        for document in store.documents.by_id.values():
            document.folder_id = None
            if document_fields:
                document.fields = tuple(
                    dataclasses.replace(f, external_id=None, assigned_recipient_index=None)
                    for f in document.fields
                )
        for shipment in store.shipments.by_id.values():
            shipment.folder_id = None
            shipment.archived_at = None
            shipment.revoked_at = None
            shipment.document_fields = tuple(
                dataclasses.replace(f, external_id=None) for f in shipment.document_fields
            )
            for recipient in shipment.recipients:
                recipient.phone = None
                recipient.company = None
                recipient.last_error = None
                recipient.sent_at = None
                recipient.signed_at = None
                recipient.last_viewed_at = None
        for contact in store.contacts.by_id.values():
            contact.phone = None
            contact.company = None
            contact.position = None
            contact.notes = None


def load(running: RunningSandbox, warehouse: Path) -> None:
    with pointed_at(running):
        result = load_incremental(warehouse, settings=fast())
    assert result.stopped is None


# ------------------------------------------------------------- tests
def test_reference_tables_come_out_of_the_openapi_document() -> None:
    """The independent expectation is not empty or trivial: the parser finds the tables and
    the flattened and nested shapes the reference implies."""
    tables = reference_tables()
    assert {"workspaces", "documents", "shipments", "contacts", "webhooks"} <= set(tables)
    assert tables["documents"]["theme__id"] == "text"
    assert tables["documents__placeholders"]["value"] == "text"
    assert tables["shipments__recipients"]["last_viewed_at"] == "timestamp"
    assert tables["contacts__custom"] == {
        "key": "text",
        "value": "text",
        "workspace_id": "text",
        "contact_id": "text",
    }
    assert tables["audit_events"]["actor__ip"] == "text"
    assert tables["shipment_fields"]["placeholders"] == "json"
    assert "secret" not in tables["webhooks"]
    assert tables["workspaces"]["key_name"] == "text"


def test_first_load_has_every_reference_column_even_all_null(
    make_sandbox: SandboxFactory, warehouse: Path, dlt_warnings: pytest.LogCaptureFixture
) -> None:
    running = make_sandbox(shipments=80, limits_enabled=False)
    subscribe(running)
    null_every_nullable_field(running, document_fields=False)

    load(running, warehouse)

    found = raw_columns(warehouse)
    # The premise: these columns got nothing but nulls in this load.
    for table, column in [
        ("documents", "folder_id"),
        ("shipments", "folder_id"),
        ("shipments__recipients", "last_error"),
        ("shipments__recipients", "phone"),
        ("contacts", "notes"),
        ("contacts", "position"),
        ("shipment_fields", "external_id"),
        ("webhooks", "last_delivered_at"),
        ("webhooks", "last_error"),
    ]:
        assert table in found, f"raw.{table} was not created"
        if column in found[table]:
            rows, filled = query(warehouse, f'select count(*), count("{column}") from raw.{table}')[
                0
            ]
            assert rows > 0
            assert filled == 0, f"raw.{table}.{column} should hold only nulls here"

    # (a) every column the reference names, with its type family; and every declared one.
    assert mismatches(reference_tables(), found) == []
    assert mismatches(TABLES, found) == []
    # (b) dlt had a type for every column.
    assert no_data_warnings(dlt_warnings) == []
    # (c) declaring the columns changed no value: the raw tables equal the sandbox.
    assert differences(warehouse, running.store) == {}


def test_declared_columns_keep_the_loaded_values(
    make_sandbox: SandboxFactory, warehouse: Path
) -> None:
    """Objects stay flattened or JSON as before; values equal the sandbox's."""
    running = make_sandbox(shipments=40, limits_enabled=False)
    load(running, warehouse)
    store = running.store
    with store.lock:
        themes = {(d.id, d.theme_id) for d in store.documents.by_id.values()}
        placeholders = {s.id: s.placeholders for s in store.shipments.by_id.values()}
        folders = {(d.id, d.folder_id) for d in store.documents.by_id.values()}
        actors = {
            (e["id"], e["actor"]["name"], e["actor"]["ip"])
            for s in store.shipments.by_id.values()
            for e in s.audit_events()
        }

    assert set(query(warehouse, "select id, theme__id from raw.documents")) == themes
    assert set(query(warehouse, "select id, folder_id from raw.documents")) == folders
    assert (
        set(query(warehouse, "select id, actor__name, actor__ip from raw.audit_events")) == actors
    )
    loaded = query(warehouse, "select distinct shipment_id, placeholders from raw.shipment_fields")
    assert loaded
    for shipment_id, text in loaded:
        assert json.loads(text) == placeholders[shipment_id]
    # No object was declared as a column of its own: they stay flattened.
    found = raw_columns(warehouse)
    assert "theme" not in found["documents"]
    assert "actor" not in found["audit_events"]


def test_document_field_columns_exist_even_all_null(
    make_sandbox: SandboxFactory, warehouse: Path, dlt_warnings: pytest.LogCaptureFixture
) -> None:
    running = make_sandbox(shipments=20, limits_enabled=False)
    null_every_nullable_field(running, document_fields=True)

    load(running, warehouse)

    found = raw_columns(warehouse)
    expected = {"documents__fields": reference_tables()["documents__fields"]}
    assert mismatches(expected, found) == []
    assert no_data_warnings(dlt_warnings) == []
