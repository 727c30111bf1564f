"""The marts an analyst asks "who, which workspace, as of when" of, on DuckDB and on Postgres,
checked against the sandbox's own records: the signers shipments wait on now (names, since
when, for how long at the data's as-of), completions by week of completion, who each
recipient is, every mart's workspace name, and each workspace's as-of and load time.

Two workspaces whose ids collide share one warehouse, so a name or a count that leaked from
one workspace to the other would show.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from statistics import median
from typing import Any

import pytest

from sandbox import RunningSandbox, Store
from tests.models.workspaces import (
    SHARED_SEED,
    colliding_workspaces,
    load_every_workspace,
    shared_workspaces,
)
from tests.support import earliest, ms_of, week_of
from tests.support.destinations import DESTINATIONS, WarehouseUnderTest, warehouse_under_test

pytestmark = pytest.mark.slow  # dbt builds of the models, on DuckDB and PostgreSQL

HOUR_MS = 3_600_000


@dataclass
class Loaded:
    """Two colliding workspaces of one sandbox loaded into one warehouse, models built."""

    running: RunningSandbox
    place: WarehouseUnderTest
    began: datetime  # the wall clock just before the first load and just after the last
    ended: datetime

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return self.place.query(sql, *params)


@pytest.fixture(scope="module", params=DESTINATIONS)
def loaded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Loaded]:
    configs = colliding_workspaces(seed=SHARED_SEED)
    with RunningSandbox(*configs) as running:
        if request.param == "duckdb":  # the warehouse tests/models/test_workspaces.py reads too
            shared = shared_workspaces(tmp_path_factory, configs)
            place, began, ended = WarehouseUnderTest(shared.warehouse), shared.began, shared.ended
        else:
            place = warehouse_under_test(request.param, tmp_path_factory.mktemp("analyst"), request)
            with place.configured() as warehouse:
                began, ended = load_every_workspace(running, warehouse)
        yield Loaded(running, place, began, ended)


# ---------------------------------------------------------------------- expected side


def _iso_ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def newest_change(store: Store) -> int:
    """The service's time of the newest change a full load brings: a document or contact
    updated, an audit event (what `status` and the marts call the data's as-of)."""
    with store.lock:
        times = [d.updated_at for d in store.documents.by_id.values()]
        times += [c.updated_at for c in store.contacts.by_id.values()]
        times += [
            _iso_ms(e["at"]) for s in store.shipments.by_id.values() for e in s.audit_events()
        ]
    return max(times)


def waiting_now(store: Store) -> set[tuple[Any, ...]]:
    """(shipment, recipient, name, e-mail, company, document, waiting since) of every signer a
    running shipment waits on: the document reached them and they have not signed."""
    with store.lock:
        return {
            (s.id, r.id, r.name, r.email, r.company, s.document_name, r.sent_at)
            for s in store.shipments.by_id.values()
            if s.status == "sent"
            for r in s.recipients
            if r.sent_at is not None and r.signed_at is None
        }


def completions_by_week(store: Store) -> dict[Any, tuple[int, float]]:
    """Per week of completion: shipments completed and the median hours from sending."""
    hours: dict[Any, list[float]] = {}
    with store.lock:
        for s in store.shipments.by_id.values():
            if s.status == "completed" and s.completed_at is not None:
                sent = earliest([r.sent_at for r in s.recipients])
                assert sent is not None
                hours.setdefault(week_of(s.completed_at), []).append(
                    (s.completed_at - sent) / HOUR_MS
                )
    return {week: (len(values), median(values)) for week, values in hours.items()}


# ---------------------------------------------------------------------- tests


def test_the_shipments_waiting_name_each_signer_and_since_when(loaded: Loaded) -> None:
    for store in loaded.running.stores:
        want = waiting_now(store)
        assert want, "nothing waits: a sandbox that proves nothing"
        rows = loaded.rows(
            "select shipment_id, recipient_id, recipient_name, recipient_email, "
            "recipient_company, document_name, waiting_since, hours_waiting, "
            "count_signers_waiting from marts.fct_shipments_waiting where workspace_id = ?",
            store.workspace.id,
        )
        assert {(*row[:6], ms_of(row[6])) for row in rows} == want
        as_of = newest_change(store)
        per_shipment = Counter(shipment for shipment, *_ in want)
        for row in rows:
            # hours at the data's as-of, from whole seconds in SQL
            waited = (as_of // 1000 - ms_of(row[6]) // 1000) / 3600  # type: ignore[operator]
            assert float(row[7]) == pytest.approx(waited, abs=0.001), row[1]
            assert row[8] == per_shipment[row[0]], row[0]


def test_completions_by_week_of_completion_equal_the_sandbox(loaded: Loaded) -> None:
    for store in loaded.running.stores:
        want = completions_by_week(store)
        assert len(want) > 2, "completions in too few weeks to prove the grouping"
        got = {
            week: (count, float(hours))
            for week, count, hours in loaded.rows(
                "select completed_week, count_shipments_completed, median_hours_to_complete "
                "from marts.fct_completions_by_week where workspace_id = ?",
                store.workspace.id,
            )
        }
        assert {week: count for week, (count, _) in got.items()} == {
            week: count for week, (count, _) in want.items()
        }
        for week, (_, hours) in want.items():
            assert got[week][1] == pytest.approx(hours, abs=0.001), week
        # the same completions, counted by week of sending in the funnel
        (funnel,) = loaded.rows(
            "select sum(count_shipments_completed) from marts.fct_signing_funnel "
            "where workspace_id = ?",
            store.workspace.id,
        )
        assert funnel[0] == sum(count for count, _ in want.values())


def test_recipient_marts_say_who_each_recipient_is(loaded: Loaded) -> None:
    for store in loaded.running.stores:
        with store.lock:
            people = {
                r.id: (r.name, r.email, r.company)
                for s in store.shipments.by_id.values()
                for r in s.recipients
            }
            sent = {
                r.id
                for s in store.shipments.by_id.values()
                for r in s.recipients
                if r.sent_at is not None
            }
        for mart, expected in (
            ("fct_recipients", people),
            ("fct_signer_waits", {i: who for i, who in people.items() if i in sent}),
        ):
            rows = loaded.rows(
                f"select recipient_id, recipient_name, recipient_email, recipient_company "
                f"from marts.{mart} where workspace_id = ?",
                store.workspace.id,
            )
            assert {row[0]: tuple(row[1:]) for row in rows} == expected, mart


def test_every_mart_names_the_workspace_of_each_row(loaded: Loaded) -> None:
    marts = [
        name
        for (name,) in loaded.rows(
            "select table_name from information_schema.tables where table_schema = 'marts'"
        )
    ]
    assert len(marts) == 18
    want = {(s.workspace.id, s.workspace.name) for s in loaded.running.stores}
    assert len({name for _, name in want}) == 2
    for mart in marts:
        got = set(loaded.rows(f"select distinct workspace_id, workspace_name from marts.{mart}"))
        # The deletions marts hold a workspace only once the service deleted something there.
        may_lack = mart in ("fct_deleted_records", "fct_deletions_by_day")
        assert got == want or (may_lack and got <= want), mart


def test_each_workspace_says_as_of_when_its_data_is_and_when_it_was_loaded(
    loaded: Loaded,
) -> None:
    rows = loaded.rows(
        "select workspace_id, workspace_name, data_as_of, loaded_at, count_shipments, "
        "count_shipments_waiting, count_signers_waiting from marts.dim_workspaces"
    )
    assert len(rows) == 2
    for workspace_id, name, as_of, loaded_at, shipments, waiting, signers in rows:
        store = next(s for s in loaded.running.stores if s.workspace.id == workspace_id)
        assert name == store.workspace.name
        assert ms_of(as_of) == newest_change(store)
        assert loaded.began <= loaded_at <= loaded.ended
        assert shipments == len(store.shipments.by_id)
        pairs = waiting_now(store)
        assert (waiting, signers) == (len({p[0] for p in pairs}), len(pairs))
