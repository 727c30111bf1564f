"""Changing the privacy policy on a loaded DuckDB warehouse, and erasing one person, over real
HTTP against a sandbox, through the CLI as a user runs it.

The truth is the sandbox's store: its people, their addresses (and their documented keyed
hashes, computed here), the shipments they received and the audit events they acted in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.warehouse import Warehouse
from sandbox import Recipient, RunningSandbox, SandboxConfig, Shipment
from tests.support import START_MS, admin, cli_env, client_for, describe, error_lines, run_cli
from tests.support.privacy import (
    KEEP_WITH_KEY,
    MINIMAL,
    duckdb_contents,
    found_in,
    keyed_email,
    keyed_name,
    personal_data,
    scan_files,
    scan_tables,
)
from tests.support.truth import differences

# About four minutes: each test loads, builds the models and rewrites the warehouse.
pytestmark = pytest.mark.slow

HEX = set("0123456789abcdef")


@pytest.fixture(scope="module")
def running() -> Iterator[RunningSandbox]:
    config = SandboxConfig(seed=37, shipments=80, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(config) as sandbox:
        yield sandbox


def cli(running: RunningSandbox, folder: Path, *args: str, **privacy: str) -> Any:
    """`signing-etl ARGS` against the sandbox with the privacy settings given."""
    return run_cli(list(args), cwd=folder, env={**cli_env(running), **privacy}, timeout=400)


def loaded(running: RunningSandbox, folder: Path, **privacy: str) -> Path:
    warehouse = folder / "signing.duckdb"
    result = cli(running, folder, "load", "--duckdb", str(warehouse), **privacy)
    assert result.returncode == 0, describe(result)
    return warehouse


def rows(warehouse: Path, query: str, *parameters: Any) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        return connection.execute(query, list(parameters)).fetchall()


def snapshots_of(contents: dict[str, str]) -> dict[str, str]:
    """The tables of dbt's snapshots among a warehouse's contents."""
    return {table: text for table, text in contents.items() if table.startswith("snapshots.")}


def test_switching_keep_to_minimal_leaves_no_plaintext_in_any_column_it_hides(
    running: RunningSandbox, tmp_path: Path
) -> None:
    warehouse = loaded(running, tmp_path)
    personal = personal_data(running.store)
    history = snapshots_of(duckdb_contents(warehouse))
    assert len(history) == 3
    assert scan_tables(duckdb_contents(warehouse), personal.emails)  # plaintext under keep
    assert set(scan_tables(history, personal.emails)) == set(history)  # in every snapshot
    versions = version_counts(warehouse)
    switched = cli(running, tmp_path, "load", "--duckdb", str(warehouse), **MINIMAL)
    assert switched.returncode == 0, describe(switched)
    assert "the privacy policy now applies to the rows loaded before" in switched.stderr
    assert "the privacy policy now applies to the models' history too" in switched.stderr
    contents = duckdb_contents(warehouse)
    assert snapshots_of(contents).keys() == history.keys()
    assert scan_tables(contents, personal.all()) == {}  # raw_staging and snapshots too
    # The snapshots' values are the rewritten ones, so the build saw no new version.
    after = version_counts(warehouse)
    assert after == versions
    assert found_in(warehouse.read_bytes().decode("latin-1"), personal.emails) == set()
    place = Warehouse.at(warehouse)
    assert scan_files(place.pipelines_dir, personal.all()) == {}
    assert scan_files(place.dbt_dir, personal.all()) == {}
    store = running.store
    contacts = {c.id: keyed_email(c.email) for c in store.contacts.by_id.values()}
    assert dict(rows(warehouse, "select id, email from raw.contacts")) == contacts
    slots = {(s.id, r.id): r for s in store.shipments.by_id.values() for r in s.recipients}
    for shipment_id, recipient_id, email, name in rows(
        warehouse, "select shipment_id, id, email, name from raw.shipments__recipients"
    ):
        truth = slots[shipment_id, recipient_id]
        assert (email, name) == (keyed_email(truth.email), keyed_name(truth.name))
    owners = rows(warehouse, "select distinct owner_email from raw.shipments")
    assert {email for (email,) in owners} <= {keyed_email(s.owner_email) for s in slots_of(store)}
    (ips,) = rows(warehouse, "select count(actor__ip) from raw.audit_events")
    assert ips == (0,)
    for shipment_id, recipient_id, email, name in rows(
        warehouse,
        "select shipment_id, recipient_id, recipient_email, recipient_name "
        "from snapshots.snp_signing__recipients",
    ):
        truth = slots[shipment_id, recipient_id]
        assert (email, name) == (keyed_email(truth.email), keyed_name(truth.name))
    query = "select contact_id, contact_email from snapshots.snp_signing__contacts"
    assert dict(rows(warehouse, query)) == contacts
    status = cli(running, tmp_path, "status", "--duckdb", str(warehouse), **MINIMAL)
    assert "Privacy policy: minimal, hash key " in status.stdout
    # Later loads add versions beside the rewritten ones, and dbt's tests (one id per
    # version) pass.
    admin(running, "POST", "/advance", {"hours": 48})
    again = cli(running, tmp_path, "load", "--duckdb", str(warehouse), **MINIMAL)
    assert again.returncode == 0, describe(again)
    later = version_counts(warehouse)
    assert sum(later.values()) > sum(versions.values())
    assert scan_tables(duckdb_contents(warehouse), personal_data(store).all()) == {}


def version_counts(warehouse: Path) -> dict[str, int]:
    """The versions each dbt snapshot holds."""
    return {table: len(versions) for table, versions in rows_by_id(warehouse, "snapshots").items()}


def slots_of(store: Any) -> list[Shipment]:
    return list(store.shipments.by_id.values())


def test_a_change_that_needs_the_data_again_stops_in_one_line_until_a_full_refresh(
    running: RunningSandbox, tmp_path: Path
) -> None:
    warehouse = loaded(running, tmp_path, **MINIMAL)
    before = duckdb_contents(warehouse)
    back = cli(running, tmp_path, "load", "--duckdb", str(warehouse), **KEEP_WITH_KEY)
    assert back.returncode == 1, describe(back)
    (line,) = error_lines(back.stderr)
    assert "signing-etl load --full-refresh" in line
    assert "Traceback" not in back.stderr
    after = duckdb_contents(warehouse)
    refusal = after.pop("raw._signing_runs")  # the refused run is recorded, for `status`
    assert after == {table: rows for table, rows in before.items() if table != "raw._signing_runs"}
    assert (
        refusal.count('"outcome": "failed"')
        == before["raw._signing_runs"].count('"outcome": "failed"') + 1
    )
    assert "signing-etl load --full-refresh" in refusal
    other_key = {**MINIMAL, "SOURCES__SIGNING__PRIVACY__HASH_KEY": "another-key-0123456789"}
    rekeyed = cli(running, tmp_path, "load", "--duckdb", str(warehouse), **other_key)
    assert rekeyed.returncode == 1
    assert "hashed with key" in error_lines(rekeyed.stderr)[0]
    args = ("load", "--duckdb", str(warehouse), "--full-refresh")
    refreshed = cli(running, tmp_path, *args, **KEEP_WITH_KEY)
    assert refreshed.returncode == 0, describe(refreshed)  # dbt's tests pass
    assert differences(warehouse, running.store) == {}  # plaintext again, all of it
    # A hash cannot be made plaintext: the versions of the minimal days lost their hashes,
    # beside the versions the reload brought.
    personal = personal_data(running.store)
    history = snapshots_of(duckdb_contents(warehouse))
    assert scan_tables(history, {keyed_email(email) for email in personal.emails}) == {}
    assert scan_tables(history, {keyed_name(name) for name in personal.names}) == {}
    assert set(scan_tables(history, personal.emails)) == set(history)
    # Reloading under minimal again brings the plaintext versions under it.
    again = cli(running, tmp_path, *args, **MINIMAL)
    assert again.returncode == 0, describe(again)
    assert scan_tables(duckdb_contents(warehouse), personal.all()) == {}


def person_to_forget(store: Any) -> tuple[Any, list[tuple[Shipment, Recipient]]]:
    """A contact who received several shipments and signed one, whose name no one else has."""
    people: dict[str, set[str]] = {}
    for contact in store.contacts.by_id.values():
        people.setdefault(contact.name, set()).add(contact.email)
    for shipment in slots_of(store):
        for recipient in shipment.recipients:
            people.setdefault(recipient.name, set()).add(recipient.email)
    for contact in sorted(store.contacts.by_id.values(), key=lambda c: c.id):
        slots = [(s, r) for s in slots_of(store) for r in s.recipients if r.email == contact.email]
        signed = any(r.signed_at for _, r in slots)
        if len(slots) >= 2 and signed and people[contact.name] == {contact.email}:
            return contact, slots
    raise AssertionError("no contact fits")


def their_values(contact: Any, slots: list[tuple[Shipment, Recipient]], store: Any) -> set[str]:
    """What says who the person is: address (as given and hashed), name, phone, and the IP
    addresses of the events they acted in (those no one else's events have)."""
    acted = [e for s, r in slots for e in s.audit_events() if _acted(e, r)]
    others = {
        e["actor"]["ip"]
        for s in slots_of(store)
        for e in s.audit_events()
        if e["recipient_id"] not in {r.id for _, r in slots}
    }
    values = {contact.email, keyed_email(contact.email), contact.name, keyed_name(contact.name)}
    values |= {e["actor"]["ip"] for e in acted} - others
    return values | ({contact.phone} if contact.phone else set())


def _acted(event: dict[str, Any], recipient: Recipient) -> bool:
    return bool(event["recipient_id"] == recipient.id and event["actor"]["name"] == recipient.name)


def rows_by_id(warehouse: Path, schema: str = "raw") -> dict[str, dict[str, dict[str, Any]]]:
    """Every data table's rows (column to value) of `schema` by their id: dlt's row id in
    `raw`, dbt's version id in `snapshots`."""
    key = "dbt_scd_id" if schema == "snapshots" else "_dlt_id"
    found = {}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        tables = connection.execute(
            "select table_name from information_schema.tables where table_schema = ? "
            "and not starts_with(table_name, '_')",
            [schema],
        ).fetchall()
        for (table,) in tables:
            cursor = connection.execute(f'select * from "{schema}"."{table}"')
            names = [column[0] for column in cursor.description or []]
            by_id = (dict(zip(names, row, strict=True)) for row in cursor.fetchall())
            found[table] = {row[key]: row for row in by_id}
    return found


def changed_rows(
    before: dict[str, dict[str, dict[str, Any]]], after: dict[str, dict[str, dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """Per table, the rows (as they were) that changed or went."""
    return {
        table: [row for i, row in rows.items() if after.get(table, {}).get(i) != row]
        for table, rows in before.items()
    }


def printed_counts(stdout: str) -> dict[str, int]:
    """The rows per table the table `forget` printed says it changed."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in stdout.splitlines()]
    return {
        row[0]: int(row[1].replace(",", ""))
        for row in cells
        if len(row) == 2 and row[1][:1].isdigit()
    }


# The columns of dbt's snapshots that copy a personal column, which forget clears.
VERSION_COLUMNS = {
    "snp_signing__contacts": {
        "contact_name",
        "contact_email",
        "contact_phone",
        "contact_company",
        "job_position",
        "notes",
    },
    "snp_signing__recipients": {
        "recipient_name",
        "recipient_email",
        "recipient_phone",
        "recipient_company",
        "delivery_error",
    },
    "snp_signing__shipments": {"owner_name", "owner_email"},
}


def history_cleared(
    before: dict[str, dict[str, dict[str, Any]]],
    after: dict[str, dict[str, dict[str, Any]]],
    contact: Any,
    slots: list[tuple[Shipment, Recipient]],
) -> dict[str, int]:
    """Check that forget kept every version of every snapshot, and that the person's (found by
    the sandbox's ids: their contact, their places as a recipient, the shipments they sent)
    lost their personal values and nothing else; their versions per snapshot."""
    sent = {s.id for s, _ in slots if s.owner_email.strip().lower() == contact.email.lower()}
    theirs = {
        "snp_signing__contacts": ("contact_id", {contact.id}),
        "snp_signing__recipients": ("recipient_id", {r.id for _, r in slots}),
        "snp_signing__shipments": ("shipment_id", sent),
    }
    counts: dict[str, int] = {}
    for table, versions in before.items():
        assert after[table].keys() == versions.keys(), table  # no version gone, none added
        column, ids = theirs[table]
        personal = VERSION_COLUMNS[table]
        for version_id, was in versions.items():
            now = after[table][version_id]
            if was[column] in ids:
                counts[f"snapshots.{table}"] = counts.get(f"snapshots.{table}", 0) + 1
                assert {c: now[c] for c in personal} == dict.fromkeys(personal)
            else:
                assert {c: now[c] for c in personal} == {c: was[c] for c in personal}
            # The contact is gone from raw: the build after forget ends its last version.
            kept = set(now) - personal - ({"dbt_valid_to"} if column == "contact_id" else set())
            assert {c: now[c] for c in kept} == {c: was[c] for c in kept}
    assert counts.get("snapshots.snp_signing__recipients") == len(slots)
    return counts


def test_forget_clears_one_person_everywhere_and_no_later_load_brings_them_back(
    running: RunningSandbox, tmp_path: Path
) -> None:
    warehouse = loaded(running, tmp_path, **KEEP_WITH_KEY)
    store = running.store
    contact, slots = person_to_forget(store)
    theirs = their_values(contact, slots, store)
    before, history = rows_by_id(warehouse), rows_by_id(warehouse, "snapshots")
    assert scan_tables(snapshots_of(duckdb_contents(warehouse)), theirs)  # in the history too
    address = f"  {contact.email.upper()} "
    forgot = cli(
        running, tmp_path, "forget", "--email", address, "--duckdb", str(warehouse), **KEEP_WITH_KEY
    )
    assert forgot.returncode == 0, describe(forgot)
    assert found_in(forgot.stdout + forgot.stderr, theirs) == set()
    changed = changed_rows(before, rows_by_id(warehouse))
    keys = {(s.id, r.id) for s, r in slots}
    acted = {e["id"] for s, r in slots for e in s.audit_events() if _acted(e, r)}
    # The person's rows changed or went, and no one else's.
    assert [row["id"] for row in changed["contacts"]] == [contact.id]
    for nested in ("contacts__custom", "contacts__group_ids"):
        assert {row["contact_id"] for row in changed[nested]} <= {contact.id}
    assert len(changed["contacts__custom"]) == len(contact.custom)
    assert {(row["shipment_id"], row["id"]) for row in changed["shipments__recipients"]} == keys
    forms = {(row["shipment_id"], row["recipient_id"]) for row in changed["shipment_fields"]}
    assert forms
    assert forms <= keys
    assert {row["id"] for row in changed["audit_events"]} == acted
    unchanged = set(changed) - {"contacts", "contacts__custom", "contacts__group_ids"}
    unchanged -= {"shipments__recipients", "shipment_fields", "audit_events"}
    assert all(not changed[table] for table in unchanged), changed
    cleared = history_cleared(history, rows_by_id(warehouse, "snapshots"), contact, slots)
    assert printed_counts(forgot.stdout) == {
        **{t: len(r) for t, r in changed.items() if r},
        **cleared,
    }
    contents = duckdb_contents(warehouse)
    record = contents.pop("raw._signing_erasures")  # the erasure, as a keyed hash
    assert found_in(record, theirs) == {keyed_email(contact.email)}
    assert scan_tables(contents, theirs) == {}  # the marts rebuilt, dlt's staging emptied
    assert found_in(warehouse.read_bytes().decode("latin-1"), {contact.email}) == set()
    assert scan_files(Warehouse.at(warehouse).dbt_dir, theirs) == {}
    # The service still holds them and sends them one more shipment, which they open.
    with client_for(running) as api:
        sent = api.post(
            "/shipments",
            json={"document_id": slots[0][0].document_id, "contact_ids": [contact.id]},
        )
        assert sent.status_code == 201, sent.text
    admin(running, "POST", "/advance", {"hours": 72})
    for extra in ((), ("--full-refresh",)):
        again = cli(running, tmp_path, "load", "--duckdb", str(warehouse), *extra, **KEEP_WITH_KEY)
        assert again.returncode == 0, describe(again)
        contents = duckdb_contents(warehouse)
        assert found_in(contents.pop("raw._signing_erasures"), theirs) == {
            keyed_email(contact.email)
        }
        assert scan_tables(contents, theirs) == {}
        assert scan_files(Warehouse.at(warehouse).pipelines_dir, theirs) == {}
    assert rows(warehouse, "select count(*) from raw.contacts where id = ?", contact.id) == [(0,)]
    recipients = sum(len(s.recipients) for s in slots_of(store))
    assert rows(warehouse, "select count(*) from raw.shipments__recipients") == [(recipients,)]


def test_marts_dropped_by_forget_without_a_build_fail_the_check_until_one(
    running: RunningSandbox, tmp_path: Path
) -> None:
    """`forget --no-models` drops the marts with the person's rows; until a build makes them
    again, `status --check` says the marts lag, so no analyst finds them gone unannounced."""
    warehouse = loaded(running, tmp_path, **KEEP_WITH_KEY)
    check = ("status", "--duckdb", str(warehouse), "--check")
    assert cli(running, tmp_path, *check, **KEEP_WITH_KEY).returncode == 0
    contact, _ = person_to_forget(running.store)
    forget = ("forget", "--email", contact.email, "--duckdb", str(warehouse), "--no-models")
    forgot = cli(running, tmp_path, *forget, **KEEP_WITH_KEY)
    assert forgot.returncode == 0, describe(forgot)
    assert rows(warehouse, "select count(*) from duckdb_tables() where schema_name = 'marts'") == [
        (0,)
    ]

    lagging = cli(running, tmp_path, *check, **KEEP_WITH_KEY)
    assert lagging.returncode == 1, describe(lagging)
    assert [line for line in error_lines(lagging.stderr) if "marts were dropped" in line]

    built = cli(running, tmp_path, "models", "--duckdb", str(warehouse), **KEEP_WITH_KEY)
    assert built.returncode == 0, describe(built)
    assert cli(running, tmp_path, *check, **KEEP_WITH_KEY).returncode == 0
