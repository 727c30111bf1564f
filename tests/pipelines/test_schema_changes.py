"""A service that changes under us, over real HTTP against a sandbox switched to send what the API
reference does not list (`new_personal_fields`, `new_values_and_types`): under `minimal` the new
fields of people are held back (none of their values on disk) and named with the setting that
releases them, and a released column's values come with the next full pass of its list; under
`keep` they load, and every change (new columns, a new nested table, a variant column, an
unknown status) is told in the load's JSON log, the run record, `status` (table and JSON), and
by the models' warn test.

The truth is what the sandbox serves: its new values read through its own API here.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import duckdb
import pytest

from sandbox import RunningSandbox
from tests.pipelines.test_privacy_changes import person_to_forget
from tests.support import SandboxFactory, admin, cli_env, client_for, describe, page_all, run_cli
from tests.support.postgres import PostgresServer
from tests.support.privacy import (
    KEEP_WITH_KEY,
    MINIMAL,
    duckdb_contents,
    found_in,
    postgres_contents,
    scan_files,
    scan_tables,
)

pytestmark = pytest.mark.slow  # a few loads each, one with the models

NEW_PERSONAL = {
    "contacts.address",
    "contacts.previous_emails",
    "shipments__recipients.mobile_number",
    "audit_events.actor__device",
    "audit_events.actor__location",
}


def new_values(running: RunningSandbox) -> dict[str, set[str]]:
    """The values of the new personal fields the sandbox serves now, per column."""
    found: dict[str, set[str]] = {column: set() for column in NEW_PERSONAL}
    with client_for(running) as api:
        for contact in page_all(api, "/contacts"):
            found["contacts.address"].add(contact["address"])
            found["contacts.previous_emails"].update(contact["previous_emails"])
        for shipment in page_all(api, "/shipments", include_archived="true"):
            for recipient in shipment["recipients"]:
                found["shipments__recipients.mobile_number"].add(recipient["mobile_number"])
            events = api.get(f"/shipments/{shipment['id']}/events", params={"limit": 500})
            for event in events.json()["data"]:
                found["audit_events.actor__device"].add(event["actor"]["device"])
                found["audit_events.actor__location"].add(event["actor"]["location"])
    assert all(found.values()), found
    return found


def served_statuses(running: RunningSandbox) -> set[str]:
    """The recipient statuses the sandbox serves now."""
    with client_for(running) as api:
        shipments = page_all(api, "/shipments", include_archived="true")
    return {r["status"] for s in shipments for r in s["recipients"]}


def cli(
    folder: Path, env: dict[str, str], *args: str, code: int = 0
) -> subprocess.CompletedProcess[str]:
    done = run_cli(list(args), cwd=folder, env=env, timeout=600)
    assert done.returncode == code, describe(done)
    return done


def summary_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON log's load summary of a one-workspace load."""
    entries = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    found: dict[str, Any] = next(e for e in entries if e["message"] == "load summary")
    return found


def status_json(folder: Path, env: dict[str, str], *place: str) -> dict[str, Any]:
    done = cli(folder, env, "status", *place, "--format", "json")
    document: dict[str, Any] = json.loads(done.stdout)
    (workspace,) = document["workspaces"]
    assert isinstance(workspace, dict)
    return workspace


def switch(running: RunningSandbox, **settings: bool) -> None:
    admin(running, "PATCH", "/config", dict(settings))


