"""The dbt models built on a loaded sandbox, checked against the sandbox's own records.

The expected side is computed from the sandbox's store (`running.store`), never from the raw
tables or the models, so the comparison checks the whole path: API, pipeline, staging, marts.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from statistics import median
from typing import Any

import duckdb
import pytest
import yaml

from pipelines.load.run import load_incremental
from pipelines.modeling.build import PROJECT_DIR, ModelsResult, build_models
from sandbox import RunningSandbox, Shipment, Store
from tests.support import (
    MODELS_BUILT,
    SandboxFactory,
    admin,
    earliest,
    fast,
    ms_of,
    pointed_at,
    week_of,
)

pytestmark = pytest.mark.slow  # dbt builds of the models, unit tests included

HOUR_MS = 3_600_000
Numbers = dict[str, Any]


# ---------------------------------------------------------------------- expected side


def _stage(shipment: Shipment) -> str:
    recipients = shipment.recipients
    if shipment.status == "completed":
        return "completed"
    if any(r.signed_at is not None for r in recipients):
        return "signed"
    if any(r.first_opened_at is not None for r in recipients):
        return "opened"
    if any(r.sent_at is not None for r in recipients):
        return "sent"
    return "created"


def truth(store: Store) -> Numbers:
    """The marts' numbers as the sandbox's records say they must be."""
    with store.lock:
        shipments = list(store.shipments.by_id.values())
        contact_ids = set(store.contacts.by_id)
        document_ids = set(store.documents.by_id)
    sent = [s for s in shipments if any(r.sent_at is not None for r in s.recipients)]
    recipients = [(s, r) for s in shipments for r in s.recipients]
    received: dict[str, set[str]] = {c: set() for c in contact_ids}
    signed_by: dict[str, set[str]] = {c: set() for c in contact_ids}
    for s, r in recipients:
        # A recipient drawn from a contact the application has deleted since counts for none.
        if r.contact_id in received and r.sent_at is not None:
            received[r.contact_id].add(s.id)
            if r.signed_at is not None:
                signed_by[r.contact_id].add(s.id)
    hours_to_sign: dict[str, list[float]] = {}
    for s, r in recipients:
        if r.signed_at is not None and r.sent_at is not None:
            hours_to_sign.setdefault(s.document_id, []).append((r.signed_at - r.sent_at) / HOUR_MS)
    return {
        "shipments": len(shipments),
        "sent": len(sent),
        "opened": sum(any(r.first_opened_at is not None for r in s.recipients) for s in sent),
        "completed": sum(s.status == "completed" for s in shipments),
        "expired": sum(s.status == "expired" for s in shipments),
        "revoked": sum(s.status == "revoked" for s in shipments),
        "stages": Counter(_stage(s) for s in shipments),
        "recipients": len(recipients),
        "recipients_signed": sum(r.signed_at is not None for _, r in recipients),
        "shipment_milestones": {
            s.id: (
                earliest([r.sent_at for r in s.recipients]),
                earliest([r.first_opened_at for r in s.recipients]),
                earliest([r.signed_at for r in s.recipients]),
                s.completed_at,
                s.expired_at,
                s.revoked_at,
            )
            for s in shipments
        },
        "recipient_milestones": {
            r.id: (r.sent_at, r.delivered_at, r.first_opened_at, r.signed_at) for _, r in recipients
        },
        "per_document": {
            d: (
                sum(s.document_id == d for s in sent),
                sum(s.document_id == d and s.status == "completed" for s in shipments),
            )
            for d in document_ids
        },
        "sent_per_week": Counter(
            week_of(min(r.sent_at for r in s.recipients if r.sent_at is not None)) for s in sent
        ),
        "per_contact": {c: (len(received[c]), len(signed_by[c])) for c in contact_ids},
        "median_hours_to_sign": {d: median(hours) for d, hours in hours_to_sign.items()},
    }


# ---------------------------------------------------------------------- actual side


def marts(warehouse: Path) -> Numbers:
    """The same numbers read from the marts the models built."""
    with duckdb.connect(str(warehouse), read_only=True) as db:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return db.execute(sql).fetchall()

        (totals,) = rows("""
            select count(*), count_if(is_sent), count_if(is_opened), count_if(is_completed),
                   count_if(is_expired), count_if(is_revoked)
            from marts.fct_shipments""")
        (recipients,) = rows("select count(*), count_if(is_signed) from marts.fct_recipients")
        (funnel,) = rows("""
            select sum(count_shipments_sent), sum(count_shipments_opened),
                   sum(count_shipments_completed), sum(count_shipments_expired),
                   sum(count_shipments_revoked), sum(count_recipients_signed)
            from marts.fct_signing_funnel""")
        assert funnel == (*totals[1:], recipients[1]), "the funnel's totals differ from its facts"
        return {
            "shipments": totals[0],
            "sent": totals[1],
            "opened": totals[2],
            "completed": totals[3],
            "expired": totals[4],
            "revoked": totals[5],
            "stages": Counter(
                dict(rows("select funnel_stage, count(*) from marts.fct_shipments group by 1"))
            ),
            "recipients": recipients[0],
            "recipients_signed": recipients[1],
            "shipment_milestones": {
                row[0]: tuple(ms_of(v) for v in row[1:])
                for row in rows("""
                    select shipment_id, sent_at, first_opened_at, first_signed_at,
                           completed_at, expired_at, revoked_at
                    from marts.fct_shipments""")
            },
            "recipient_milestones": {
                row[0]: tuple(ms_of(v) for v in row[1:])
                for row in rows("""
                    select recipient_id, sent_at, delivered_at, first_opened_at, signed_at
                    from marts.fct_recipients""")
            },
            "per_document": {
                row[0]: (row[1], row[2])
                for row in rows("""
                    select document_id, count_shipments_sent, count_shipments_completed
                    from marts.dim_documents where not is_deleted""")
            },
            "sent_per_week": Counter(
                dict(
                    rows("""
                        select sent_week, sum(count_shipments_sent)
                        from marts.fct_signing_funnel group by 1""")
                )
            ),
            "per_contact": {
                row[0]: (row[1], row[2])
                for row in rows("""
                    select contact_id, count_shipments_received, count_shipments_signed
                    from marts.dim_contacts""")
            },
            "median_hours_to_sign": dict(
                rows("""
                    select document_id, median_hours_to_sign from marts.fct_time_to_sign
                    where time_grain = 'document' and count_signatures > 0""")
            ),
        }


def assert_marts_match(warehouse: Path, store: Store) -> None:
    want, got = truth(store), marts(warehouse)
    # Hours are computed from whole seconds in SQL, from milliseconds here.
    want_hours, got_hours = want.pop("median_hours_to_sign"), got.pop("median_hours_to_sign")
    assert set(got_hours) == set(want_hours)
    for document, hours in want_hours.items():
        assert got_hours[document] == pytest.approx(hours, abs=0.001), document
    for name, expected in want.items():
        if isinstance(expected, dict):
            wrong = {k: (v, got[name].get(k)) for k, v in expected.items() if got[name].get(k) != v}
            assert not wrong, f"{name}: {len(wrong)} differ, e.g. {list(wrong.items())[:3]}"
            extra = set(got[name]) - set(expected)
            assert not extra, f"{name}: {len(extra)} not in the sandbox, e.g. {list(extra)[:3]}"
        else:
            assert got[name] == expected, name


# ---------------------------------------------------------------------- helpers
def load_and_build(running: RunningSandbox, warehouse: Path) -> ModelsResult:
    with pointed_at(running):
        loaded = load_incremental(warehouse, settings=fast())
    assert loaded.stopped is None
    result = build_models(warehouse)
    assert result.success, result.summary
    assert result.models_errored == 0
    assert result.tests_errored == 0
    assert result.models_passed == MODELS_BUILT
    return result


def add_rows_of_an_unfinished_load(warehouse: Path) -> None:
    """A shipment and its recipient whose dlt load never completed (no `_dlt_loads` row)."""
    with duckdb.connect(str(warehouse)) as db:
        (workspace,) = db.execute("select id from raw.workspaces").fetchone() or ("",)
        db.execute(
            """insert into raw.shipments
               (id, workspace_id, status, document_id, created_at, _fetch_seq,
                _dlt_load_id, _dlt_id)
               values ('shp_unfinished', ?, 'completed', 'doc_unfinished',
                       '2025-12-01 00:00:00+00', 0, '0000000000.0', 'unfinished-root')""",
            [workspace],
        )
        db.execute(
            """insert into raw.shipments__recipients
               (id, shipment_id, workspace_id, position, status, sent_at, signed_at,
                _dlt_root_id, _dlt_parent_id, _dlt_list_idx, _dlt_id)
               values ('rcp_unfinished', 'shp_unfinished', ?, 0, 'signed',
                       '2025-12-01 00:00:01+00', '2025-12-01 01:00:00+00',
                       'unfinished-root', 'unfinished-root', 0, 'unfinished-child')""",
            [workspace],
        )


# ---------------------------------------------------------------------- tests
def test_marts_match_the_sandbox_and_follow_an_incremental_load(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=300, limits_enabled=False)
    warehouse = tmp_path / "warehouse" / "signing.duckdb"

    load_and_build(running, warehouse)
    assert_marts_match(warehouse, running.store)
    before = truth(running.store)

    add_rows_of_an_unfinished_load(warehouse)
    admin(running, "POST", "/advance", {"days": 3})
    after = truth(running.store)
    assert after["shipments"] > before["shipments"]
    assert after["shipment_milestones"] != before["shipment_milestones"]

    load_and_build(running, warehouse)
    assert_marts_match(warehouse, running.store)

    # The models' unit tests: left out of a load's build, run when asked (all of them pass).
    tested = " ".join(sorted({test["model"] for test in unit_tests_of_the_project()}))
    without = build_models(warehouse, select=tested)
    units = build_models(warehouse, select=tested, unit_tests=True)
    assert without.success, without.summary
    assert units.success, units.summary
    assert units.tests_passed - without.tests_passed == len(unit_tests_of_the_project()) > 0


def unit_tests_of_the_project() -> list[dict[str, Any]]:
    """The unit tests the project's YAML defines, read from the files (not from dbt)."""
    return [
        test
        for path in sorted((PROJECT_DIR / "models").rglob("*.yml"))
        for test in (yaml.safe_load(path.read_text()) or {}).get("unit_tests", [])
    ]


def test_build_refuses_a_warehouse_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no warehouse"):
        build_models(tmp_path / "missing.duckdb")
