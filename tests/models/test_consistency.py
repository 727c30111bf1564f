"""The models after loads that stopped part-way, on audit trails cut at the API's cap, and the
one-line errors of `build_models`.

A stopped load leaves shipments whose audit trail or filled-in fields are not loaded yet; the
pipeline lists them in `raw._signing_incomplete_shipments` and the marts hold them back. The
expected numbers are computed from the sandbox's own store (`running.store`), restricted to
the shipments the load completed, never from the raw tables or the models.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.errors import ModelsError, WarehouseMissing
from pipelines.load.run import LoadOptions, load_incremental
from pipelines.modeling.build import ModelsResult, build_models, dbt_dir_for
from pipelines.raw.pipeline import make_pipeline
from sandbox import RunningSandbox, SandboxConfig, Shipment, Store
from tests.support import (
    MARTS,
    MODELS_BUILT,
    START_MS,
    SandboxFactory,
    admin,
    earliest,
    fast,
    mart_tables,
    ms_of,
    pointed_at,
    week_of,
)

pytestmark = pytest.mark.slow  # a dbt build per test

INCOMPLETE_TABLE = "_signing_incomplete_shipments"
AUDIT_TRAIL_CAP = 500  # GET /shipments/{id}/events: newest first, at most 500, no paging
Numbers = dict[str, Any]


# ---------------------------------------------------------------------- loading
def load(running: RunningSandbox, warehouse: Path, max_requests: int | None = None) -> str | None:
    """One incremental load of the sandbox; the reason it stopped early, if it did."""
    with pointed_at(running):
        return load_incremental(
            warehouse, LoadOptions(max_requests=max_requests), settings=fast()
        ).stopped


def incomplete_shipments(warehouse: Path) -> set[str]:
    """The shipments the last load left with children pending, as the pipeline lists them.

    Where the pipeline does not write the list (a version before the contract), it is written
    here after each load from the pipeline's state: the shipment ids whose audit trail or
    fields are still to fetch."""
    with duckdb.connect(str(warehouse)) as db:
        exists = db.execute(
            "select count(*) from information_schema.tables "
            "where table_schema = 'raw' and table_name = ?",
            [INCOMPLETE_TABLE],
        ).fetchone()
        if exists and exists[0] and warehouse not in _LISTED_HERE:
            listed = db.execute(f"select shipment_id from raw.{INCOMPLETE_TABLE}").fetchall()
            return {row[0] for row in listed}
    _LISTED_HERE.add(warehouse)
    with duckdb.connect(str(warehouse)) as db:
        (workspace,) = db.execute("select id from raw.workspaces").fetchone() or ("",)
    state = make_pipeline(warehouse, workspace).state
    resources = state.get("sources", {}).get("signing", {})
    pending = {
        shipment_id
        for name in ("audit_events", "shipment_fields")
        for shipment_id in resources.get("resources", {}).get(name, {}).get("pending", {})
    }
    with duckdb.connect(str(warehouse)) as db:
        db.execute(
            f"create or replace table raw.{INCOMPLETE_TABLE} "
            "(workspace_id varchar, shipment_id varchar)"
        )
        db.executemany(
            f"insert into raw.{INCOMPLETE_TABLE} values (?, ?)",
            [(workspace, shipment_id) for shipment_id in sorted(pending)],
        )
    return pending


_LISTED_HERE: set[Path] = set()  # warehouses whose list this module writes


def loaded_shipments(warehouse: Path) -> set[str]:
    """Shipments of completed dlt loads."""
    with duckdb.connect(str(warehouse), read_only=True) as db:
        return {
            row[0]
            for row in db.execute(
                "select id from raw.shipments where _dlt_load_id in "
                "(select load_id from raw._dlt_loads where status = 0)"
            ).fetchall()
        }


def assert_built(result: ModelsResult) -> None:
    """Every model built and every test passed (warnings allowed)."""
    assert result.success, result.summary
    assert result.models_passed == MODELS_BUILT, result.summary
    assert (result.models_errored, result.models_skipped) == (0, 0), result.summary
    assert (result.tests_errored, result.tests_skipped) == (0, 0), result.summary


# ---------------------------------------------------------------------- expected side


def _is_sent(shipment: Shipment) -> bool:
    return any(r.sent_at is not None for r in shipment.recipients)


def truth(store: Store, complete: set[str], held_back: set[str]) -> Numbers:
    """The marts' numbers as the sandbox says they must be when only `complete` shipments
    count and `held_back` ones are reported apart."""
    with store.lock:
        counted = [s for s in store.shipments.by_id.values() if s.id in complete]
        waiting = [s for s in store.shipments.by_id.values() if s.id in held_back]
        document_ids = set(store.documents.by_id)
        contact_ids = set(store.contacts.by_id)
    sent = [s for s in counted if _is_sent(s)]
    recipients = [(s, r) for s in counted for r in s.recipients]
    received: dict[str, set[str]] = {c: set() for c in contact_ids}
    signed_by: dict[str, set[str]] = {c: set() for c in contact_ids}
    for s, r in recipients:
        if r.contact_id is not None and r.sent_at is not None:
            received[r.contact_id].add(s.id)
            if r.signed_at is not None:
                signed_by[r.contact_id].add(s.id)
    return {
        "shipments": {s.id for s in counted},
        "funnel": (
            len(sent),
            sum(any(r.first_opened_at is not None for r in s.recipients) for s in sent),
            sum(any(r.signed_at is not None for r in s.recipients) for s in sent),
            sum(s.status == "completed" for s in sent),
            sum(s.status == "expired" for s in sent),
            sum(s.status == "revoked" for s in sent),
            sum(r.signed_at is not None for s in sent for r in s.recipients),
        ),
        "recipients": (len(recipients), sum(r.signed_at is not None for _, r in recipients)),
        "sent_per_week": Counter(
            week_of(min(r.sent_at for r in s.recipients if r.sent_at is not None)) for s in sent
        ),
        "held_back_per_week": Counter(
            week_of(min(r.sent_at for r in s.recipients if r.sent_at is not None))
            for s in waiting
            if _is_sent(s)
        ),
        "per_document": {
            d: (
                sum(s.document_id == d for s in sent),
                sum(s.document_id == d and s.status == "completed" for s in counted),
            )
            for d in document_ids
        },
        "per_contact": {c: (len(received[c]), len(signed_by[c])) for c in contact_ids},
        "milestones": {
            s.id: (
                earliest([r.sent_at for r in s.recipients]),
                earliest([r.first_opened_at for r in s.recipients]),
                earliest([r.signed_at for r in s.recipients]),
                s.completed_at,
            )
            for s in counted
        },
        "trail_lengths": {s.id: len(s.audit_events()) for s in counted},
    }


# ---------------------------------------------------------------------- actual side


def marts(warehouse: Path) -> Numbers:
    """The same numbers read from the marts."""
    with duckdb.connect(str(warehouse), read_only=True) as db:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return db.execute(sql).fetchall()

        (funnel,) = rows("""
            select sum(count_shipments_sent), sum(count_shipments_opened),
                   sum(count_shipments_signed), sum(count_shipments_completed),
                   sum(count_shipments_expired), sum(count_shipments_revoked),
                   sum(count_recipients_signed)
            from marts.fct_signing_funnel""")
        (facts,) = rows("""
            select count_if(is_sent), count_if(is_sent and is_opened),
                   count_if(is_sent and is_signed), count_if(is_sent and is_completed),
                   count_if(is_sent and is_expired), count_if(is_sent and is_revoked),
                   sum(case when is_sent then count_recipients_signed else 0 end)
            from marts.fct_shipments""")
        assert tuple(v or 0 for v in funnel) == tuple(v or 0 for v in facts), (funnel, facts)
        (recipients,) = rows("select count(*), count_if(is_signed) from marts.fct_recipients")
        return {
            "shipments": {row[0] for row in rows("select shipment_id from marts.fct_shipments")},
            "funnel": tuple(v or 0 for v in funnel),
            "recipients": recipients,
            "sent_per_week": +Counter(
                dict(
                    rows("""
                        select sent_week, sum(count_shipments_sent)
                        from marts.fct_signing_funnel group by 1""")
                )
            ),
            "held_back_per_week": +Counter(
                dict(
                    rows("""
                        select sent_week, sum(count_shipments_held_back)
                        from marts.fct_signing_funnel group by 1""")
                )
            ),
            "per_document": {
                row[0]: (row[1], row[2])
                for row in rows("""
                    select document_id, count_shipments_sent, count_shipments_completed
                    from marts.dim_documents where not is_deleted""")
            },
            "per_contact": {
                row[0]: (row[1], row[2])
                for row in rows("""
                    select contact_id, count_shipments_received, count_shipments_signed
                    from marts.dim_contacts""")
            },
            "milestones": {
                row[0]: tuple(ms_of(v) for v in row[1:])
                for row in rows("""
                    select shipment_id, sent_at, first_opened_at, first_signed_at, completed_at
                    from marts.fct_shipments""")
            },
            "trail_lengths": dict(
                rows("select shipment_id, count_audit_events from marts.fct_shipments")
            ),
        }


def assert_marts_match(warehouse: Path, store: Store, complete: set[str], held: set[str]) -> None:
    want, got = truth(store, complete, held), marts(warehouse)
    for name, expected in want.items():
        actual = got[name]
        if isinstance(expected, dict) and not isinstance(expected, Counter):
            wrong = {k: (v, actual.get(k)) for k, v in expected.items() if actual.get(k) != v}
            assert not wrong, f"{name}: {len(wrong)} differ, e.g. {list(wrong.items())[:3]}"
            extra = set(actual) - set(expected)
            assert not extra, f"{name}: {len(extra)} unexpected, e.g. {list(extra)[:3]}"
        else:
            assert actual == expected, name


# ---------------------------------------------------------------------- stopped loads
def test_a_load_stopped_part_way_holds_back_the_shipments_still_loading(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(seed=7, shipments=300, limits_enabled=False)
    warehouse = tmp_path / "warehouse" / "signing.duckdb"

    # Enough requests to list every shipment and fetch the children of part of them.
    assert load(running, warehouse, max_requests=400) is not None
    held = incomplete_shipments(warehouse)
    loaded = loaded_shipments(warehouse)
    complete = loaded - held
    assert held, "the stop must leave shipments with pending children"
    assert complete, "the stop must leave some shipments complete"
    assert held <= loaded

    result = build_models(warehouse)
    assert_built(result)
    assert mart_tables(warehouse) >= set(MARTS)
    assert_marts_match(warehouse, running.store, complete, held)
    # A shipment counted as complete has its whole audit trail loaded.
    counted_lengths = marts(warehouse)["trail_lengths"]
    want_lengths = truth(running.store, complete, held)["trail_lengths"]
    assert counted_lengths == want_lengths

    # The next run completes the rest: nothing is held back any more.
    assert load(running, warehouse) is None
    assert incomplete_shipments(warehouse) == set()
    assert_built(build_models(warehouse))
    assert_marts_match(warehouse, running.store, loaded_shipments(warehouse), set())


def test_a_stop_after_changes_holds_back_shipments_with_older_children(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(seed=11, shipments=200, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    assert load(running, warehouse) is None
    assert_built(build_models(warehouse))

    before = loaded_shipments(warehouse)

    admin(running, "POST", "/advance", {"days": 3})
    # Few requests: changed shipments are listed, their new events and fields are not fetched.
    assert load(running, warehouse, max_requests=12) is not None
    held = incomplete_shipments(warehouse)
    assert held & before, "the stop must leave changed shipments with older children"

    result = build_models(warehouse)
    assert_built(result)
    assert mart_tables(warehouse) >= set(MARTS)
    with duckdb.connect(str(warehouse), read_only=True) as db:
        in_marts = {
            row[0] for row in db.execute("select shipment_id from marts.fct_shipments").fetchall()
        }
        in_recipients = {
            row[0]
            for row in db.execute(
                "select distinct shipment_id from marts.fct_recipients"
            ).fetchall()
        }
        held_back_sent = db.execute("""
            select count(*) from staging.stg_signing__shipments
            where not is_history_complete and shipment_id in (
                select shipment_id from staging.stg_signing__recipients where sent_at is not null)
            """).fetchone()
        (reported,) = db.execute(
            "select sum(count_shipments_held_back) from marts.fct_signing_funnel"
        ).fetchone() or (None,)
    assert not held & in_marts
    assert not held & in_recipients
    assert in_marts == loaded_shipments(warehouse) - held
    assert held_back_sent is not None
    assert reported == held_back_sent[0]
    # Held-back shipments were listed anew: their weeks are the sandbox's.
    held_weeks = truth(running.store, set(), held)["held_back_per_week"]
    assert marts(warehouse)["held_back_per_week"] == held_weeks

    assert load(running, warehouse) is None
    assert incomplete_shipments(warehouse) == set()
    assert_built(build_models(warehouse))
    assert_marts_match(warehouse, running.store, loaded_shipments(warehouse), set())


# ---------------------------------------------------------------------- a complete load
@pytest.fixture(scope="module")
def loaded_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Store]]:
    """A complete load of a small sandbox (only the DuckDB file is used; copy it per test)."""
    config = SandboxConfig(seed=3, shipments=80, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(config) as running:
        warehouse = tmp_path_factory.mktemp("complete") / "signing.duckdb"
        assert load(running, warehouse) is None
        yield warehouse, running.store


def copy_of(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(source, folder / "signing.duckdb"))


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """The folder cannot be written in, by this process too: permissions, or for root (whom
    permissions do not stop) the immutable attribute; skips where neither works."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)], check=False).returncode:
        pytest.skip("root ignores folder permissions, and chattr +i does not work here")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(folder)], check=True)


