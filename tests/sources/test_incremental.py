"""Incremental loads of the signing source into DuckDB, checked against the sandbox's store.

Every test runs the real pipeline (`load_incremental`) over loopback HTTP against its own
sandbox and into its own DuckDB file under `tmp_path`. The expected side always comes from the
sandbox's records (`tests/support/truth.py` or the store read directly), never from what the
pipeline computed.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.load.run import LoadOptions, LoadResult, load_incremental
from pipelines.warehouse import Warehouse
from sandbox import JSON, Contact, Recipient, RunningSandbox
from tests.support import (
    SandboxFactory,
    admin,
    client_for,
    differences,
    duplicate_keys,
    fast,
    pointed_at,
)
from tests.support.truth import _rows as truth_rows
from tests.support.truth import actual, compare

LIST_PAGE_SIZE = 200  # the source's default page size, which test 6's bound is based on
PAGE_OVERLAP = 4  # records shared by consecutive pages (the bound of test 6 allows for them)


# ---------------------------------------------------------------------- helpers
@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A DuckDB file in its own folder, so dlt's working folder lands beside it."""
    return tmp_path / "warehouse" / "signing.duckdb"


def load(
    running: RunningSandbox,
    warehouse: Path,
    options: LoadOptions | None = None,
    page_size: int | None = None,
) -> LoadResult:
    """One incremental run of the pipeline against `running`, paced for a limit-free sandbox."""
    with pointed_at(running):
        settings = fast() if page_size is None else replace(fast(), page_size=page_size)
        return load_incremental(warehouse, options, settings=settings)


