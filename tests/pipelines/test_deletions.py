"""Records the application deletes: the next reconciling load marks exactly those, on DuckDB and
on Postgres, over real HTTP against the sandbox. The expected side is the sandbox's own
(`truth.expected` for the live records, `truth.deleted_rows` / `deleted_ids` for the deleted
ones), never what the pipeline reported."""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pipelines.load.run import LoadOptions, LoadResult, load_incremental
from pipelines.modeling.build import build_models
from pipelines.report.notebook import snapshot_marts
from pipelines.status.read import read_status
from sandbox import RunningSandbox
from tests.models.test_marts import assert_marts_match
from tests.support import (
    SandboxFactory,
    admin,
    cli_env,
    describe,
    error_lines,
    fast,
    run_cli,
    served,
    start_cli,
)
from tests.support.destinations import WarehouseUnderTest
from tests.support.truth import compare, deleted_ids, deleted_rows, expected

pytestmark = pytest.mark.slow  # several loads per test and builds, on DuckDB and PostgreSQL

KINDS = ("documents", "contacts", "shipments")
LISTS = ("/documents", "/contacts", "/shipments")
NONE_MARKED: dict[str, set[str]] = {kind: set() for kind in KINDS}
# Rows of a deleted record, per kind: its own table, its nested tables and its children.
RELATED = {
    "documents": ("documents", "documents__fields"),
    "contacts": ("contacts", "contacts__custom"),
    "shipments": ("shipments", "shipments__recipients", "audit_events", "shipment_fields"),
}


def load(
    place: WarehouseUnderTest,
    running: RunningSandbox,
    options: LoadOptions | None = None,
    page_size: int | None = None,
) -> LoadResult:
    with place.configured() as warehouse:
        settings = fast(running)
        if page_size is not None:
            settings = replace(settings, page_size=page_size)
        return load_incremental(warehouse, options, settings=settings)


def delete(running: RunningSandbox, kind: str, **how: Any) -> list[str]:
    """Delete records as the application does; the ids it deleted."""
    deleted = admin(running, "POST", "/delete", {"kind": kind, **how})["deleted"]
    assert deleted
    return list(deleted)


def marked(place: WarehouseUnderTest) -> dict[str, set[str]]:
    """The ids each record table holds marked deleted."""
    return {
        kind: {
            row[0]
            for row in place.query(f"select id from raw.{kind} where _deleted_at is not null")
        }
        for kind in KINDS
    }


def assert_live_rows_equal_the_sandbox(place: WarehouseUnderTest, running: RunningSandbox) -> None:
    """Rows not marked deleted equal the sandbox's live records; the marked ones equal its
    deleted records as they were (nested and child rows marked with their record)."""
    assert compare(expected(running.store), place.actual(deleted=False)) == {}
    assert compare(deleted_rows(running.store), place.actual(deleted=True)) == {}


def assert_marts_equal_the_sandbox(
    place: WarehouseUnderTest, running: RunningSandbox, folder: Path
) -> None:
    """The models build, and their numbers are the sandbox's live records' (deleted records
    in none of them; a live document counts its deleted shipments apart)."""
    with place.configured() as warehouse:
        built = build_models(warehouse)
        assert built.success, built.summary
        marts = (
            place.path if place.database is None else snapshot_marts(warehouse, folder / "m.duckdb")
        )
    assert_marts_match(marts, running.store)
    with running.store.lock:
        live_documents = set(running.store.documents.by_id)
        deleted = [s.document_id for s in running.store.deleted.shipments.values()]
    counted = place.query(
        "select sum(count_shipments_deleted) from marts.dim_documents where not is_deleted"
    )
    assert counted == [(sum(d in live_documents for d in deleted),)]


def assert_checks(result: LoadResult, kind: str, requests: int | None = None) -> None:
    """Every list was checked as `kind`, each at `requests` requests when given."""
    checks = {d.table: (d.check, d.check_requests) for d in result.deletions}
    assert set(checks) == set(KINDS), checks
    for check, cost in checks.values():
        assert check == kind, checks
        assert requests is None or cost == requests, checks