def test_a_warehouse_without_the_list_counts_every_shipment_as_complete(
    loaded_warehouse: tuple[Path, Store], tmp_path: Path
) -> None:
    source, store = loaded_warehouse
    warehouse = copy_of(source, tmp_path)
    with duckdb.connect(str(warehouse)) as db:
        db.execute(f"drop table if exists raw.{INCOMPLETE_TABLE}")  # an older pipeline's warehouse

    assert_built(build_models(warehouse))
    assert_marts_match(warehouse, store, loaded_shipments(warehouse), set())


def _trail_to_cut(warehouse: Path) -> tuple[str, str]:
    """A completed shipment with a recipient who opened it, and that recipient."""
    with duckdb.connect(str(warehouse), read_only=True) as db:
        found = db.execute("""
            select s.id, e.recipient_id
            from raw.shipments s join raw.audit_events e on e.shipment_id = s.id
            where s.status = 'completed' and e.type = 'opened'
            order by s.id, e.recipient_id limit 1""").fetchone()
    assert found is not None
    return found[0], found[1]


def test_a_trail_cut_at_the_cap_is_flagged_and_falls_back_to_fields(
    loaded_warehouse: tuple[Path, Store], tmp_path: Path
) -> None:
    source, store = loaded_warehouse
    warehouse = copy_of(source, tmp_path)
    shipment_id, recipient_id = _trail_to_cut(warehouse)
    # The API returns only the newest 500 events: after 600 more views the loaded trail is
    # those views' newest 500, and every older event (sent, first views, signatures) is gone.
    with duckdb.connect(str(warehouse)) as db:
        db.execute(
            """
            insert into raw.audit_events
            select * exclude (i) replace (
                'evt_cut_' || cast(views.i as varchar) as id,
                'opened' as type,
                last."at" + views.i * interval 1 minute as "at",
                'cut-' || cast(views.i as varchar) as _dlt_id
            )
            from (
                select * from raw.audit_events
                where shipment_id = $1 and recipient_id = $2 and type = 'opened'
                order by "at" desc limit 1
            ) as last
            cross join range(1, 601) as views(i)
            """,
            [shipment_id, recipient_id],
        )
        db.execute(
            """
            delete from raw.audit_events where shipment_id = $1 and id not in (
                select id from raw.audit_events where shipment_id = $1
                order by "at" desc limit $2)
            """,
            [shipment_id, AUDIT_TRAIL_CAP],
        )

    result = build_models(warehouse)
    assert_built(result)
    with duckdb.connect(str(warehouse), read_only=True) as db:
        flagged = db.execute(
            "select shipment_id, count_audit_events from marts.fct_shipments "
            "where is_audit_trail_truncated"
        ).fetchall()
        (row,) = db.execute(
            """select sent_at, first_signed_at, completed_at, is_completed, funnel_stage
               from marts.fct_shipments where shipment_id = ?""",
            [shipment_id],
        ).fetchall()
        (opened,) = db.execute(
            "select first_opened_at, is_opened from marts.fct_recipients where recipient_id = ?",
            [recipient_id],
        ).fetchall()
    assert flagged == [(shipment_id, AUDIT_TRAIL_CAP)]
    with store.lock:
        shipment = store.shipments.by_id[shipment_id]
        recipient = next(r for r in shipment.recipients if r.id == recipient_id)
        want = (
            earliest([r.sent_at for r in shipment.recipients]),
            earliest([r.signed_at for r in shipment.recipients]),
            shipment.completed_at,
        )
    # The cut events come from the shipment's and recipients' fields instead; completion is
    # then the last signature, which the service stamps a moment before `completed`.
    got = tuple(ms_of(v) for v in row[:3])
    assert got[:2] == want[:2]
    assert got[2] is not None
    assert want[2] is not None
    assert abs(got[2] - want[2]) < 1000
    assert row[3:] == (True, "completed")
    # The first loaded view is not the first view: the recipient's first open is the field
    # fallback (a single view's `last_viewed_at`) or unknown, never a view from the cut trail.
    assert opened[1] is True
    assert ms_of(opened[0]) in (None, recipient.first_opened_at)
    # Every other shipment is as before.
    want_all = truth(store, loaded_shipments(warehouse), set())
    got_all = marts(warehouse)
    assert got_all["funnel"] == want_all["funnel"]
    assert got_all["per_document"] == {
        k: v for k, v in want_all["per_document"].items() if k in got_all["per_document"]
    }


