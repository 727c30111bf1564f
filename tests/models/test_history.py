"""History built by the models, on DuckDB and on Postgres, checked against the sandbox's own
records: status intervals against intervals computed here from each shipment's event log, who
was waited on at the end of several days against the recipients' and shipments' recorded
times, attribute versions against what changed in the sandbox between two loads, and the
warning test that flags a status no audit event explains."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipelines.load.run import load_incremental
from pipelines.modeling.build import ModelsResult, build_models
from sandbox import RunningSandbox, SandboxConfig, Shipment, Store
from tests.support import MODELS_BUILT, START_MS, admin, fast, ms_of
from tests.support.destinations import DESTINATIONS, WarehouseUnderTest, warehouse_under_test

pytestmark = pytest.mark.slow  # dbt builds of the models between loads, on DuckDB and PostgreSQL

DAY = timedelta(days=1)
# The status no event explains: a completed shipment the service reports as expired.
UNEXPLAINED = "expired"
Interval = tuple[str, str, int, int | None]  # (id, status, valid_from, valid_to) in ms


@dataclass
class History:
    """One sandbox loaded and built twice (half a day apart) into one warehouse."""

    running: RunningSandbox
    place: WarehouseUnderTest
    before: dict[str, dict[str, Any]]  # each record's JSON as the first load read it
    unexplained: str  # the shipment whose status field no event explains
    builds: list[ModelsResult]

    @property
    def store(self) -> Store:
        return self.running.store

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return self.place.query(sql, *params)


def _load_and_build(running: RunningSandbox, place: WarehouseUnderTest) -> ModelsResult:
    with place.configured() as warehouse:
        loaded = load_incremental(warehouse, settings=fast(running))
        assert loaded.exit_code == 0, loaded.stopped
        built = build_models(warehouse)
    assert built.success, built.summary
    assert built.models_passed == MODELS_BUILT, built.summary
    return built


# What a contact's version holds (snp_signing__contacts' compared columns, as the API names them).
CONTACT_VERSIONED = ("id", "name", "email", "phone", "company", "position", "notes")


def _records(store: Store) -> dict[str, dict[str, Any]]:
    """Every live shipment (without its recipients), recipient and contact as the API shows it."""
    with store.lock:
        found: dict[str, dict[str, Any]] = {}
        for shipment in store.shipments.by_id.values():
            body = shipment.to_json()
            found[shipment.id] = {k: v for k, v in body.items() if k != "recipients"}
            for recipient in body["recipients"]:
                found[recipient["id"]] = recipient
        for contact in store.contacts.by_id.values():
            # A contact's version holds these; its custom properties and `updated_at` alone
            # make no version (the snapshot holds neither).
            body = contact.to_json()
            found[contact.id] = {k: body[k] for k in CONTACT_VERSIONED if k in body}
        return found


def _make_unexplained(store: Store) -> str:
    """A completed shipment whose status the service now reports as `expired`, with no event."""
    with store.lock:
        shipment = next(s for s in store.shipments.by_id.values() if s.status == "completed")
        shipment.status = UNEXPLAINED
        return shipment.id


@pytest.fixture(scope="module", params=DESTINATIONS)
def history(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[History]:
    place = warehouse_under_test(request.param, tmp_path_factory.mktemp("history"), request)
    # A month of history: many shipments are still under way, so half a day changes many.
    config = SandboxConfig(
        seed=11, shipments=160, history_days=30, start_ms=START_MS, limits_enabled=False
    )
    with RunningSandbox(config) as running:
        unexplained = _make_unexplained(running.store)
        first = _load_and_build(running, place)
        before = _records(running.store)
        admin(running, "POST", "/advance", {"hours": 12})
        admin(running, "POST", "/touch", {"entity": "contacts", "count": 5})  # edited by hand
        second = _load_and_build(running, place)
        yield History(running, place, before, unexplained, [first, second])


# ---------------------------------------------------------------------- expected side
def _ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _shipment_intervals(shipment: Shipment) -> list[Interval]:
    """From the event log: `sent` from creation to the first ending event, then that one."""
    endings = [
        e for e in shipment.audit_events() if e["type"] in ("completed", "expired", "revoked")
    ]
    if not endings:
        return [(shipment.id, "sent", shipment.created_at, None)]
    end = endings[0]
    ended_at = _ms(end["at"])
    return [
        (shipment.id, "sent", shipment.created_at, ended_at),
        (shipment.id, end["type"], ended_at, None),
    ]


def _recipient_intervals(shipment: Shipment) -> list[Interval]:
    """From the event log: pending from the shipment's creation, then the first `sent`,
    `opened` and `signed` event of each recipient, each to the next."""
    events = shipment.audit_events()
    intervals: list[Interval] = []
    for recipient in shipment.recipients:
        changes = [("pending", shipment.created_at)]
        for kind in ("sent", "opened", "signed"):
            times = [
                _ms(e["at"])
                for e in events
                if e["type"] == kind and e["recipient_id"] == recipient.id
            ]
            if times:
                changes.append((kind, min(times)))
        for (status, since), following in zip(changes, [*changes[1:], None], strict=True):
            until = following[1] if following else None
            intervals.append((recipient.id, status, since, until))
    return intervals


def _waiting_at(store: Store, moment: int) -> set[tuple[str, str]]:
    """(shipment, recipient) pairs the shipment waited on at `moment`, from the recipients' and
    shipments' recorded times: the document had reached them, they had not signed, and the
    shipment had not ended."""
    with store.lock:
        pairs = set()
        for shipment in store.shipments.by_id.values():
            ends = [shipment.completed_at, shipment.expired_at, shipment.revoked_at]
            ended = min((t for t in ends if t is not None), default=None)
            for recipient in shipment.recipients:
                reached = recipient.sent_at is not None and recipient.sent_at < moment
                unsigned = recipient.signed_at is None or recipient.signed_at >= moment
                running = ended is None or ended >= moment
                if reached and unsigned and running:
                    pairs.add((shipment.id, recipient.id))
        return pairs


# ---------------------------------------------------------------------- tests
def test_status_intervals_equal_the_event_log_of_every_shipment(history: History) -> None:
    with history.store.lock:
        shipments = list(history.store.shipments.by_id.values())
    want_shipments = {i for s in shipments for i in _shipment_intervals(s)}
    want_recipients = {i for s in shipments for i in _recipient_intervals(s)}

    got_shipments = {
        (row[0], row[1], ms_of(row[2]), ms_of(row[3]))
        for row in history.rows(
            "select shipment_id, shipment_status, valid_from, valid_to "
            "from marts.fct_shipment_status_intervals"
        )
    }
    got_recipients = {
        (row[0], row[1], ms_of(row[2]), ms_of(row[3]))
        for row in history.rows(
            "select recipient_id, recipient_status, valid_from, valid_to "
            "from marts.fct_recipient_status_intervals"
        )
    }

    assert len(want_shipments) > len(shipments)  # some shipments ended, some did not
    assert got_shipments == want_shipments
    assert got_recipients == want_recipients
    current = history.rows(
        "select count(*) from marts.fct_shipment_status_intervals where is_current"
    )
    assert current == [(len(shipments),)]


def test_who_was_waited_on_at_the_end_of_a_day_equals_the_sandbox(history: History) -> None:
    start = datetime.fromtimestamp(START_MS / 1000, UTC)
    days = [(start - DAY * n).date() for n in (20, 9, 3, 1)] + [start.date()]
    for day in days:
        end = datetime(day.year, day.month, day.day, tzinfo=UTC) + DAY
        want = _waiting_at(history.store, round(end.timestamp() * 1000))
        assert want, f"nothing waited at the end of {day}: a day that proves nothing"
        got = set(
            history.rows(
                "select shipment_id, recipient_id from marts.fct_signer_waits "
                "where waiting_since < ? and (waiting_until is null or waiting_until >= ?)",
                end,
                end,
            )
        )
        assert got == want, day
        counts = history.rows(
            "select count_shipments_waiting, count_signers_waiting from marts.fct_waiting_by_day "
            "where waiting_day = ?",
            day,
        )
        assert counts == [(len({s for s, _ in want}), len(want))], day


def test_the_pending_signers_and_since_when_equal_the_sandbox(history: History) -> None:
    with history.store.lock:
        want = {
            (s.id, r.id, r.sent_at)
            for s in history.store.shipments.by_id.values()
            if s.status == "sent"
            for r in s.recipients
            if r.sent_at is not None and r.signed_at is None
        }
    got = {
        (row[0], row[1], ms_of(row[2]))
        for row in history.rows(
            "select shipment_id, recipient_id, waiting_since from marts.fct_signer_waits "
            "where is_waiting"
        )
    }
    assert want
    assert got == want


@pytest.mark.parametrize(
    ("mart", "key", "kind"),
    [
        ("dim_shipment_versions", "shipment_id", "shp_"),
        ("dim_recipient_versions", "recipient_id", "rcp_"),
        ("dim_contact_versions", "contact_id", "ct_"),
    ],
)
def test_a_record_changed_between_loads_has_two_versions_and_an_unchanged_one_one(
    history: History, mart: str, key: str, kind: str
) -> None:
    after = _records(history.store)
    ids = {i for i in after if i.startswith(kind)}
    # Records the half day created are new: one version, like the unchanged ones.
    changed = {i for i in ids if i in history.before and history.before[i] != after[i]}
    assert changed, "the half day changed none"
    assert ids - changed, "the half day changed all"
    versions = dict(history.rows(f"select {key}, count(*) from marts.{mart} group by 1"))
    assert versions == {i: 2 if i in changed else 1 for i in ids}
    current = history.rows(f"select count(*) from marts.{mart} where is_current_version")
    assert current == [(len(ids),)]


def test_a_status_no_audit_event_explains_is_flagged(history: History) -> None:
    assert [b.tests_warned for b in history.builds] == [1, 1]
    flagged = history.rows(
        "select shipment_id, shipment_status "
        "from dbt_test__audit.assert_shipment_status_explained_by_audit_trail"
    )
    assert flagged == [(history.unexplained, UNEXPLAINED)]
