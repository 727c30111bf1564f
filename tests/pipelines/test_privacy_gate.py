"""The privacy policy on every path that writes rows into `raw`, over real HTTP against a sandbox
that sends its webhooks to the receiver as a user runs it (`signing-etl webhooks serve`), on a
DuckDB warehouse under the `minimal` preset: a drain writes under the warehouse's policy and its
erasures whatever the receiver's own settings are (the same, none at all, or those from before a
`load` changed the policy), and `forget` leaves the erased address nowhere on disk, dbt's
folder included, while later loads and drains that read the person's shipments bring nothing
of them back.

The truth is the sandbox's store: its people's names, addresses and phones, and their documented
keyed hashes computed here. "On disk" is every byte under the test's folder: the warehouse file,
dlt's and dbt's folders, the webhook inbox and the receiver's log.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import duckdb
import pytest

from sandbox import Contact, RunningSandbox
from tests.support import SandboxFactory, admin, cli_env, client_for, describe, run_cli
from tests.support.drains import drained_by
from tests.support.postgres import PostgresDatabase, PostgresServer
from tests.support.privacy import (
    HASH_KEY,
    KEEP_WITH_KEY,
    MINIMAL,
    duckdb_contents,
    found_in,
    keyed_email,
    keyed_name,
    keyed_phone,
    personal_data,
    postgres_contents,
    scan_files,
    scan_tables,
)
from tests.support.waiting import wait_until
from tests.support.webhooks import ServedReceiver, free_port, inbox_status, sender_done

# A few minutes: loads, a receiver draining, and (for forget) dbt builds.
pytestmark = pytest.mark.slow

DRAIN_SOON = ("--load-after", "0.2", "--load-within", "2")
KEY_SETTING = "SOURCES__SIGNING__PRIVACY__HASH_KEY"


class Hooked:
    """A warehouse in a test's folder (a DuckDB file, or a PostgreSQL database with
    `postgres`), subscribed to the sandbox's webhooks on a free port."""

    def __init__(
        self, running: RunningSandbox, folder: Path, postgres: PostgresDatabase | None = None
    ) -> None:
        self.running = running
        self.folder = folder
        self.warehouse = folder / "signing.duckdb"
        self.port = free_port()
        self.postgres = postgres
        self.place: tuple[str, ...] = ("--destination", "postgres") if postgres else ()

    def env(self, privacy: dict[str, str]) -> dict[str, str]:
        """The CLI's environment: the sandbox, the database if any, the privacy settings."""
        env = {**cli_env(self.running), **privacy}
        if self.postgres is not None:
            env["DESTINATION__POSTGRES__CREDENTIALS"] = self.postgres.credentials
        return env

    def cli(self, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        done: subprocess.CompletedProcess[str] = run_cli(
            [*args, *self.place] if args[0] != "webhooks" else list(args),
            cwd=self.folder,
            env=self.env(env),
            timeout=600,
        )
        return done

    def ok(self, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        done = self.cli(env, *args)
        assert done.returncode == 0, describe(done)
        return done

    def load(self, env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
        return self.ok(env, "load", "--duckdb", str(self.warehouse), *options)

    def subscribe(self) -> None:
        target = f"http://127.0.0.1:{self.port}"
        self.ok(
            {}, "webhooks", "subscribe", "--duckdb", str(self.warehouse), "--target-url", target
        )

    def receiver(self, env: dict[str, str]) -> ServedReceiver:
        """The receiver, started with `env` as its only privacy settings."""
        served = ServedReceiver(
            self.folder, self.warehouse, self.env(env), "--port", str(self.port), *DRAIN_SOON
        )
        served.args += self.place
        served.start()
        return served

    def drained(self, receiver: ServedReceiver) -> None:
        """Wait until every delivery the sender made was accepted and drained by `receiver`."""
        delivered = sender_done(self.running)["counts"]["delivered"]
        env = cli_env(self.running)
        drained_by(receiver, self.folder, self.warehouse, env, accepted=delivered)

    def rows(self, query: str, *parameters: Any) -> list[tuple[Any, ...]]:
        """What `query` (`?` for each parameter) finds in the warehouse."""
        if self.postgres is not None:
            with closing(self.postgres.connect()) as server, server.cursor() as cursor:
                cursor.execute(query.replace("?", "%s"), parameters)
                return [tuple(row) for row in cursor.fetchall()]
        with duckdb.connect(str(self.warehouse), read_only=True) as local:
            return list(local.execute(query, list(parameters)).fetchall())

    def contents(self) -> dict[str, str]:
        """Every table of the warehouse as text (`duckdb_contents`, `postgres_contents`)."""
        if self.postgres is not None:
            with closing(self.postgres.connect()) as connection:
                return postgres_contents(connection)
        return duckdb_contents(self.warehouse)


def new_people(running: RunningSandbox, tag: str, count: int = 3) -> list[tuple[str, Contact]]:
    """Contacts created and shipments sent to new recipients through the API (a webhook
    event each): (shipment id, the contact it went to) per person."""
    made = []
    with client_for(running) as api:
        document = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        for number in range(count):
            person = {
                "email": f"{tag}.{number}@hooks.example.org",
                "name": f"{tag.title()} Hookperson {number}",
                "phone": f"+49 30 5550{number:03d}",
                "notes": f"private note about {tag} {number}",
            }
            contact = api.post("/contacts", json=person)
            assert contact.status_code == 201, contact.text
            contact_id = contact.json()["data"]["id"]
            sent = api.post(
                "/shipments", json={"document_id": document, "contact_ids": [contact_id]}
            )
            assert sent.status_code == 201, sent.text
            made.append((sent.json()["data"]["id"], running.store.contacts.by_id[contact_id]))
    return made


def assert_hashed(hooked: Hooked, people: list[tuple[str, Contact]]) -> None:
    """The people's contacts and places as recipients are in `raw`, hashed as documented."""
    for shipment_id, contact in people:
        assert hooked.rows(
            "select email, name, phone, notes from raw.contacts where id = ?", contact.id
        ) == [(keyed_email(contact.email), keyed_name(contact.name), _phone(contact), None)]
        assert hooked.rows(
            "select email, name from raw.shipments__recipients where shipment_id = ?", shipment_id
        ) == [(keyed_email(contact.email), keyed_name(contact.name))]


def _phone(contact: Contact) -> str | None:
    return keyed_phone(contact.phone) if contact.phone else None


def assert_no_plaintext(hooked: Hooked) -> None:
    """None of the sandbox's personal values in any table, nor in any file of the folder."""
    personal = personal_data(hooked.running.store)
    assert scan_tables(hooked.contents(), personal.all()) == {}
    assert scan_files(hooked.folder, personal.all()) == {}


def test_a_drain_under_minimal_writes_hashes_only(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    hooked = Hooked(make_sandbox(limits_enabled=False, shipments=60, seed=43), tmp_path)
    hooked.load(MINIMAL, "--no-models")
    hooked.subscribe()
    receiver = hooked.receiver(MINIMAL)
    try:
        people = new_people(hooked.running, "minimal")
        hooked.drained(receiver)
    finally:
        receiver.stop()
    assert "drain completed" in receiver.log()
    assert_hashed(hooked, people)
    assert_no_plaintext(hooked)


def test_a_receiver_started_before_a_load_changed_the_policy_drains_under_the_new_one(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    hooked = Hooked(make_sandbox(limits_enabled=False, shipments=60, seed=44), tmp_path)
    hooked.load(KEEP_WITH_KEY, "--no-models")
    hooked.subscribe()
    receiver = hooked.receiver(KEEP_WITH_KEY)  # started under keep, and never restarted
    try:
        switched = hooked.load(MINIMAL, "--no-models")
        assert "the privacy policy now applies to the rows loaded before" in switched.stderr
        people = new_people(hooked.running, "switched")
        hooked.drained(receiver)
    finally:
        receiver.stop()
    log = receiver.log()
    assert "drain completed" in log
    assert "rows written under this warehouse's privacy policy (minimal" in log
    assert_hashed(hooked, people)
    # The marts and the report of what the drains brought: no plaintext there either.
    hooked.ok(MINIMAL, "models", "--duckdb", str(hooked.warehouse))
    reports = hooked.folder / "reports"
    hooked.ok(MINIMAL, "report", "--duckdb", str(hooked.warehouse), "--out", str(reports))
    assert list(reports.glob("*.html"))
    assert_no_plaintext(hooked)


def test_a_receiver_without_privacy_settings_stops_its_drains_in_one_line(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    hooked = Hooked(make_sandbox(limits_enabled=False, shipments=60, seed=45), tmp_path)
    hooked.load(MINIMAL, "--no-models")
    hooked.subscribe()
    receiver = hooked.receiver({})  # no preset, no hash key
    try:
        people = new_people(hooked.running, "unset")
        delivered = sender_done(hooked.running)["counts"]["delivered"]
        wait_until(lambda: "drain failed" in receiver.log(), 60, "a drain to fail")
    finally:
        receiver.stop()
    failed = [line for line in receiver.log().splitlines() if "drain failed" in line]
    assert failed
    assert all(KEY_SETTING in line and ".dlt/secrets.toml" in line for line in failed), failed
    assert "Traceback" not in receiver.log()
    waiting = inbox_status(hooked.folder, hooked.warehouse, cli_env(hooked.running))["default"]
    assert waiting["waiting"] == delivered  # nothing drained: the deliveries wait
    assert hooked.rows(
        "select count(*) from raw.contacts where id in (?, ?, ?)", *[c.id for _, c in people]
    ) == [(0,)]
    assert_no_plaintext(hooked)
    # The next load under the warehouse's policy takes what they named.
    hooked.load(MINIMAL, "--no-models")
    assert_hashed(hooked, people)
    assert_no_plaintext(hooked)


def person_to_forget(running: RunningSandbox) -> Contact:
    """A contact who received shipments, with a phone, whose name and address no one else
    has."""
    store = running.store
    names: dict[str, set[str]] = {}
    for contact in store.contacts.by_id.values():
        names.setdefault(contact.name, set()).add(contact.email.lower())
    for shipment in store.shipments.by_id.values():
        for recipient in shipment.recipients:
            names.setdefault(recipient.name, set()).add(recipient.email.lower())
    for contact in sorted(store.contacts.by_id.values(), key=lambda c: c.id):
        received = [
            r
            for s in store.shipments.by_id.values()
            for r in s.recipients
            if r.email.lower() == contact.email.lower()
        ]
        if received and contact.phone and names[contact.name] == {contact.email.lower()}:
            return contact
    raise AssertionError("no contact fits")


def their_values(contact: Contact) -> set[str]:
    """What says who the person is: the address as given, in capitals, hashed; the name as
    given and hashed; the phone as given and hashed."""
    address = contact.email
    return {
        address,
        address.lower(),
        address.upper(),
        keyed_email(address),
        contact.name,
        keyed_name(contact.name),
        str(contact.phone),
        keyed_phone(str(contact.phone)),
    }


def test_forget_leaves_the_address_nowhere_and_no_drain_or_load_brings_the_person_back(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=60, seed=46)
    hooked = Hooked(running, tmp_path)
    hooked.load(MINIMAL, "--no-models")
    hooked.subscribe()
    contact = person_to_forget(running)
    theirs = their_values(contact)
    assert scan_tables(duckdb_contents(hooked.warehouse), theirs)  # their hashes, before
    forget = ("forget", "--email", contact.email, "--duckdb", str(hooked.warehouse))
    forgot = hooked.ok(MINIMAL, *forget)
    assert found_in(forgot.stdout + forgot.stderr, theirs) == set()
    receiver = hooked.receiver(MINIMAL)  # started after the forget
    try:
        with client_for(running) as api:  # the service sends them two more shipments
            document = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
            for _ in range(2):
                again = {"document_id": document, "contact_ids": [contact.id]}
                assert api.post("/shipments", json=again).status_code == 201
            changed = {"email": contact.email, "notes": "called back about the contract"}
            assert api.post("/contacts", json=changed).status_code == 200
        admin(running, "POST", "/advance", {"hours": 48})  # they open and sign: events
        hooked.drained(receiver)
    finally:
        receiver.stop()
    assert "drain completed" in receiver.log()
    hooked.load(MINIMAL)  # a poll that reads their contact and shipments, then the models
    their_shipments = [
        s.id
        for s in running.store.shipments.by_id.values()
        if any(r.email.lower() == contact.email.lower() for r in s.recipients)
    ]
    assert len(their_shipments) >= 3
    # Their places stay, saying no longer who they were; their contact does not come back.
    assert hooked.rows("select count(*) from raw.contacts where id = ?", contact.id) == [(0,)]
    slots = [
        (s.id, r.id)
        for s in running.store.shipments.by_id.values()
        for r in s.recipients
        if r.email.lower() == contact.email.lower()
    ]
    for shipment_id, recipient_id in slots:
        assert hooked.rows(
            "select email, name, phone from raw.shipments__recipients "
            "where shipment_id = ? and id = ?",
            shipment_id,
            recipient_id,
        ) == [(None, None, None)]
    contents = duckdb_contents(hooked.warehouse)
    record = contents.pop("raw._signing_erasures")
    assert found_in(record, theirs) == {keyed_email(contact.email)}
    assert scan_tables(contents, theirs) == {}
    on_disk = scan_files(tmp_path, theirs)
    # Only the warehouse holds the erasure's own record (its keyed hash): the file analysts
    # open and the pipeline's working copy it is published from.
    assert set(on_disk) <= {"signing.duckdb", ".signing.work/signing.duckdb"}, on_disk
    assert all(found == {keyed_email(contact.email)} for found in on_disk.values()), on_disk
    dbt_dir = tmp_path / ".signing.dbt"
    assert (dbt_dir / "target" / "run_results.json").exists()
    assert (dbt_dir / "logs" / "dbt.log").exists()
    invocation = json.loads((dbt_dir / "target" / "run_results.json").read_text())
    assert invocation["args"]["invocation_command"] == "dbt build"


def test_forget_says_loads_now_need_the_key_and_a_load_without_it_is_a_recorded_failure(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=40, seed=47)
    hooked = Hooked(running, tmp_path)
    hooked.load({}, "--no-models")  # keep, and no hash key anywhere
    address = person_to_forget(running).email
    forgot = hooked.ok(
        KEEP_WITH_KEY,
        "forget",
        "--email",
        address,
        "--duckdb",
        str(hooked.warehouse),
        "--no-models",
    )
    said = " ".join(forgot.stderr.split())
    assert "from now on every load and webhook drain needs this hash key" in said
    assert KEY_SETTING in said
    assert ".dlt/secrets.toml" in said
    refused = hooked.cli({}, "load", "--duckdb", str(hooked.warehouse), "--no-models")
    assert refused.returncode == 1, describe(refused)
    reason = [line for line in refused.stderr.splitlines() if KEY_SETTING in line]
    assert len(reason) == 1, describe(refused)
    assert "Traceback" not in refused.stderr
    status = hooked.ok({}, "status", "--duckdb", str(hooked.warehouse), "--format", "json")
    assert KEY_SETTING in status.stdout
    assert '"failed"' in status.stdout
    # Where forget said to keep it: .dlt/secrets.toml in the folder the loads run in.
    secrets = tmp_path / ".dlt" / "secrets.toml"
    secrets.parent.mkdir()
    secrets.write_text(f'[sources.signing.privacy]\nhash_key = "{HASH_KEY}"\n')
    hooked.load({}, "--no-models")


def test_drains_into_postgresql_follow_the_policy_a_load_changed(
    postgres_server: PostgresServer, make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=60, seed=48)
    hooked = Hooked(running, tmp_path, postgres_server.create_database())
    hooked.load(KEEP_WITH_KEY, "--no-models")
    hooked.subscribe()
    receiver = hooked.receiver(KEEP_WITH_KEY)  # started under keep, and never restarted
    try:
        hooked.load(MINIMAL, "--no-models")
        people = new_people(running, "postgres")
        hooked.drained(receiver)
    finally:
        receiver.stop()
    assert "rows written under this warehouse's privacy policy (minimal" in receiver.log()
    assert_hashed(hooked, people)
    assert_no_plaintext(hooked)
