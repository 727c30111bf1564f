"""The `minimal` privacy policy end to end on DuckDB, over real HTTP against a sandbox.

One sandbox is loaded twice through the CLI as a user runs it (a first load with JSON logs, a
full refresh with text logs, `status`, `report`), under `minimal`, and once through the library
under `keep`. The truth is the sandbox's own store: every e-mail, name, phone, IP address and
typed-in value it holds, and the documented keyed hash (HMAC-SHA256) computed here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import duckdb
import pytest

from pipelines.load.run import load_incremental
from pipelines.modeling.build import build_models
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox, SandboxConfig
from tests.support import START_MS, cli_env, describe, fast, pointed_at, run_cli
from tests.support.privacy import (
    COMPARED_MARTS,
    HASH_KEY,
    MINIMAL,
    PERSONAL_MART_COLUMNS,
    duckdb_contents,
    found_in,
    keyed_email,
    keyed_name,
    personal_data,
    scan_files,
    scan_tables,
)

pytestmark = pytest.mark.slow  # loads and builds under each policy

# Mart columns that carry a personal column through (hashed or dropped under `minimal`); every
# other column, counts and durations among them, must not change with the policy.


@dataclass
class Loaded:
    running: RunningSandbox
    folder: Path
    keep: Path  # the same sandbox under `keep`, through the library
    minimal: Path  # under `minimal`, through the CLI
    runs: list[CompletedProcess[str]]

    @property
    def output(self) -> str:
        return "\n".join(run.stdout + run.stderr for run in self.runs)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    config = SandboxConfig(seed=29, shipments=80, start_ms=START_MS, limits_enabled=False)
    folder = tmp_path_factory.mktemp("privacy")
    with RunningSandbox(config) as running:
        keep = folder / "keep" / "signing.duckdb"
        with pointed_at(running):
            assert load_incremental(keep, settings=fast()).exit_code == 0
        assert build_models(keep).success
        minimal = folder / "minimal" / "signing.duckdb"
        env = {**cli_env(running), **MINIMAL}
        runs = []
        for args in (
            ["--log-format", "json", "load", "--duckdb", str(minimal)],
            ["load", "--duckdb", str(minimal), "--full-refresh"],
            ["status", "--duckdb", str(minimal)],
            ["report", "--duckdb", str(minimal), "--out", str(folder / "reports")],
        ):
            runs.append(run_cli(args, cwd=folder, env=env, timeout=400))
            assert runs[-1].returncode == 0, describe(runs[-1])
        yield Loaded(running, folder, keep, minimal, runs)


def test_minimal_leaves_no_personal_value_in_files_warehouse_logs_or_report(
    loaded: Loaded,
) -> None:
    personal = personal_data(loaded.running.store)
    needles = personal.all() | {HASH_KEY}
    assert len(personal.emails) > 50
    assert personal.ips
    assert personal.phones
    assert personal.texts
    # The scan finds what is there: the same sandbox under `keep` holds all of it.
    under_keep = scan_tables(duckdb_contents(loaded.keep), needles)
    assert personal.emails <= set().union(*under_keep.values())
    place = Warehouse.at(loaded.minimal)
    assert list(place.pipelines_dir.rglob("*.parquet")) or list(place.pipelines_dir.rglob("*.gz"))
    assert scan_files(place.pipelines_dir, needles) == {}  # dlt's extract, load files, state
    assert scan_tables(duckdb_contents(loaded.minimal), needles) == {}  # every table, _dlt_*
    assert found_in(loaded.minimal.read_bytes().decode("latin-1"), personal.emails) == set()
    assert (place.dbt_dir / "target" / "manifest.json").exists()
    assert scan_files(place.dbt_dir, needles) == {}  # dbt's target folder and logs
    reports = list((loaded.folder / "reports").glob("*.html"))
    assert reports
    assert scan_files(loaded.folder / "reports", needles) == {}
    assert '"level"' in loaded.runs[0].stderr
    assert " INFO " in loaded.runs[1].stderr
    assert found_in(loaded.output, needles) == set()  # both log formats, status, report


def test_minimal_drops_every_typed_in_value_and_keeps_payment_choices(loaded: Loaded) -> None:
    with duckdb.connect(str(loaded.minimal), read_only=True) as connection:
        kinds = connection.execute(
            "select type, count(*), count(value), count(placeholders) "
            "from raw.shipment_fields group by type"
        ).fetchall()
        dropped = connection.execute(
            "select count(actor__ip), count(*) from raw.audit_events union all "
            "select count(notes), count(*) from raw.contacts union all "
            "select count(value), count(*) from raw.contacts__custom"
        ).fetchall()
    by_type = {kind: (rows, values, placeholders) for kind, rows, values, placeholders in kinds}
    assert by_type["text"][0] > 0
    assert by_type["text"][1:] == (0, 0)
    assert by_type["payment"][1] > 0  # a payment's variant is no typed-in text
    assert all(count == 0 and rows > 0 for count, rows in dropped)


def _marts(warehouse: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Each mart's rows without its personal columns, sorted."""
    found = {}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        for mart in COMPARED_MARTS:
            cursor = connection.execute(f"select * from marts.{mart}")
            names = [column[0] for column in cursor.description or []]
            kept = [i for i, name in enumerate(names) if name not in PERSONAL_MART_COLUMNS]
            rows = [tuple(row[i] for i in kept) for row in cursor.fetchall()]
            found[mart] = sorted(rows, key=repr)
    return found