# ---------------------------------------------------------------------- one-line errors
def _one_line_models_error(warehouse: Path, capfd: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(ModelsError) as caught:
        build_models(warehouse)
    printed = capfd.readouterr()
    assert (printed.out, printed.err) == ("", ""), "nothing but the error may be printed"
    message = str(caught.value)
    assert "\n" not in message
    assert "Traceback" not in message
    return message


def test_a_missing_warehouse_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    message = _one_line_models_error(tmp_path / "missing.duckdb", capfd)
    assert message.startswith("no warehouse at ")
    assert "signing-etl load" in message
    with pytest.raises(WarehouseMissing):
        build_models(tmp_path / "missing.duckdb")
    with pytest.raises(FileNotFoundError):  # what callers caught before
        build_models(tmp_path / "missing.duckdb")
    assert not (tmp_path / "missing.duckdb").exists()


def test_a_file_that_is_not_duckdb_is_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    warehouse = tmp_path / "x.duckdb"
    warehouse.write_text("not a database\n")
    message = _one_line_models_error(warehouse, capfd)
    assert "not a DuckDB file" in message
    assert str(warehouse) in message
    assert warehouse.read_text() == "not a database\n"


def test_a_folder_is_not_a_warehouse(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    message = _one_line_models_error(tmp_path, capfd)
    assert "is a folder" in message


def test_a_warehouse_in_a_folder_that_cannot_be_written_is_one_line(
    loaded_warehouse: tuple[Path, Store], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    warehouse = copy_of(loaded_warehouse[0], tmp_path / "locked")
    folder = warehouse.parent
    with read_only(folder):
        message = _one_line_models_error(warehouse, capfd)
    assert message.startswith(f"cannot write in {folder}")
    assert "writable" in message


def test_dbt_cannot_make_its_folder_beside_the_warehouse(
    loaded_warehouse: tuple[Path, Store], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    warehouse = copy_of(loaded_warehouse[0], tmp_path)
    dbt_dir_for(warehouse).write_text("a file where dbt's folder goes")
    message = _one_line_models_error(warehouse, capfd)
    assert message.startswith(f"cannot write in {tmp_path}")


def test_an_analyst_holding_the_warehouse_does_not_stop_the_models(
    loaded_warehouse: tuple[Path, Store], tmp_path: Path
) -> None:
    # Before the published copy (issue 29), a process holding the file made the build fail in
    # one line ("another process"); now the models build the pipeline's working file and
    # publish it, and the holder keeps reading the copy it opened.
    warehouse = copy_of(loaded_warehouse[0], tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('open', flush=True);"
            " sys.stdin.readline();"
            " print(c.execute('select count(*) from raw.shipments').fetchone()[0], flush=True)",
            str(warehouse),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "open"
        assert_built(build_models(warehouse))
        holder.stdin.write("\n")
        holder.stdin.flush()
        still_reading = int(holder.stdout.readline())
    finally:
        holder.kill()
        holder.wait()
    with duckdb.connect(str(warehouse), read_only=True) as db:
        shipments = db.execute("select count(*) from raw.shipments").fetchone()
        built = db.execute("select count(*) from marts.fct_shipments").fetchone()
    assert shipments == (still_reading,)  # the holder's copy and the published one agree
    assert built is not None
    assert built[0] > 0


def test_a_failing_test_is_one_line_with_the_log_and_nothing_printed(
    loaded_warehouse: tuple[Path, Store], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    warehouse = copy_of(loaded_warehouse[0], tmp_path)
    with duckdb.connect(str(warehouse)) as db:  # an audit event twice: its key test fails
        db.execute(
            "insert into raw.audit_events select * replace ('x' as _dlt_id) "
            "from raw.audit_events limit 1"
        )
    capfd.readouterr()
    result = build_models(warehouse)
    printed = capfd.readouterr()
    assert not result.success
    assert result.tests_errored >= 1
    assert printed.out == ""
    assert printed.err == ""
    assert "\n" not in result.summary
    assert result.first_error
    log_file = dbt_dir_for(warehouse) / "logs" / "dbt.log"
    assert result.log_file == log_file
    assert log_file.is_file()
    assert result.summary.endswith(f"details in {log_file}")


def test_dbt_writes_its_target_and_logs_beside_the_warehouse(
    loaded_warehouse: tuple[Path, Store], tmp_path: Path
) -> None:
    warehouse = copy_of(loaded_warehouse[0], tmp_path)
    result = build_models(warehouse, select="stg_signing__webhooks")
    assert (result.success, result.models_passed) == (True, 1), result.summary
    work = tmp_path / ".signing.dbt"
    assert dbt_dir_for(warehouse) == work
    assert (work / "target" / "manifest.json").is_file()
    assert (work / "logs" / "dbt.log").is_file()
    # One thread on DuckDB unless SIGNING_DBT_THREADS says otherwise (docs/design.md)
    assert "Concurrency: 1 threads" in (work / "logs" / "dbt.log").read_text()