# The snapshots a hard delete must erase versions from, and the staging views they read,
# without the marts: tables the build that checks them replaces whole, so none carries over
# from a build before the deletes. Tests are selected cautiously (all their parents selected):
# a mart's test that also reads a staging view waits for the full build.
SNAPSHOTS_AND_THEIR_INPUTS = (
    "+snp_signing__shipments +snp_signing__recipients +snp_signing__contacts"
)


# ---------------------------------------------------------------------- marking
def test_a_reconciling_load_marks_exactly_the_deleted_records_of_every_kind(
    make_sandbox: SandboxFactory, each_destination: WarehouseUnderTest, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=120, limits_enabled=False)
    place = each_destination
    assert load(place, running).exit_code == 0

    gone = {
        "documents": delete(running, "documents", count=1),
        "contacts": delete(running, "contacts", count=3),
        "shipments": delete(running, "shipments", count=4),
    }
    assert {kind: set(ids) for kind, ids in gone.items()} == deleted_ids(running.store)
    # No --reconcile: the lists' totals disagree with the warehouse, so their ids are paged.
    found = load(place, running)

    assert found.exit_code == 0, found.stopped
    assert marked(place) == deleted_ids(running.store)
    assert_live_rows_equal_the_sandbox(place, running)
    assert_checks(found, "full")
    assert found.marked == {kind: len(ids) for kind, ids in gone.items()}
    assert_marts_equal_the_sandbox(place, running, tmp_path)

    # Counts agree now: one request per list on the check, beside the list's own pass.
    agreed = load(place, running)
    assert agreed.exit_code == 0
    assert_checks(agreed, "count", requests=1)
    assert {path: agreed.stats.by_endpoint[path] for path in LISTS} == dict.fromkeys(LISTS, 2)
    assert agreed.rows == {}
    # --reconcile pages every list even so, and finds nothing new.
    forced = load(place, running, LoadOptions(reconcile=True))
    assert_checks(forced, "full")
    assert forced.marked == {}
    assert marked(place) == deleted_ids(running.store)

    # The run record and `status` say what was found, when the last full check ran, its cost.
    with place.configured() as warehouse:
        shown = read_status(warehouse).only
    assert shown.runs[2].deletions["shipments"]["marked"] == len(gone["shipments"])
    assert shown.deleted_rows == {kind: len(ids) for kind, ids in gone.items()}
    assert shown.deletion_checks["shipments"].at is not None
    assert shown.deletion_checks["shipments"].requests >= 1
    # The same cost as the run that made the last full check said it was (its count request,
    # the pass and its confirmations; status had said the pass's alone).
    costs = {check.table: check.check_requests for check in forced.deletions}
    assert {table: c.requests for table, c in shown.deletion_checks.items()} == costs


def test_a_full_check_runs_when_the_last_is_older_than_a_day_by_the_services_clock(
    make_sandbox: SandboxFactory, each_destination: WarehouseUnderTest
) -> None:
    running = make_sandbox(shipments=60, limits_enabled=False)
    place = each_destination
    load(place, running)
    admin(running, "POST", "/advance", {"hours": 6})
    assert_checks(load(place, running), "count", requests=1)
    admin(running, "POST", "/advance", {"hours": 20})
    assert_checks(load(place, running), "full")


# ---------------------------------------------------------------------- guards
def test_a_check_cut_short_by_the_request_budget_marks_nothing(
    make_sandbox: SandboxFactory, each_destination: WarehouseUnderTest
) -> None:
    running = make_sandbox(shipments=120, limits_enabled=False)
    place = each_destination
    load(place, running)
    delete(running, "shipments", count=4)

    # Pages of 20 records: the shipments' ids alone take about eight pages.
    cut = load(place, running, LoadOptions(reconcile=True, max_requests=12), page_size=20)

    assert cut.exit_code == 75, cut.stopped
    assert marked(place) == NONE_MARKED
    assert all(d.check != "full" for d in cut.deletions if d.table == "shipments")
    complete = load(place, running, page_size=20)
    assert complete.exit_code == 0
    assert marked(place) == deleted_ids(running.store)


