"""The synthetic data: deterministic, realistic in its funnel, and large enough."""

from __future__ import annotations

from collections import Counter

import pytest

from sandbox import SandboxConfig, Shipment, Store
from tests.support import START_MS


def _fingerprint(store: Store) -> list[tuple[object, ...]]:
    return [
        (s.id, s.status, s.updated_at, tuple((r.id, r.status, r.signed_at) for r in s.recipients))
        for s in sorted(store.shipments.by_id.values(), key=lambda s: s.id)
    ]


def test_same_seed_and_size_give_the_same_data() -> None:
    first = Store(SandboxConfig(seed=3, shipments=400, start_ms=START_MS))
    second = Store(SandboxConfig(seed=3, shipments=400, start_ms=START_MS))
    other = Store(SandboxConfig(seed=4, shipments=400, start_ms=START_MS))
    assert _fingerprint(first) == _fingerprint(second)
    assert [c.to_json() for c in first.contacts.by_id.values()] == [
        c.to_json() for c in second.contacts.by_id.values()
    ]
    assert first.main_key.secret == second.main_key.secret
    assert _fingerprint(first) != _fingerprint(other)


@pytest.fixture(scope="module")
def store() -> Store:
    return Store(SandboxConfig(seed=11, shipments=4_000, start_ms=START_MS))


def test_funnel_shares_are_realistic(store: Store) -> None:
    shipments = list(store.shipments.by_id.values())
    finished = [s for s in shipments if s.status != "sent"]
    shares = {k: v / len(finished) for k, v in Counter(s.status for s in finished).items()}
    assert 0.5 < shares["completed"] < 0.85
    assert 0.1 < shares["expired"] < 0.45
    assert 0.005 < shares["revoked"] < 0.08
    recipients = [r for s in shipments for r in s.recipients if r.sent_at is not None]
    opened = sum(r.first_opened_at is not None for r in recipients) / len(recipients)
    failed = sum(r.delivery_status == "failed" for r in recipients) / len(recipients)
    assert 0.75 < opened < 0.98
    assert 0.002 < failed < 0.06
    assert Counter(len(s.recipients) for s in shipments).keys() >= {1, 2, 3}


def test_timestamps_follow_the_funnel_order(store: Store) -> None:
    for shipment in store.shipments.by_id.values():
        for recipient in shipment.recipients:
            stamps = [
                recipient.sent_at,
                recipient.delivered_at,
                recipient.first_opened_at,
                recipient.signed_at,
            ]
            present = [t for t in stamps if t is not None]
            assert present == sorted(present)
            assert all(t >= shipment.created_at for t in present)
            if recipient.signed_at is not None:
                assert recipient.first_opened_at is not None
                assert recipient.signed_at < shipment.expires_at
        _check_terminal_state(shipment)


def _check_terminal_state(shipment: Shipment) -> None:
    signed = [r.signed_at for r in shipment.recipients]
    if shipment.status == "completed":
        assert all(t is not None for t in signed)
        assert shipment.completed_at is not None
        assert shipment.completed_at >= max(t for t in signed if t is not None)
    if shipment.status == "expired":
        assert shipment.expired_at == shipment.expires_at
        assert not all(t is not None for t in signed)
    if shipment.status == "revoked":
        assert shipment.revoked_at is not None
        assert shipment.revoked_at < shipment.expires_at


def test_sequential_recipients_are_sent_after_the_previous_signed(store: Store) -> None:
    sequential = [
        s
        for s in store.shipments.by_id.values()
        if s.sign_mode == "sequential" and s.status == "completed"
    ]
    assert sequential
    for shipment in sequential:
        for before, after in zip(shipment.recipients, shipment.recipients[1:], strict=False):
            assert before.signed_at is not None
            assert after.sent_at is not None
            assert after.sent_at > before.signed_at


def test_delays_are_realistic(store: Store) -> None:
    hours = sorted(
        (r.first_opened_at - r.delivered_at) / 3_600_000
        for s in store.shipments.by_id.values()
        for r in s.recipients
        if r.first_opened_at is not None and r.delivered_at is not None
    )
    median = hours[len(hours) // 2]
    assert 1 < median < 8, "half of the recipients open within a few hours"
    assert hours[int(len(hours) * 0.95)] > 24, "a tail opens days later"


def test_contacts_have_dotted_custom_keys_and_groups(store: Store) -> None:
    contacts = list(store.contacts.by_id.values())
    assert any("." in key for c in contacts for key in c.custom)
    assert any(c.group_ids for c in contacts)
    recipients_from_contacts = sum(
        r.contact_id is not None for s in store.shipments.by_id.values() for r in s.recipients
    )
    assert recipients_from_contacts > 0


@pytest.mark.slow
def test_two_hundred_thousand_shipments_generate() -> None:
    big = Store(SandboxConfig(seed=1, shipments=200_000, start_ms=START_MS))
    assert len(big.shipments) == 200_000
    page = big.shipments.page(None, "asc", 100_000, 200)
    assert len(page.items) == 200
    assert page.total == 200_000
