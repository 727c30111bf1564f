"""A DuckDB run holds its file open from the moment it exists, a first run's too: every
connection dlt opens then shares the database instead of reading and checkpointing the file
again; the hold ends with the run.

The file's state is observed through DuckDB itself: a read-only connection is refused while
this process holds the file open for writing, and taken once nothing does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from dlt.destinations.impl.duckdb.configuration import DuckDbConnectionPool

from pipelines.load.run import load_incremental
from pipelines.warehouse import Warehouse, _run_file
from sandbox import RunningSandbox
from tests.support import cli_env, describe, error_lines, fast, load_args, run_cli
from tests.support.built import copied_warehouse

# A setting DuckDB takes only as it opens a file, in the user's `global_config`.
CONNECT_TIME_SETTING = (
    "DESTINATION__DUCKDB__CREDENTIALS__GLOBAL_CONFIG",
    '{"custom_user_agent": "signing-etl-test", "memory_limit": "512MB"}',
)


@pytest.fixture
def borrows_while_held(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, bool]]:
    """Each connection dlt's pools hand to dlt's clients during the test (the run's own hold
    is taken apart): the file, and whether this process's run held it once it was handed."""
    seen: list[tuple[Path, bool]] = []
    pool_class = type(_run_file._pool_of(Path("any.duckdb")))
    borrow = pool_class.borrow_conn

    def watched(pool: DuckDbConnectionPool, *args: Any, **kwargs: Any) -> Any:
        connection = borrow(pool, *args, **kwargs)
        path = Path(str(pool.credentials.database))
        seen.append((path, path in _run_file._HELD))
        return connection

    monkeypatch.setattr(pool_class, "borrow_conn", watched)
    return seen


@pytest.fixture(scope="module")
def loaded_once(shared_sandbox: RunningSandbox, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder one first run filled from the shared sandbox; the tests that start after a
    first run copy it (`copied_warehouse`) rather than load 1,500 shipments again each."""
    folder = tmp_path_factory.mktemp("loaded-once")
    assert load_incremental(folder / "signing.duckdb", settings=fast(shared_sandbox)).exit_code == 0
    return folder


def opens_read_only(path: Path) -> bool:
    try:
        duckdb.connect(str(path), read_only=True).close()
    except duckdb.Error:
        return False
    return True


@pytest.mark.parametrize("loads", [1, 2], ids=["first", "again"])
def test_a_run_holds_its_file_from_the_first_connection_to_its_end(
    shared_sandbox: RunningSandbox,
    tmp_path: Path,
    borrows_while_held: list[tuple[Path, bool]],
    loads: int,
    loaded_once: Path,
) -> None:
    published = tmp_path / "signing.duckdb"
    working = Warehouse.at(published).working_path
    if loads == 2:  # a run after a first one
        copied_warehouse(loaded_once, tmp_path)
    borrows_while_held.clear()

    result = load_incremental(published, settings=fast(shared_sandbox))

    assert result.exit_code == 0
    of_the_run = [held for path, held in borrows_while_held if path == working]
    assert len(of_the_run) > 5, f"dlt borrowed {len(of_the_run)} connections only"
    unheld = of_the_run.count(False)  # a first run's first one is held as it creates the file
    assert unheld == 0, f"{unheld} of {len(of_the_run)} connections opened the file again"
    assert working not in _run_file._HELD
    assert working not in _run_file._AWAITED
    assert opens_read_only(working), "the run's hold outlived it"


def test_a_run_that_creates_nothing_holds_nothing(tmp_path: Path) -> None:
    """A run that writes nothing (a refused key, say) awaits its file, never creates it, and
    leaves nothing awaited behind."""
    warehouse = Warehouse.at(tmp_path / "signing.duckdb")
    with warehouse.writer():
        assert warehouse.working_path in _run_file._AWAITED
    assert not warehouse.working_path.exists()
    assert warehouse.working_path not in _run_file._AWAITED
    assert warehouse.working_path not in _run_file._HELD


def test_the_users_connection_settings_do_not_split_the_runs_database(
    shared_sandbox: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A setting DuckDB takes only when it opens the file (`custom_user_agent`) in the user's
    `global_config`: every connection of the run opens with it, as dlt's own do, so they
    share one database; one opened without it would be refused by DuckDB ("a different
    configuration than existing connections")."""
    monkeypatch.setenv(*CONNECT_TIME_SETTING)
    published = tmp_path / "signing.duckdb"
    for run in ("first", "again"):
        result = load_incremental(published, settings=fast(shared_sandbox))
        assert result.exit_code == 0, f"the {run} run: {result.stopped}"
    with duckdb.connect(str(published), read_only=True) as connection:
        loaded = connection.execute("select count(*) from raw.shipments").fetchone()
    assert loaded is not None
    assert loaded[0] == len(shared_sandbox.store.shipments.by_id)


def test_a_hold_inside_a_hold_is_part_of_it(loaded_once: Path, tmp_path: Path) -> None:
    warehouse = Warehouse.at(copied_warehouse(loaded_once, tmp_path))
    with warehouse.writer():
        held = _run_file._HELD[warehouse.working_path]
        with warehouse.writer():
            assert _run_file._HELD[warehouse.working_path] is held
        assert _run_file._HELD.get(warehouse.working_path) is held, "the inner hold let go"
    assert warehouse.working_path not in _run_file._HELD
    assert opens_read_only(warehouse.working_path), "a hold outlived its run"


def test_compacting_a_held_file_takes_the_hold_again_on_the_new_one(
    shared_sandbox: RunningSandbox,
    loaded_once: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a connect-time setting of the user's too: the hold on the new file is opened as
    dlt's connections are, and a reader beside the run shares it. (The setting is a
    connection's, kept in no file, so a copy of a first run's folder is as good as a load.)"""
    monkeypatch.setenv(*CONNECT_TIME_SETTING)
    warehouse = Warehouse.at(copied_warehouse(loaded_once, tmp_path))
    with warehouse.writer():
        before = _run_file._HELD[warehouse.working_path]
        assert warehouse.compact()
        after = _run_file._HELD.get(warehouse.working_path)
        assert after is not None
        assert after is not before
        shipments = [(len(shared_sandbox.store.shipments.by_id),)]
        with warehouse.run_reader() as reader:
            assert reader.execute_sql("select count(*) from raw.shipments") == shipments
        with warehouse.writing_client() as client:  # dlt's own, as the rest of a run's are
            assert client.execute_sql("select count(*) from raw.shipments") == shipments
    assert opens_read_only(warehouse.working_path), "the hold taken again outlived the run"


def test_settings_that_fail_on_open_are_named_and_the_file_is_not_blamed(
    shared_sandbox: RunningSandbox, loaded_once: Path, tmp_path: Path
) -> None:
    """An extension that does not load: the run stops in one line that points at the
    settings; a line telling the operator to move a good warehouse away would cost them it."""
    published = copied_warehouse(loaded_once, tmp_path)
    before = published.read_bytes()
    env = cli_env(shared_sandbox)
    env["DESTINATION__DUCKDB__CREDENTIALS__EXTENSIONS"] = '["signing_no_such_extension"]'

    result = run_cli(load_args(published), cwd=tmp_path, env=env)

    assert result.returncode == 1, describe(result)
    errors = error_lines(result.stderr)
    assert len(errors) == 1, describe(result)
    assert "with the DuckDB settings configured" in errors[0]
    assert "signing_no_such_extension" in errors[0]
    assert "move it away" not in result.stderr
    assert published.read_bytes() == before