def query(warehouse: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return connection.execute(sql, params or []).fetchall()


def ids_in(warehouse: Path, table: str) -> set[str]:
    return {row[0] for row in query(warehouse, f"select id from raw.{table}")}


def column_types(warehouse: Path, table: str) -> dict[str, str]:
    rows = query(
        warehouse,
        "select column_name, data_type from information_schema.columns "
        "where table_schema = 'raw' and table_name = ?",
        [table],
    )
    return {row[0]: row[1] for row in rows}


def data_tables(warehouse: Path) -> list[str]:
    """The raw tables that hold the service's data (not dlt's or the run log)."""
    rows = query(
        warehouse,
        "select table_name from information_schema.tables where table_schema = 'raw'",
    )
    return sorted(r[0] for r in rows if not r[0].startswith("_"))


def subscribe(running: RunningSandbox, event: str = "inquiry.answered") -> JSON:
    """Create a webhook subscription (an event the sandbox's activity never fires, so that its
    delivery counters stay still) and return it, secret included."""
    with client_for(running) as client:
        response = client.post(
            "/webhooks", json={"event": event, "target_url": "https://hooks.example.com/signing"}
        )
    assert response.status_code == 201, response.text
    hook: JSON = response.json()["data"]
    return hook


def shipment_snapshot(running: RunningSandbox) -> dict[str, JSON]:
    """Every shipment as the API shows it, read from the store under its lock."""
    store = running.store
    with store.lock:
        return {s.id: s.to_json() for s in store.shipments.by_id.values()}


# ---------------------------------------------------------------------- 1. first load
@pytest.mark.slow
def test_first_load_equals_the_sandbox_with_types_and_workspace(
    make_sandbox: SandboxFactory, warehouse: Path
) -> None:
    # 100 shipments hold dotted custom keys and filled-in payments aplenty (45 and 34).
    running = make_sandbox(shipments=100, limits_enabled=False)
    hook = subscribe(running)
    store = running.store

    result = load(running, warehouse)

    assert result.stopped is None
    assert differences(warehouse, store) == {}
    assert duplicate_keys(warehouse) == {}
    assert hook["id"] in ids_in(warehouse, "webhooks")

    # Custom property keys keep their dots, as `contacts__custom.key` rows.
    dotted = {(c.id, k) for c in store.contacts.by_id.values() for k in c.custom if "." in k}
    assert dotted, "the sandbox's contacts should have dotted custom keys"
    loaded_keys = set(
        query(
            warehouse,
            "select c.id, k.key from raw.contacts__custom k "
            "join raw.contacts c on k._dlt_parent_id = c._dlt_id",
        )
    )
    assert dotted <= loaded_keys

    # A payment value is JSON text with its variantId.
    payments = query(
        warehouse,
        "select shipment_id, recipient_id, field_id, value from raw.shipment_fields "
        "where type = 'payment' and value is not null",
    )
    assert payments, "the sandbox's data should have filled-in payment fields"
    shipment_id, recipient_id, field_id, text = payments[0]
    parsed = json.loads(text)
    assert isinstance(parsed, dict)
    assert "variantId" in parsed
    body = store.shipments.by_id[shipment_id].filled_fields()
    stored = next(
        f["value"]
        for entry in body["data"]
        if entry["recipient_id"] == recipient_id
        for f in entry["fields"]
        if f["field_id"] == field_id
    )
    assert parsed == stored

    # Column types.
    timestamp, boolean = "TIMESTAMP WITH TIME ZONE", "BOOLEAN"
    expected_types = {
        ("shipments", "created_at"): timestamp,
        ("shipments", "expires_at"): timestamp,
        ("shipments__recipients", "signed_at"): timestamp,
        ("shipments__recipients", "sent_at"): timestamp,
        ("audit_events", "at"): timestamp,
        ("contacts", "updated_at"): timestamp,
        ("documents", "updated_at"): timestamp,
        ("webhooks", "created_at"): timestamp,
        ("shipments", "sealed"): boolean,
        ("shipments", "final_pdf_ready"): boolean,
        ("webhooks", "is_active"): boolean,
    }
    found_types = {
        (table, column): column_types(warehouse, table).get(column)
        for table, column in expected_types
    }
    assert found_types == expected_types

    # Every row of every data table, root or nested, carries the workspace's id.
    workspace_id = store.workspace.id
    tables = data_tables(warehouse)
    assert {"shipments__recipients", "contacts__custom", "documents__fields"} <= set(tables)
    problems: dict[str, str] = {}
    for table in tables:
        if "workspace_id" not in column_types(warehouse, table):
            problems[table] = "no workspace_id column"
            continue
        ((wrong,),) = query(
            warehouse,
            f"select count(*) from raw.{table} where workspace_id is distinct from ?",
            [workspace_id],
        )
        if wrong:
            problems[table] = f"{wrong} rows with another or no workspace_id"
    assert problems == {}


# ---------------------------------------------------------------------- 2. second load
@pytest.mark.slow
def test_second_load_fetches_children_only_for_changed_shipments(
    make_sandbox: SandboxFactory, warehouse: Path
) -> None:
    running = make_sandbox(shipments=300, limits_enabled=False)
    load(running, warehouse)
    assert differences(warehouse, running.store) == {}

    before = shipment_snapshot(running)
    admin(running, "POST", "/advance", {"days": 2})
    after = shipment_snapshot(running)
    changed = {i for i, body in after.items() if before.get(i) != body}
    new = set(after) - set(before)
    assert changed, "two days of activity should change some shipments"
    assert new, "two days of activity should create some shipments"

    result = load(running, warehouse)

    assert differences(warehouse, running.store) == {}
    assert duplicate_keys(warehouse) == {}
    # No slack: the advance stamps every change at or after the sandbox time when it ran, which
    # is later than the first run's start (its cursor is that start minus the lag), so every
    # changed shipment is listed; an unchanged shipment that the list returns again (within the
    # lag) has the same content and needs no child request.
    by_endpoint = result.stats.by_endpoint
    assert by_endpoint["/shipments/{id}/events"] == len(changed)
    assert by_endpoint["/shipments/{id}/fields"] == len(changed)
    assert result.rows.get("shipments") == len(changed)


# ---------------------------------------------------------------------- 3. nothing changed
def test_a_run_with_nothing_changed_loads_no_row_and_lists_once(
    make_sandbox: SandboxFactory, warehouse: Path
) -> None:
    running = make_sandbox(shipments=100, limits_enabled=False)
    subscribe(running)  # a workspace has subscriptions; one that does not change is no change
    load(running, warehouse)
    admin(running, "POST", "/advance", {"days": 2})
    load(running, warehouse)

    result = load(running, warehouse)

    assert differences(warehouse, running.store) == {}
    # No entity row is loaded, and each list endpoint (documents, shipments, contacts) gets
    # one request for its changes and one (`limit=1`) whose total says nothing was deleted,
    # plus /me and /webhooks.
    assert (result.rows, dict(result.stats.by_endpoint)) == (
        {},
        {"/me": 1, "/documents": 2, "/shipments": 2, "/contacts": 2, "/webhooks": 1},
    )
    assert result.stats.requests == 8


# ---------------------------------------------------------------------- 4. activity while paging
@pytest.mark.slow
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_activity_while_paging_loses_nothing(
    make_sandbox: SandboxFactory, warehouse: Path, order: str
) -> None:
    running = make_sandbox(shipments=400, limits_enabled=False, order=order)
    store = running.store
    with store.lock:
        shipments_before = set(store.shipments.by_id)
        contacts_before = set(store.contacts.by_id)
    snapshot = shipment_snapshot(running)

    admin(running, "POST", "/activity", {"speed": 600, "touches_per_second": 50})
    try:
        result = load(running, warehouse, page_size=20)
    finally:
        admin(running, "POST", "/activity", {"running": False})

    # The scenario did happen: many pages were read and records changed meanwhile.
    assert result.stats.by_endpoint["/shipments"] >= len(shipments_before) // 20
    moved = sum(1 for i, body in shipment_snapshot(running).items() if snapshot.get(i) != body)
    assert moved > 0

    assert shipments_before - ids_in(warehouse, "shipments") == set()
    assert contacts_before - ids_in(warehouse, "contacts") == set()
    assert duplicate_keys(warehouse) == {}

    load(running, warehouse, page_size=20)
    assert differences(warehouse, store) == {}
    assert duplicate_keys(warehouse) == {}


# ---------------------------------------------------------------------- 5. webhooks
def test_deleted_webhook_disappears_and_secret_is_never_loaded(
    make_sandbox: SandboxFactory, warehouse: Path
) -> None:
    running = make_sandbox(shipments=100, limits_enabled=False)
    kept, dropped = subscribe(running), subscribe(running, "contact.created")
    secrets = {kept["secret"], dropped["secret"]}
    assert all(isinstance(s, str) and s for s in secrets)

    load(running, warehouse)
    assert ids_in(warehouse, "webhooks") == {kept["id"], dropped["id"]}

    def secret_cells() -> list[tuple[Any, ...]]:
        rows = query(warehouse, "select * from raw.webhooks")
        return [row for row in rows if any(s in str(cell) for cell in row for s in secrets)]

    assert secret_cells() == []
    assert not [c for c in column_types(warehouse, "webhooks") if "secret" in c]

    with client_for(running) as client:
        assert client.delete(f"/webhooks/{dropped['id']}").status_code == 200
    load(running, warehouse)

    assert ids_in(warehouse, "webhooks") == {kept["id"]}
    assert differences(warehouse, running.store) == {}
    assert secret_cells() == []


# ---------------------------------------------------------------------- 6. bulk updates
@pytest.mark.slow
def test_bulk_update_with_one_shared_timestamp(
    make_sandbox: SandboxFactory, warehouse: Path
) -> None:
    running = make_sandbox(shipments=40_000, limits_enabled=False)
    assert len(running.store.contacts) == 10_000
    # Contacts only: 40,000 shipments mean 80,000 child requests and ~700,000 rows that say
    # nothing about contacts (a full first load ran past 6 minutes here).
    load(running, warehouse, options=LoadOptions(resources=("contacts",)))
    assert _contact_differences(warehouse, running) == {}

    touched = admin(running, "POST", "/touch", {"entity": "contacts", "count": 10_000})["touched"]
    assert touched == 10_000
    result = load(running, warehouse, options=LoadOptions(resources=("contacts",)))

    assert _contact_differences(warehouse, running) == {}
    assert duplicate_keys(warehouse) == {}
    assert result.rows.get("contacts") == touched
    # Every touched contact needs reading once: pages of 200 that share 4 records with the
    # previous one, plus two requests of slack (a last short page, a closing check). When the
    # bulk update falls in the same second as the run's first answer, the `Date` header (whole
    # seconds) cannot tell it from a change made while the pass paged, and one catch-up pass
    # reads it again; never more: that pass finds nothing new and ends the catching up.
    one_pass = math.ceil(touched / (LIST_PAGE_SIZE - PAGE_OVERLAP)) + 2
    bound = 2 * one_pass
    assert result.stats.by_endpoint["/contacts"] <= bound


def _contact_differences(warehouse: Path, running: RunningSandbox) -> dict[str, Any]:
    """`differences` restricted to the tables the contacts resource fills. Their expected rows
    depend on the contacts alone, so only those are made: the rows of 40,000 shipments (over
    600,000) would be made and sorted only to be dropped."""
    store = running.store
    with store.lock:
        contacts = list(store.contacts.by_id.values())
        wanted = truth_rows(store, [], contacts, [], live=True)
    return {
        table: report
        for table, report in compare(wanted, actual(warehouse)).items()
        if table.startswith("contacts")
    }


# ---------------------------------------------------------------------- 7. schema evolution
def test_new_field_and_surprising_type_do_not_stop_the_load(
    make_sandbox: SandboxFactory, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = make_sandbox(shipments=150, limits_enabled=False)
    store = running.store
    load(running, warehouse)
    assert "loyalty_tier" not in column_types(warehouse, "contacts")

    # The service starts sending a new contact field ...
    contact_json = Contact.to_json

    def with_loyalty_tier(self: Contact) -> JSON:
        return {**contact_json(self), "loyalty_tier": "gold"}

    monkeypatch.setattr(Contact, "to_json", with_loyalty_tier)
    # ... and one recipient's view count as a string.
    admin(running, "POST", "/touch", {"entity": "shipments", "count": 3})
    with store.lock:
        touched_at = max(s.updated_at for s in store.shipments.by_id.values())
        target = next(
            s.recipients[0].id for s in store.shipments.by_id.values() if s.updated_at == touched_at
        )
    recipient_json = Recipient.to_json

    def with_odd_view_count(self: Recipient) -> JSON:
        body = recipient_json(self)
        if self.id == target:
            body["view_count"] = "many"
        return body

    monkeypatch.setattr(Recipient, "to_json", with_odd_view_count)
    admin(running, "POST", "/touch", {"entity": "contacts", "count": 5})
    with store.lock:
        newest = max(c.updated_at for c in store.contacts.by_id.values())
        edited = {c.id for c in store.contacts.by_id.values() if c.updated_at == newest}
    assert len(edited) == 5

    result = load(running, warehouse)

    assert result.stopped is None
    assert result.load_info is not None
    assert not result.load_info.has_failed_jobs
    assert "loyalty_tier" in column_types(warehouse, "contacts")
    gold = {
        r[0] for r in query(warehouse, "select id from raw.contacts where loyalty_tier = 'gold'")
    }
    assert edited <= gold

    variants = [c for c in column_types(warehouse, "shipments__recipients") if "view_count__v" in c]
    assert variants, "the string view count should land in a variant column"
    odd = query(
        warehouse,
        f"select {', '.join(variants)} from raw.shipments__recipients where id = ?",
        [target],
    )
    assert len(odd) == 1
    assert "many" in odd[0]
    assert duplicate_keys(warehouse) == {}


# ---------------------------------------------------------------------- 8. secrets
def test_api_key_appears_in_no_file_and_no_log(
    make_sandbox: SandboxFactory,
    warehouse: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running = make_sandbox(shipments=100, limits_enabled=False)
    key = running.api_key
    caplog.set_level(logging.DEBUG)
    # dlt logs through its own logger ("dlt"), which does not propagate to the root logger:
    # hand it caplog's handler at DEBUG too (the setting applies if dlt sets it up in this run).
    monkeypatch.setenv("RUNTIME__LOG_LEVEL", "DEBUG")
    dlt_logger = logging.getLogger("dlt")
    level = dlt_logger.level
    dlt_logger.setLevel(logging.DEBUG)
    dlt_logger.addHandler(caplog.handler)
    try:
        load(running, warehouse)
        admin(running, "POST", "/advance", {"days": 1})
        load(running, warehouse)
    finally:
        dlt_logger.removeHandler(caplog.handler)
        dlt_logger.setLevel(level)

    files = [p for p in warehouse.parent.rglob("*") if p.is_file()]
    assert warehouse in files
    assert any(Warehouse.at(warehouse).pipelines_dir in p.parents for p in files)
    assert [str(p) for p in files if key.encode() in p.read_bytes()] == []

    loggers = {r.name.split(".")[0] for r in caplog.records}
    assert {"dlt", "httpx"} <= loggers, f"DEBUG logs should have been captured, got {loggers}"
    logged = caplog.text + "".join(
        f"{r.getMessage()} {r.args!r} {r.__dict__!r}" for r in caplog.records
    )
    assert key not in logged
    out, err = capfd.readouterr()
    assert key not in out
    assert key not in err


# ---------------------------------------------------------------------- 9. --since
def test_since_starts_at_that_time_and_later_runs_continue(
    make_sandbox: SandboxFactory, warehouse: Path
) -> None:
    running = make_sandbox(shipments=150, limits_enabled=False)  # 50 contacts
    store = running.store
    with store.lock:
        stamps = sorted(c.updated_at for c in store.contacts.by_id.values())
    since_ms = stamps[len(stamps) // 2] // 1000 * 1000  # whole seconds: exact on both sides
    since = datetime.fromtimestamp(since_ms / 1000, UTC).isoformat().replace("+00:00", "Z")

    def contacts_since() -> set[str]:
        with store.lock:
            return {c.id for c in store.contacts.by_id.values() if c.updated_at >= since_ms}

    first = contacts_since()
    assert 0 < len(first) < len(store.contacts)
    with store.lock:
        shipments_since = {s.id for s in store.shipments.by_id.values() if s.updated_at >= since_ms}

    load(running, warehouse, options=LoadOptions(since=since))

    assert ids_in(warehouse, "contacts") == first
    assert ids_in(warehouse, "shipments") == shipments_since

    admin(running, "POST", "/touch", {"entity": "contacts", "count": 10})
    with store.lock:
        newest = max(c.updated_at for c in store.contacts.by_id.values())
        touched = {c.id for c in store.contacts.by_id.values() if c.updated_at == newest}
    assert len(touched) == 10
    result = load(running, warehouse)

    # The later run reads only what changed since the first: the touched contacts join, the
    # older unchanged ones stay out, and one page covers it (and one more request, whose
    # total says that nothing was deleted: the contacts older than --since are expected).
    assert ids_in(warehouse, "contacts") == first | touched
    assert result.stats.by_endpoint["/contacts"] == 2
    assert duplicate_keys(warehouse) == {}
    loaded = dict(query(warehouse, "select id, updated_at from raw.contacts"))
    with store.lock:
        for contact_id in touched:
            expected = store.contacts.by_id[contact_id].updated_at
            assert round(loaded[contact_id].timestamp() * 1000) == expected
