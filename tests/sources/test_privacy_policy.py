"""The privacy policy as the source reads and applies it: a policy it cannot apply fails in one
line before any request, and each column's action (refined per column) is what reaches the
warehouse, over real HTTP against a sandbox. The expected values are computed here from the
sandbox's store and the documented rules (HMAC-SHA256 of the trimmed, lower-cased address; an
e-mail masked to its first character and domain)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from pipelines.environment import environment_set
from pipelines.load.run import LoadOptions, load_incremental
from sandbox import RunningSandbox
from sources.signing import PERSONAL_COLUMNS
from sources.signing.privacy import PrivacyPolicy, preset_actions
from tests.support import cli_env, describe, error_lines, fast, pointed_at, run_cli, served
from tests.support.privacy import HASH_KEY, keyed, keyed_phone

PRIVACY = "SOURCES__SIGNING__PRIVACY__"


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"PRESET": "maximal"}, "privacy preset 'maximal' is unknown"),
        # Not a column of a person: a contact's may be one the service adds one day.
        ({"COLUMNS": '{"shipments.nots": "drop"}'}, "privacy column 'shipments.nots' is unknown"),
        ({"COLUMNS": '{"contacts.notes": "shred"}'}, "privacy action 'shred' for contacts.notes"),
        ({"COLUMNS": "notes=drop"}, "privacy columns must map `table.column` to an action"),
        ({"PRESET": "minimal"}, "no hash key is set: set SOURCES__SIGNING__PRIVACY__HASH_KEY"),
        ({"COLUMNS": '{"contacts.email": "hash"}'}, "hashes contacts.email but no hash key"),
        ({"PRESET": "minimal", "HASH_KEY": "short-secret"}, "use a random secret of at least 16"),
    ],
)
def test_a_policy_it_cannot_apply_fails_in_one_line_before_any_request(
    shared_sandbox: RunningSandbox, tmp_path: Path, settings: dict[str, str], said: str
) -> None:
    env = {**cli_env(shared_sandbox), **{PRIVACY + name: v for name, v in settings.items()}}
    requests = served(shared_sandbox)
    warehouse = tmp_path / "signing.duckdb"
    result = run_cli(["load", "--duckdb", str(warehouse), "--no-models"], cwd=tmp_path, env=env)
    assert result.returncode == 1, describe(result)
    lines = error_lines(result.stderr)
    assert len(lines) == 1, describe(result)
    assert said in lines[0]
    assert "Traceback" not in result.stderr
    assert "short-secret" not in result.stderr
    assert served(shared_sandbox) == requests  # nothing asked of the service
    assert not warehouse.exists()


def test_each_column_gets_its_action_and_refinements_override_the_preset(
    shared_sandbox: RunningSandbox, tmp_path: Path
) -> None:
    refined = {"contacts.email": "mask", "contacts.name": "keep", "contacts.company": "hash"}
    policy = {
        PRIVACY + "PRESET": "minimal",
        PRIVACY + "HASH_KEY": HASH_KEY,
        PRIVACY + "COLUMNS": json.dumps(refined),
    }
    warehouse = tmp_path / "signing.duckdb"
    with pointed_at(shared_sandbox), environment_set(policy):
        loaded = load_incremental(warehouse, LoadOptions(resources=("contacts",)), settings=fast())
    assert loaded.exit_code == 0, loaded.stopped
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        stored = {
            row[0]: row[1:]
            for row in connection.execute(
                "select id, email, name, phone, company, notes from raw.contacts"
            ).fetchall()
        }
    contacts = shared_sandbox.store.contacts.by_id
    assert stored.keys() == contacts.keys()
    for contact_id, (email, name, phone, company, notes) in stored.items():
        truth = contacts[contact_id]
        local, _, domain = truth.email.partition("@")
        assert email == f"{local[0]}***@{domain}"  # masked, as refined
        assert name == truth.name  # kept, as refined
        assert phone == (keyed_phone(truth.phone) if truth.phone else None)  # the preset
        assert company == (keyed(truth.company.strip()) if truth.company else None)
        assert notes is None  # the preset drops notes


def test_the_privacy_guide_lists_every_personal_column_with_its_action_under_each_preset() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "privacy.md").read_text()
    listed = {}
    for line in guide.splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        if len(cells) == 4 and cells[0] in PERSONAL_COLUMNS:
            listed[cells[0]] = (cells[2], cells[3])
    keep, minimal = preset_actions("keep"), preset_actions("minimal")
    assert listed == {column: (keep[column], minimal[column]) for column in PERSONAL_COLUMNS}


@pytest.mark.parametrize(
    ("table", "row", "held"),
    [
        # A shipment's owner sent as an object: dlt would make `owner__email` of it.
        (
            "shipments",
            {"id": "shp_1", "owner": {"email": "ann@example.org", "phone": "+44 20 7946 0000"}},
            {"shipments.owner__email", "shipments.owner__phone"},
        ),
        # An event's actor with new fields beside its known ones, and a recipient's new object.
        (
            "audit_events",
            {"id": "evt_1", "actor": {"name": "Ann", "device": "iPhone of Ann"}},
            {"audit_events.actor__device"},
        ),
        (
            "shipments__recipients",
            {"id": "rcp_1", "contact": {"email": "ann@example.org"}},
            {"shipments__recipients.contact"},
        ),
    ],
)
def test_a_new_field_of_a_person_is_held_back_also_inside_an_object(
    table: str, row: dict[str, object], held: set[str]
) -> None:
    policy = PrivacyPolicy("minimal", preset_actions("minimal"), key=HASH_KEY.encode())
    kept = policy.protect(table, json.loads(json.dumps(row)))
    assert policy.held_back == held
    assert "ann@example.org" not in json.dumps(kept)
    assert "+44 20 7946 0000" not in json.dumps(kept)
    assert "iPhone of Ann" not in json.dumps(kept)
    assert kept["id"] == row["id"]
