"""Repair and backfill on a loaded warehouse: `load --resources contacts --full-refresh` reads one
list again while the others stay, and `load --reload FROM..TO` reads a window again without
moving a cursor. Each leaves the warehouse equal to the sandbox (its own store is the truth),
the other lists' rows as they were (their `_dlt_load_id` unchanged), and the cursors as the
docs say."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import duckdb
import pytest
from dlt.common.versioned_state import decompress_state

from pipelines.load.run import LoadOptions, LoadResult, load_incremental
from sandbox import RunningSandbox
from sources.signing import ReloadWindow
from tests.support import SandboxFactory, admin
from tests.support.cli import cli_env, describe, error_lines, load_args, run_cli
from tests.support.destinations import WarehouseUnderTest
from tests.support.loading import fast
from tests.support.truth import compare, deleted_ids, expected, ms_to_iso

pytestmark = pytest.mark.slow  # several loads per test

# Every raw table of a list, and the tables that travel with it.
CONTACT_TABLES = ("contacts", "contacts__custom", "contacts__group_ids")
OTHER_TABLES = (
    *("documents", "documents__fields", "shipments", "shipments__recipients"),
    *("audit_events", "shipment_fields", "workspaces"),
)


def load(place: WarehouseUnderTest, running: RunningSandbox, **options: Any) -> LoadResult:
    with place.configured() as warehouse:
        result = load_incremental(warehouse, LoadOptions(**options), settings=fast(running))
    assert result.exit_code == 0, result.stopped
    return result


def resource_states(place: WarehouseUnderTest) -> dict[str, Any]:
    """Each resource's dlt state as the warehouse holds it (the newest stored state)."""
    (blob,) = place.query(
        "select state from raw._dlt_pipeline_state order by _dlt_load_id desc limit 1"
    )[0]
    state: dict[str, Any] = decompress_state(blob)
    return dict(state["sources"]["signing"]["resources"])


def load_ids(place: WarehouseUnderTest, tables: tuple[str, ...]) -> dict[str, set[Any]]:
    """Per table, each row's `_dlt_id` with the load that wrote it (a nested row's `_dlt_id`
    is new whenever its root row is written again)."""
    return {
        table: set(
            place.query(
                f"select _dlt_id{'' if '__' in table else ', _dlt_load_id'} from raw.{table}"
            )
        )
        for table in tables
        for t in [table]
    }


def damage(place: WarehouseUnderTest, sql: str, *params: Any) -> None:
    """Change the warehouse behind the pipeline's back (on DuckDB, the analysts' file: the next
    run starts from it)."""
    if place.database is None:
        with duckdb.connect(str(place.path)) as db:
            db.execute(sql, list(params))
        return
    with closing(place.database.connect()) as remote, remote.cursor() as cursor:
        cursor.execute(sql.replace("?", "%s"), params)
        remote.commit()


def lose_contacts(place: WarehouseUnderTest, ids: list[str]) -> None:
    """The warehouse loses these contacts' rows, their nested rows with them."""
    for table in CONTACT_TABLES[1:]:
        damage(
            place,
            f"delete from raw.{table} where _dlt_root_id in "
            "(select _dlt_id from raw.contacts where id = any(?))",
            ids,
        )
    damage(place, "delete from raw.contacts where id = any(?)", ids)


def test_a_refresh_of_the_contacts_reloads_them_alone(
    make_sandbox: SandboxFactory, each_destination: WarehouseUnderTest
) -> None:
    running = make_sandbox(shipments=60, limits_enabled=False)
    place = each_destination
    load(place, running)
    # The warehouse lost contacts and holds a wrong value; the service deleted two.
    lose_contacts(place, [row[0] for row in place.query("select id from raw.contacts")][:3])
    damage(place, "update raw.contacts set company = 'wrong'")
    gone = admin(running, "POST", "/delete", {"kind": "contacts", "count": 2})["deleted"]
    others_before = load_ids(place, OTHER_TABLES)
    states_before = resource_states(place)

    refreshed = load(place, running, full_refresh=True, resources=("contacts",))

    assert compare(expected(running.store), place.actual(deleted=False)) == {}
    assert refreshed.marked == {"contacts": len(gone)}
    marked = place.query("select id from raw.contacts where _deleted_at is not null")
    assert {row[0] for row in marked} == deleted_ids(running.store)["contacts"]
    # Every contact row the service serves was written again by this run; nothing else was.
    assert refreshed.load_info is not None
    (this_load,) = refreshed.load_info.loads_ids
    written = place.query(
        "select distinct _dlt_load_id from raw.contacts where _deleted_at is null"
    )
    assert written == [(this_load,)]
    assert load_ids(place, OTHER_TABLES) == others_before
    states_after = resource_states(place)
    assert {k: v for k, v in states_after.items() if k != "contacts"} == {
        k: v for k, v in states_before.items() if k != "contacts"
    }
    assert states_after["contacts"]["cursor"] > states_before["contacts"]["cursor"]


def test_a_reload_of_a_window_merges_it_without_moving_a_cursor(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=60, limits_enabled=False)
    place = WarehouseUnderTest(tmp_path / "signing.duckdb")
    load(place, running)
    contacts = running.store.contacts.by_id.values()
    start = sorted(c.updated_at for c in contacts)[len(contacts) // 2]
    window = ReloadWindow.parse(f"{ms_to_iso(start)}..2099-12-31")
    inside = {c.id for c in contacts if c.updated_at >= start}
    outside = sorted(set(running.store.contacts.by_id) - inside)
    assert inside
    assert outside
    changed = [s.id for s in running.store.shipments.by_id.values() if s.updated_at >= start]
    assert changed
    # Rows lost or spoilt inside the window, and one contact lost before it.
    lost = sorted(inside)[:3] + outside[:1]
    lose_contacts(place, lost)
    damage(
        place, "update raw.shipments set status = 'wrong' where id in (select unnest(?))", changed
    )
    states_before = resource_states(place)

    load(place, running, reload=window)

    assert resource_states(place) == states_before
    held = {row[0] for row in place.query("select id from raw.contacts")}
    assert set(lost) - held == {outside[0]}  # only the contact changed before FROM is missing
    differences = compare(expected(running.store), place.actual(deleted=False))
    assert set(differences) <= {"contacts", "contacts__custom", "contacts__group_ids"}
    assert differences["contacts"]["counts"] == [1, 0]


def test_a_window_that_is_not_one_is_a_usage_error(tmp_path: Path) -> None:
    asked: list[tuple[tuple[str, ...], str]] = [
        (("--reload", window), f"--reload {window!r}")
        for window in ("2026-02-01..2026-01-01", "yesterday..today", "2026-01-01")
    ]
    asked.append((("--reload", "2026-01-01..2026-01-02", "--resources", "webhooks"), "lists only"))
    asked.append((("--reload", "2026-01-01..2026-01-02", "--full-refresh"), "--full-refresh"))
    for options, said in asked:
        result = run_cli(
            load_args(tmp_path / "w.duckdb", *options), cwd=tmp_path, env=cli_env(None)
        )
        assert result.returncode == 2, describe(result)
        (line,) = error_lines(result.stderr)
        assert said in line