def test_a_check_cut_short_by_a_signal_marks_nothing(
    make_sandbox: SandboxFactory, each_destination: WarehouseUnderTest, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=120, limits_enabled=False)
    place = each_destination
    load(place, running)
    delete(running, "shipments", count=4)
    # Shipments only, paced to 10 requests a second in pages of 20: /me, the list's pass and
    # the count check, then about eight pages of ids, the signal among them.
    env = {**cli_env(running, requests_per_second=10, burst=1, page_size=20), **place.env}
    args = ["load", *place.cli_args(), "--no-models", "--resources", "shipments"]
    before = served(running)
    process = start_cli(args, cwd=tmp_path, env=env)
    deadline = time.monotonic() + 60
    while served(running) < before + 6:
        assert process.poll() is None, "the load ended before it was stopped"
        assert time.monotonic() < deadline, "the load made no progress"
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    stopped = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)

    assert stopped.returncode == 130, describe(stopped)
    assert marked(place) == NONE_MARKED


def test_a_mass_deletion_is_refused_in_one_line_and_marked_when_allowed(
    make_sandbox: SandboxFactory, each_destination: WarehouseUnderTest, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=120, limits_enabled=False)
    place = each_destination
    env = {**cli_env(running), **place.env}
    first = run_cli(["load", *place.cli_args(), "--no-models"], cwd=tmp_path, env=env)
    assert first.returncode == 0, describe(first)
    gone = delete(running, "shipments", share=0.2)  # 24 of 120

    refused = run_cli(["load", *place.cli_args(), "--no-models"], cwd=tmp_path, env=env)

    assert refused.returncode == 1, describe(refused)
    assert "Traceback" not in refused.stderr, describe(refused)
    (line,) = error_lines(refused.stderr)
    assert "shipments: 24 of 120 live rows (20.0%)" in line, line
    assert "--allow-mass-delete" in line, line
    assert marked(place) == NONE_MARKED
    # What the run fetched otherwise is loaded as usual: the next run finds the same again.
    again = run_cli(["load", *place.cli_args(), "--no-models"], cwd=tmp_path, env=env)
    assert again.returncode == 1, describe(again)

    allowed = run_cli(
        ["load", *place.cli_args(), "--no-models", "--allow-mass-delete"], cwd=tmp_path, env=env
    )
    assert allowed.returncode == 0, describe(allowed)
    assert marked(place)["shipments"] == set(gone)
    assert "shipments 24 gone, 24 marked deleted (full check" in allowed.stderr, describe(allowed)
    assert_live_rows_equal_the_sandbox(place, running)
    shown = run_cli(["status", *place.cli_args()], cwd=tmp_path, env=env)
    assert "Deleted records" in shown.stdout, describe(shown)


# ---------------------------------------------------------------------- restored, 404, hard
def test_a_restored_record_is_live_again(
    make_sandbox: SandboxFactory, each_destination: WarehouseUnderTest
) -> None:
    running = make_sandbox(shipments=120, limits_enabled=False)
    place = each_destination
    load(place, running)
    gone = {kind: delete(running, kind, count=2) for kind in KINDS}
    load(place, running)
    assert marked(place) == {kind: set(ids) for kind, ids in gone.items()}

    for kind, ids in gone.items():
        admin(running, "POST", "/restore", {"kind": kind, "id": ids[0]})
    # Restores bring no change stamp: the count check sees them, the full check finds them.
    back = load(place, running)

    assert back.exit_code == 0, back.stopped
    assert marked(place) == {kind: {ids[1]} for kind, ids in gone.items()}
    assert_live_rows_equal_the_sandbox(place, running)
    assert {d.table: d.seen_again for d in back.deletions} == dict.fromkeys(KINDS, 1)


