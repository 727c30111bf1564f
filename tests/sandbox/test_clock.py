"""The sandbox's clock: advancing it applies that period's activity, and activity can run in
the background while a client pages."""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest

from sandbox import iso
from tests.support import START_MS, SandboxFactory, admin, admin_response, client_for, page_all


def test_date_header_and_state_follow_the_sandbox_clock(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False)
    with client_for(running) as client:
        before = parsedate_to_datetime(client.get("/me").headers["Date"])
        assert abs(before.timestamp() * 1000 - START_MS) < 60_000
        moved = admin(running, "POST", "/advance", {"days": 3})
        after = parsedate_to_datetime(client.get("/me").headers["Date"])
    assert 3 * 86_400 <= (after - before).total_seconds() < 3 * 86_400 + 60
    assert moved["new_shipments"] > 0
    assert moved["steps"] > 0


def test_advance_changes_exactly_what_updated_since_then_returns(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=600)
    store = running.store
    with client_for(running) as client:
        cursor = store.clock.now_ms()
        before = {s.id: s.to_json() for s in store.shipments.by_id.values()}
        admin(running, "POST", "/advance", {"hours": 36})
        changed = _all(client, "/shipments", since=cursor)
    after = {s.id: s.to_json() for s in store.shipments.by_id.values()}
    truly_changed = {i for i, body in after.items() if before.get(i) != body}
    assert truly_changed
    new = set(after) - set(before)
    assert new
    assert {s["id"] for s in changed} == truly_changed
    assert new <= truly_changed


def test_advance_moves_shipments_through_the_funnel(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False, shipments=300)
    store = running.store
    admin(running, "POST", "/advance", {"days": 60})
    fresh = [s for s in store.shipments.by_id.values() if s.created_at >= START_MS]
    assert fresh
    statuses = {s.status for s in fresh}
    assert {"completed", "expired"} <= statuses
    assert any(r.signed_at for s in fresh for r in s.recipients)


def test_background_activity_changes_records_while_a_client_pages(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=2_000)
    store = running.store
    start = store.clock.now_ms()
    started = admin(running, "POST", "/activity", {"speed": 3600, "touches_per_second": 400})
    assert started == {"running": True}
    with client_for(running) as client:
        seen = _all(client, "/contacts", since=None, pause=0.02)
    admin(running, "POST", "/activity", {"running": False})
    changed_during = [c for c in store.contacts.by_id.values() if c.updated_at > start]
    assert changed_during, "activity changed contacts while the client paged"
    assert seen
    state = admin(running, "GET", "/state")
    assert state["activity_running"] is False


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"speed": "fast"}, id="speed-a-string"),
        pytest.param({"speed": -60}, id="speed-negative"),
        pytest.param({"touches_per_second": None}, id="touches-null"),
        pytest.param({"running": "no"}, id="running-a-string"),
    ],
)
def test_malformed_activity_requests_are_refused_and_change_nothing(
    make_sandbox: SandboxFactory, body: dict[str, Any]
) -> None:
    running = make_sandbox(limits_enabled=False)
    admin(running, "POST", "/activity", {"speed": 60, "touches_per_second": 1})
    response = admin_response(running, "POST", "/activity", body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert admin(running, "GET", "/state")["activity_running"] is True
    admin(running, "POST", "/activity", {"running": False})


def test_bulk_touch_gives_records_one_shared_timestamp(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False, shipments=2_000)
    result = admin(running, "POST", "/touch", {"entity": "contacts", "count": 300})
    assert result["touched"] == 300
    with client_for(running) as client:
        newest = client.get(
            "/contacts", params={"limit": 1, "offset": len(running.store.contacts) - 1}
        ).json()["data"][0]
        shared = _all(client, "/contacts", since=_ms(newest["updated_at"]))
    assert len(shared) == 300
    assert {c["updated_at"] for c in shared} == {newest["updated_at"]}


def _ms(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _all(
    client: httpx.Client, path: str, since: int | None, pause: float = 0.0
) -> list[dict[str, Any]]:
    """Every record of a list, archived shipments included unless the path says otherwise."""
    params: dict[str, str] = {"include_archived": "true"} if path == "/shipments" else {}
    if "?" in path:  # an explicit query overrides the default above
        path, query = path.split("?", 1)
        params = dict(pair.split("=", 1) for pair in query.split("&"))
    if since is not None:
        params["updated_since"] = iso(since) or ""
    return page_all(client, path, pause=pause, **params)


def test_lists_stay_exact_after_records_move(make_sandbox: SandboxFactory) -> None:
    """Records re-keyed by activity appear once, in both the default and archived views."""
    running = make_sandbox(limits_enabled=False, shipments=600)
    store = running.store
    admin(running, "POST", "/advance", {"days": 20})
    admin(running, "POST", "/touch", {"entity": "shipments", "count": 200})
    with client_for(running) as client:
        visible = _all(client, "/shipments?include_archived=false", since=None)
        everything = _all(client, "/shipments", since=None)
    unarchived = {s.id for s in store.shipments.by_id.values() if s.archived_at is None}
    assert len(visible) == len({s["id"] for s in visible}) == len(unarchived)
    assert {s["id"] for s in visible} == unarchived
    assert len(everything) == len({s["id"] for s in everything}) == len(store.shipments)