def test_new_personal_fields_are_held_back_under_minimal_until_released(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=40, seed=61)
    warehouse = tmp_path / "signing.duckdb"
    env = {**cli_env(running), **MINIMAL}
    load = ("--log-format", "json", "load", "--duckdb", str(warehouse), "--no-models")
    first = summary_of(cli(tmp_path, env, *load))
    assert "schema_changes" not in first or not first["schema_changes"], first

    switch(running, new_personal_fields=True)
    truth = new_values(running)
    held = cli(tmp_path, env, *load, "--full-refresh")
    changes = summary_of(held)["schema_changes"]
    assert set(changes["held_back"]) == NEW_PERSONAL, changes
    assert set(changes) == {"held_back"}, changes  # nothing new loaded, nothing else changed
    every = set().union(*truth.values())
    assert scan_tables(duckdb_contents(warehouse), every) == {}
    assert scan_files(tmp_path, every) == {}
    assert found_in(held.stdout + held.stderr, every) == set()

    status = status_json(tmp_path, env, "--duckdb", str(warehouse))
    listed = {each["column"]: each["release"] for each in status["schema_changes"]["held_back"]}
    assert set(listed) == NEW_PERSONAL, status["schema_changes"]
    for column, release in listed.items():  # the table to name it in, not the variable alone
        assert f'[sources.signing.privacy.columns] ("{column}" = "hash"' in release
    table = cli(tmp_path, env, "status", "--duckdb", str(warehouse)).stdout
    assert all(column in table for column in NEW_PERSONAL), table

    # Released: kept as it is; its values come with the next full pass of the contacts.
    released = {**env, "SOURCES__SIGNING__PRIVACY__COLUMNS": '{"contacts.address": "keep"}'}
    again = cli(tmp_path, released, *load, "--resources", "contacts", "--full-refresh")
    still = set(summary_of(again)["schema_changes"]["held_back"])
    assert still == {"contacts.previous_emails"}, describe(again)
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        addresses = {a for (a,) in connection.sql("select address from raw.contacts").fetchall()}
    assert addresses == truth["contacts.address"]
    others = every - truth["contacts.address"]
    assert scan_tables(duckdb_contents(warehouse), others) == {}


def test_schema_changes_under_keep_are_loaded_and_told_everywhere(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=40, seed=62)
    warehouse = tmp_path / "signing.duckdb"
    env = cli_env(running)
    cli(tmp_path, env, "load", "--duckdb", str(warehouse), "--no-models")
    switch(running, new_personal_fields=True, new_values_and_types=True)
    truth = new_values(running)
    unknown = served_statuses(running) - {"pending", "sent", "opened", "signed"}
    assert unknown == {"viewed"}  # the sandbox's recipients who had opened now `viewed`

    load = ("--log-format", "json", "load", "--duckdb", str(warehouse), "--full-refresh")
    done = cli(tmp_path, env, *load)
    changes = summary_of(done)["schema_changes"]
    assert set(changes["new_columns"]) == NEW_PERSONAL - {"contacts.previous_emails"}, changes
    assert changes["new_tables"] == ["contacts__previous_emails"], changes
    assert changes["variant_columns"] == ["shipments__recipients.view_count__v_text"], changes
    assert changes["unknown_values"] == {"shipments__recipients.status": ["viewed"]}, changes
    assert "held_back" not in changes, changes

    with duckdb.connect(str(warehouse), read_only=True) as connection:
        addresses = {a for (a,) in connection.sql("select address from raw.contacts").fetchall()}
        (recorded,) = connection.execute(
            "select schema_changes from raw._signing_runs order by started_at desc limit 1"
        ).fetchone() or (None,)
        misfiled = connection.execute(
            "select column_name, unknown_value from dbt_test__audit.assert_known_status_values"
        ).fetchall()
    assert addresses == truth["contacts.address"]
    assert json.loads(recorded) == changes
    assert misfiled == [("shipments__recipients.status", "viewed")]

    status = status_json(tmp_path, env, "--duckdb", str(warehouse))["schema_changes"]
    assert {k: status[k] for k in changes} == changes, status
    table = cli(tmp_path, env, "status", "--duckdb", str(warehouse)).stdout
    for name in [*changes["new_columns"], "contacts__previous_emails", "view_count__v_text"]:
        assert name in table, table
    assert "viewed" in table, table


def test_on_postgres_new_personal_fields_are_held_back_and_changes_told(
    make_sandbox: SandboxFactory, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=30, seed=63)
    database = postgres_server.create_database()
    env = {
        **cli_env(running),
        **MINIMAL,
        "DESTINATION__POSTGRES__CREDENTIALS": database.credentials,
    }
    load = ("--log-format", "json", "load", "--destination", "postgres", "--no-models")
    cli(tmp_path, env, *load)
    switch(running, new_personal_fields=True, new_values_and_types=True)
    truth = new_values(running)
    changes = summary_of(cli(tmp_path, env, *load, "--full-refresh"))["schema_changes"]
    assert set(changes["held_back"]) == NEW_PERSONAL, changes
    assert changes["variant_columns"] == ["shipments__recipients.view_count__v_text"], changes
    assert changes["unknown_values"] == {"shipments__recipients.status": ["viewed"]}, changes
    every = set().union(*truth.values())
    with closing(database.connect()) as connection:
        assert scan_tables(postgres_contents(connection), every) == {}
    assert scan_files(tmp_path, every) == {}
    status = status_json(tmp_path, env, "--destination", "postgres")["schema_changes"]
    assert {each["column"] for each in status["held_back"]} == NEW_PERSONAL, status