def test_a_404_on_a_shipments_children_marks_it_deleted(
    make_sandbox: SandboxFactory, each_destination: WarehouseUnderTest
) -> None:
    # Ten days of history: most shipments are still under way, so half a day changes many.
    running = make_sandbox(shipments=120, history_days=10, limits_enabled=False)
    place = each_destination
    # Deleted before the first load, restored later: listed again without a change stamp, so
    # the list's total can agree with the warehouse while another shipment is gone.
    (hidden,) = delete(running, "shipments", count=1)
    load(place, running)
    admin(running, "POST", "/advance", {"hours": 12})
    stopped = load(place, running, LoadOptions(max_requests=20))
    assert stopped.exit_code == 75, stopped.stopped
    pending = sorted(_pending(place))
    assert pending, "the budget left no shipment with its children to fetch"
    (gone,) = delete(running, "shipments", id=pending[0])
    admin(running, "POST", "/restore", {"kind": "shipments", "id": hidden})

    found = load(place, running)

    assert found.exit_code == 0, found.stopped
    (shipments,) = [d for d in found.deletions if d.table == "shipments"]
    assert shipments.check == "count"  # no full pass: the 404 alone marked it
    assert marked(place)["shipments"] == {gone}
    assert deleted_ids(running.store)["shipments"] == {gone}


def _pending(place: WarehouseUnderTest) -> set[str]:
    """Shipments whose children a stop left to fetch, as the pipeline lists them."""
    rows = place.query("select shipment_id from raw._signing_incomplete_shipments")
    return {row[0] for row in rows}


def test_hard_deletes_leave_no_row_of_the_record_or_its_children(
    make_sandbox: SandboxFactory,
    each_destination: WarehouseUnderTest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    running = make_sandbox(shipments=120, limits_enabled=False)
    place = each_destination
    monkeypatch.setenv("SOURCES__SIGNING__DELETES", "hard")
    load(place, running)
    with place.configured() as warehouse, monkeypatch.context() as cautious:
        cautious.setenv("DBT_INDIRECT_SELECTION", "cautious")
        # the snapshots keep versions of every record
        assert build_models(warehouse, select=SNAPSHOTS_AND_THEIR_INPUTS).success
    gone = {kind: delete(running, kind, count=2) for kind in KINDS}

    removed = load(place, running)

    assert removed.exit_code == 0, removed.stopped
    assert removed.marked == dict.fromkeys(KINDS, 2)
    # Every row left is a live record's, and every live record's row is there.
    assert compare(expected(running.store), place.actual()) == {}
    for kind, ids in gone.items():
        for table in RELATED[kind]:
            column = "id" if table == kind else f"{kind[:-1]}_id"
            left = place.query(f"select count(*) from raw.{table} where {column} in (?, ?)", *ids)
            assert left == [(0,)], (table, ids)
    # Their versions are erased from the snapshots too (an erasure leaves no history).
    for snapshot, column in (
        ("snp_signing__shipments", "shipment_id"),
        ("snp_signing__recipients", "shipment_id"),
        ("snp_signing__contacts", "contact_id"),
    ):
        kind = f"{column[:-3]}s"
        left = place.query(
            f"select count(*) from snapshots.{snapshot} where {column} in (?, ?)", *gone[kind]
        )
        assert left == [(0,)], snapshot
    assert_marts_equal_the_sandbox(place, running, tmp_path)


def test_an_unknown_delete_mode_is_refused_in_one_line_before_any_request(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    env = cli_env(running, deletes="erase")
    refused = run_cli(["load", "--duckdb", str(tmp_path / "w.duckdb")], cwd=tmp_path, env=env)
    assert refused.returncode == 1, describe(refused)
    (line,) = error_lines(refused.stderr)
    assert "deletes must be soft or hard" in line, line
    assert served(running) == 0
