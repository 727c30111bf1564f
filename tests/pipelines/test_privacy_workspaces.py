"""The privacy policy and erasure across the workspaces of one warehouse, through the CLI, over
real HTTP against a sandbox serving two workspaces whose ids collide on purpose (the same
contact id names different people in each)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from sandbox import RunningSandbox, SandboxConfig
from tests.support import START_MS, describe, error_lines, run_cli, workspaces_env
from tests.support.built import copied_warehouse
from tests.support.privacy import (
    HASH_KEY,
    MINIMAL,
    duckdb_contents,
    keyed_email,
    personal_data,
    scan_tables,
)

pytestmark = pytest.mark.slow  # loads of several workspaces under policies


@pytest.fixture(scope="module")
def running() -> Iterator[RunningSandbox]:
    config = SandboxConfig(seed=51, shipments=40, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(2)) as sandbox:
        yield sandbox


def cli(running: RunningSandbox, folder: Path, *args: str, **privacy: str) -> Any:
    env = workspaces_env(running, {"east": running.api_keys[0], "west": running.api_keys[1]})
    return run_cli(list(args), cwd=folder, env={**env, **privacy}, timeout=400)


@pytest.fixture(scope="module")
def loaded_under_keep(running: RunningSandbox, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose warehouse `load --no-models` filled from both workspaces under keep (no
    privacy settings at all), loaded once: tests that start from it change a copy."""
    folder = tmp_path_factory.mktemp("loaded_under_keep")
    first = cli(running, folder, "load", "--duckdb", str(folder / "signing.duckdb"), "--no-models")
    assert first.returncode == 0, describe(first)
    return folder


def test_a_new_policy_reaches_every_workspace_when_one_of_them_loads(
    running: RunningSandbox, loaded_under_keep: Path, tmp_path: Path
) -> None:
    warehouse = str(copied_warehouse(loaded_under_keep, tmp_path))  # loaded under keep, returned 0
    only_east = ("load", "--duckdb", warehouse, "--no-models", "--workspace", "east")
    switched = cli(running, tmp_path, *only_east, **MINIMAL)
    assert switched.returncode == 0, describe(switched)
    people = personal_data(running.stores[0]).all() | personal_data(running.stores[1]).all()
    assert scan_tables(duckdb_contents(Path(warehouse)), people) == {}
    west = running.stores[1]
    with duckdb.connect(warehouse, read_only=True) as connection:
        stored = dict(
            connection.execute(
                "select id, email from raw.contacts where workspace_id = ?", [west.workspace.id]
            ).fetchall()
        )
        recorded = connection.execute(
            "select workspace_id, preset from raw._signing_privacy order by 1"
        ).fetchall()
    assert stored == {c.id: keyed_email(c.email) for c in west.contacts.by_id.values()}
    ids = sorted(store.workspace.id for store in running.stores)
    assert recorded == [(ids[0], "minimal"), (ids[1], "minimal")]


def test_forget_by_contact_id_names_its_workspace_and_erases_that_person_only(
    running: RunningSandbox, tmp_path: Path
) -> None:
    warehouse = str(tmp_path / "signing.duckdb")
    loaded = cli(running, tmp_path, "load", "--duckdb", warehouse, "--no-models", **MINIMAL)
    assert loaded.returncode == 0, describe(loaded)
    east, west = running.stores
    shared = sorted(set(east.contacts.by_id) & set(west.contacts.by_id))
    assert shared  # the same id, two people
    contact_id = shared[0]
    args = ("forget", "--contact-id", contact_id, "--duckdb", warehouse)
    ambiguous = cli(running, tmp_path, *args, **MINIMAL)
    assert ambiguous.returncode == 1
    assert "add --workspace" in error_lines(ambiguous.stderr)[0]
    in_east = (*args, "--workspace", east.workspace.id, "--no-models")
    forgot = cli(running, tmp_path, *in_east, **MINIMAL)
    assert forgot.returncode == 0, describe(forgot)
    gone, kept = east.contacts.by_id[contact_id], west.contacts.by_id[contact_id]
    with duckdb.connect(warehouse, read_only=True) as connection:
        left = connection.execute(
            "select workspace_id, email from raw.contacts where id = ?", [contact_id]
        ).fetchall()
        subjects = connection.execute("select subject from raw._signing_erasures").fetchall()
    assert left == [(west.workspace.id, keyed_email(kept.email))]
    assert subjects == [(keyed_email(gone.email),)]
    assert keyed_email(gone.email) not in "".join(
        text
        for table, text in duckdb_contents(Path(warehouse)).items()
        if table != "raw._signing_erasures"
    )
    # The workspace by the name `load` ran it under, in any case, as every command takes it;
    # a name of no workspace is said to be one, listing the names.
    unknown = cli(running, tmp_path, *args, "--workspace", "nowhere", "--no-models", **MINIMAL)
    assert unknown.returncode == 1, describe(unknown)
    (line,) = error_lines(unknown.stderr)
    assert "no workspace 'nowhere'" in line, line
    assert "as 'west'" in line, line
    by_name = cli(running, tmp_path, *args, "--workspace", "WEST", "--no-models", **MINIMAL)
    assert by_name.returncode == 0, describe(by_name)
    with duckdb.connect(warehouse, read_only=True) as connection:
        query = "select count(*) from raw.contacts where id = ?"
        assert connection.execute(query, [contact_id]).fetchall() == [(0,)]


def test_forget_without_a_hash_key_or_a_known_contact_fails_in_one_line(
    running: RunningSandbox, loaded_under_keep: Path, tmp_path: Path
) -> None:
    warehouse = str(copied_warehouse(loaded_under_keep, tmp_path))  # loaded under keep, returned 0
    for args, privacy, said, code in (
        (("--email", "someone@example.org"), {}, "SOURCES__SIGNING__PRIVACY__HASH_KEY", 1),
        (
            ("--contact-id", "ct_nobody"),
            {"SOURCES__SIGNING__PRIVACY__HASH_KEY": HASH_KEY},
            "no contact",
            1,
        ),
        ((), {}, "--email ADDRESS or --contact-id ID", 2),  # a usage error (was 1)
    ):
        refused = cli(running, tmp_path, "forget", *args, "--duckdb", warehouse, **privacy)
        assert refused.returncode == code, describe(refused)
        (line,) = error_lines(refused.stderr)
        assert said in line
        assert "Traceback" not in refused.stderr


def test_forget_of_an_address_no_row_holds_says_so_and_records_it_all_the_same(
    running: RunningSandbox, loaded_under_keep: Path, tmp_path: Path
) -> None:
    """A typo, or a person not loaded yet: the table says no row held them, a warning says to
    check the address, and the erasure is recorded so that no later load brings them in."""
    warehouse = str(copied_warehouse(loaded_under_keep, tmp_path))
    privacy = {"SOURCES__SIGNING__PRIVACY__HASH_KEY": HASH_KEY}
    args = ("forget", "--email", "typo@nowhere.invalid", "--duckdb", warehouse, "--no-models")
    forgot = cli(running, tmp_path, *args, **privacy)
    assert forgot.returncode == 0, describe(forgot)
    assert "(no row held the person)" in forgot.stdout, describe(forgot)
    assert "no row of this warehouse held the person: check the address" in forgot.stderr
    with duckdb.connect(warehouse, read_only=True) as connection:
        erasures = connection.execute("select count(*) from raw._signing_erasures").fetchall()
    assert erasures == [(1,)]