def added_values_of(running: RunningSandbox, contact: Any, slots: list[Any]) -> set[str]:
    """The values of the person's new fields the sandbox serves: their contact's address and
    former addresses, their mobile number as a recipient, the device and location of the
    events they acted in (each made of an id: no one else's)."""
    values: set[str] = set()
    with client_for(running) as api:
        served = api.get(f"/contacts/{contact.id}").json()["data"]
        values |= {served["address"], *served["previous_emails"]}
        for shipment, recipient in slots:
            body = api.get(f"/shipments/{shipment.id}").json()["data"]
            values |= {r["mobile_number"] for r in body["recipients"] if r["id"] == recipient.id}
            events = api.get(f"/shipments/{shipment.id}/events", params={"limit": 500})
            for event in events.json()["data"]:
                if event["recipient_id"] == recipient.id and event["actor"]["name"] == (
                    recipient.name
                ):
                    values |= {event["actor"]["device"], event["actor"]["location"]}
    return values


def test_forget_clears_the_fields_of_a_person_the_service_added_and_no_load_brings_them_back(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """Under `keep` the new fields load; `forget` clears them with the person's known ones
    (a column the service added, a list it added as a nested table), and neither the next
    load nor a full refresh brings them back while the service still holds the person."""
    running = make_sandbox(limits_enabled=False, shipments=40, seed=63)
    switch(running, new_personal_fields=True)
    contact, slots = person_to_forget(running.store)
    theirs = added_values_of(running, contact, slots)
    warehouse = tmp_path / "signing.duckdb"
    env = {**cli_env(running), **KEEP_WITH_KEY}
    load = ("load", "--duckdb", str(warehouse), "--no-models")
    cli(tmp_path, env, *load)
    loaded = scan_tables(duckdb_contents(warehouse), theirs)
    assert {"raw.contacts", "raw.contacts__previous_emails"} <= set(loaded), loaded
    assert {"raw.shipments__recipients", "raw.audit_events"} <= set(loaded), loaded

    forget = ("forget", "--email", contact.email, "--duckdb", str(warehouse), "--no-models")
    forgot = cli(tmp_path, env, *forget)
    assert found_in(forgot.stdout + forgot.stderr, theirs) == set()
    assert scan_tables(duckdb_contents(warehouse), theirs) == {}
    for extra in ((), ("--full-refresh",)):
        cli(tmp_path, env, *load, *extra)
        assert scan_tables(duckdb_contents(warehouse), theirs) == {}, extra
        assert scan_files(tmp_path, theirs) == {}, extra


def test_switching_keep_to_minimal_takes_what_the_service_added_from_the_rows_loaded(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """The new fields loaded under `keep` (columns, and a list as a nested table) leave the
    rows already there when the policy becomes one that holds them back, as they stay out of
    the rows loaded after: no value of theirs in the warehouse or its folders."""
    running = make_sandbox(limits_enabled=False, shipments=30, seed=64)
    switch(running, new_personal_fields=True)
    every = set().union(*new_values(running).values())
    warehouse = tmp_path / "signing.duckdb"
    load = ("--log-format", "json", "load", "--duckdb", str(warehouse), "--no-models")
    cli(tmp_path, {**cli_env(running), **KEEP_WITH_KEY}, *load)
    loaded = scan_tables(duckdb_contents(warehouse), every)
    assert {"raw.contacts__previous_emails", "raw.shipments__recipients"} <= set(loaded), loaded

    switched = cli(tmp_path, {**cli_env(running), **MINIMAL}, *load)

    assert scan_tables(duckdb_contents(warehouse), every) == {}
    assert scan_files(tmp_path, every) == {}
    assert "contacts__previous_emails dropped in " in switched.stderr, describe(switched)
    assert "shipments__recipients.mobile_number dropped in " in switched.stderr