def test_the_marts_under_minimal_equal_the_marts_under_keep(loaded: Loaded) -> None:
    under_keep, under_minimal = _marts(loaded.keep), _marts(loaded.minimal)
    for mart in COMPARED_MARTS:
        assert under_keep[mart], mart
        assert under_minimal[mart] == under_keep[mart], mart


def test_one_person_hashes_alike_in_contacts_recipients_and_forms(loaded: Loaded) -> None:
    store = loaded.running.store
    contacts = {c.email: c for c in store.contacts.by_id.values()}
    slots = {(s.id, r.id): r for s in store.shipments.by_id.values() for r in s.recipients}
    with duckdb.connect(str(loaded.minimal), read_only=True) as connection:
        stored_contacts = dict(connection.execute("select id, email from raw.contacts").fetchall())
        recipients = connection.execute(
            "select shipment_id, id, email, name from raw.shipments__recipients"
        ).fetchall()
        forms = connection.execute(
            "select distinct shipment_id, recipient_id, recipient_email from raw.shipment_fields"
        ).fetchall()
        matched = dict(
            connection.execute(
                "select shipment_id || '/' || recipient_id, contact_id from marts.fct_recipients"
            ).fetchall()
        )
    for contact in contacts.values():
        assert stored_contacts[contact.id] == keyed_email(contact.email)
    for shipment_id, recipient_id, email, name in recipients:
        truth = slots[shipment_id, recipient_id]
        assert (email, name) == (keyed_email(truth.email), keyed_name(truth.name))
    for shipment_id, recipient_id, email in forms:
        assert email == keyed_email(slots[shipment_id, recipient_id].email)
    # The models join recipients to contacts on the e-mail column: on the hashes as well.
    joined = {
        f"{shipment_id}/{recipient_id}": contacts[r.email].id
        for (shipment_id, recipient_id), r in slots.items()
        if r.email in contacts and f"{shipment_id}/{recipient_id}" in matched
    }
    assert len(joined) > 20
    assert {slot: matched[slot] for slot in joined} == joined


def test_status_shows_the_policy_in_force(loaded: Loaded) -> None:
    status = loaded.runs[2].stdout
    (line,) = [line for line in status.splitlines() if line.startswith("Privacy policy")]
    assert line.startswith("Privacy policy: minimal, hash key ")
    assert HASH_KEY not in status
