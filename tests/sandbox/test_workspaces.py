"""Several workspaces: sandboxes whose record ids collide on purpose (`id_seed`), and one server
that serves several workspaces, routing each request by its key, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from email.utils import parsedate_to_datetime
from typing import Any

import pytest

from sandbox import RunningSandbox, SandboxConfig, Store, bind, serve_forever
from tests.support import (
    START_MS,
    SandboxFactory,
    admin,
    admin_response,
    client_for,
    page_all,
)

LISTS = ("/shipments", "/contacts", "/documents")


def _lists(running: RunningSandbox, key: str | None = None) -> dict[str, dict[str, Any]]:
    """Every record of every list, by id, as one key sees them."""
    with client_for(running, key) as client:
        return {
            path: {r["id"]: r for r in page_all(client, path, include_archived="true")}
            for path in LISTS
        }


def _me(running: RunningSandbox, key: str) -> str:
    with client_for(running, key) as client:
        response = client.get("/me")
    assert response.status_code == 200, response.text
    workspace_id = response.json()["workspace"]["id"]
    assert isinstance(workspace_id, str)
    return workspace_id


def _date_ms(running: RunningSandbox, key: str) -> float:
    """The workspace's clock, as the Date header of an answer to its key shows it."""
    with client_for(running, key) as client:
        return parsedate_to_datetime(client.get("/me").headers["Date"]).timestamp() * 1000


def _differing(first: dict[str, Any], second: dict[str, Any]) -> int:
    """How many records under one id differ between two workspaces."""
    return sum(first[i] != second[i] for i in first)


# ---------------------------------------------------------------------- id_seed
def test_same_id_seed_gives_the_same_ids_with_different_data(
    make_sandbox: SandboxFactory,
) -> None:
    first = make_sandbox(seed=3, id_seed=5, limits_enabled=False)
    second = make_sandbox(seed=4, id_seed=5, limits_enabled=False)
    one, other = _lists(first), _lists(second)
    for path in LISTS:
        assert one[path].keys() == other[path].keys(), path
        assert _differing(one[path], other[path]) >= len(one[path]) * 0.9, path
    # The n-th shipment of each has the same id, and so has its k-th recipient.
    assert list(first.store.shipments.by_id) == list(second.store.shipments.by_id)
    for shipment_id, shipment in one["/shipments"].items():
        theirs = other["/shipments"][shipment_id]["recipients"]
        for mine, their in zip(shipment["recipients"], theirs, strict=False):
            assert (mine["id"], mine["link_id"]) == (their["id"], their["link_id"])
    # Identity is not shared: another workspace id, another key, which the other refuses.
    assert _me(first, first.api_key) != _me(second, second.api_key)
    assert first.api_key != second.api_key
    with client_for(second, first.api_key) as client:
        assert client.get("/me").status_code == 401


def test_id_seed_defaults_to_seed() -> None:
    implicit = Store(SandboxConfig(seed=5, shipments=200, start_ms=START_MS))
    explicit = Store(SandboxConfig(seed=9, id_seed=5, shipments=200, start_ms=START_MS))
    other = Store(SandboxConfig(seed=9, shipments=200, start_ms=START_MS))
    assert list(implicit.shipments.by_id) == list(explicit.shipments.by_id)
    assert list(implicit.contacts.by_id) == list(explicit.contacts.by_id)
    assert list(implicit.documents.by_id) == list(explicit.documents.by_id)
    assert not set(other.shipments.by_id) & set(implicit.shipments.by_id)


def test_ids_keep_colliding_as_the_clocks_advance(make_sandbox: SandboxFactory) -> None:
    first = make_sandbox(seed=3, id_seed=5, limits_enabled=False)
    second = make_sandbox(seed=4, id_seed=5, limits_enabled=False)
    before = set(first.store.shipments.by_id)
    for running in (first, second):
        admin(running, "POST", "/advance", {"days": 6})
    new = [[i for i in r.store.shipments.by_id if i not in before] for r in (first, second)]
    shorter = min(len(ids) for ids in new)
    assert shorter > 0
    assert new[0][:shorter] == new[1][:shorter]


def test_workspace_ids_and_keys_come_from_seed_and_position() -> None:
    config = SandboxConfig(seed=3, shipments=100, start_ms=START_MS)
    stores = [Store(config, position=n) for n in range(2)] + [Store(config)]
    assert stores[0].workspace.id != stores[1].workspace.id
    assert stores[0].main_key.secret != stores[1].main_key.secret
    assert stores[0].workspace.id == stores[2].workspace.id  # deterministic
    assert stores[0].main_key.secret == stores[2].main_key.secret
    assert list(stores[0].shipments.by_id) == list(stores[1].shipments.by_id)


def test_workspaces_share_the_id_seed_and_differ_in_seed() -> None:
    configs = SandboxConfig(seed=10, shipments=100).workspaces(3)
    assert [c.seed for c in configs] == [10, 11, 12]
    assert {c.id_seed for c in configs} == {10}
    assert {c.shipments for c in configs} == {100}


# ---------------------------------------------------------------------- one server, two
@pytest.fixture(scope="module")
def pair() -> Iterator[RunningSandbox]:
    """Two workspaces in one server, limits off, ids colliding on purpose."""
    base = SandboxConfig(seed=21, shipments=300, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*base.workspaces(2)) as running:
        yield running


def test_each_key_reaches_its_own_workspace(pair: RunningSandbox) -> None:
    assert len(pair.stores) == 2
    assert pair.store is pair.stores[0]
    assert pair.api_key == pair.api_keys[0] == pair.stores[0].main_key.secret
    assert pair.api_keys[1] == pair.stores[1].main_key.secret
    names = [_me(pair, key) for key in pair.api_keys]
    assert names == [store.workspace.id for store in pair.stores]
    assert names[0] != names[1]


def test_lists_collide_in_ids_and_differ_in_content(pair: RunningSandbox) -> None:
    one, other = (_lists(pair, key) for key in pair.api_keys)
    for path in LISTS:
        assert one[path].keys() == other[path].keys(), path
        assert _differing(one[path], other[path]) >= len(one[path]) * 0.9, path
    for seen, store in ((one, pair.stores[0]), (other, pair.stores[1])):
        with store.lock:
            truth = {s.id: s.to_json() for s in store.shipments.by_id.values()}
        assert seen["/shipments"] == truth


def test_a_key_never_sees_the_other_workspaces_records(pair: RunningSandbox) -> None:
    first, second = pair.stores
    shared_id = next(iter(first.shipments.by_id))
    with client_for(pair, pair.api_keys[0]) as one, client_for(pair, pair.api_keys[1]) as other:
        # One id, two shipments: each key gets its own workspace's.
        mine = one.get(f"/shipments/{shared_id}").json()["data"]
        theirs = other.get(f"/shipments/{shared_id}").json()["data"]
        with first.lock, second.lock:
            assert mine == first.shipments.by_id[shared_id].to_json()
            assert theirs == second.shipments.by_id[shared_id].to_json()
        assert mine != theirs
        # Records one workspace makes exist only there.
        email = "only.here@example.com"
        created = one.post("/contacts", json={"email": email, "name": "Only Here"})
        assert created.status_code == 201, created.text
        contact_id = created.json()["data"]["id"]
        assert one.get(f"/contacts/{contact_id}").status_code == 200
        assert other.get(f"/contacts/{contact_id}").status_code == 404
        assert other.get("/contacts", params={"email": email}).json()["total"] == 0
        hook = one.post(
            "/webhooks",
            json={"event": "shipment.signed", "target_url": "https://hooks.example.com/in"},
        )
        assert hook.status_code == 201, hook.text
        hook_id = hook.json()["data"]["id"]
        assert other.get("/webhooks").json()["data"] == []
        assert other.get(f"/webhooks/{hook_id}").status_code == 404
        assert other.delete(f"/webhooks/{hook_id}").status_code == 404
        assert one.delete(f"/webhooks/{hook_id}").status_code == 200


def test_state_describes_every_workspace(pair: RunningSandbox) -> None:
    state = admin(pair, "GET", "/state")
    described = state["workspaces"]
    assert [w["workspace_id"] for w in described] == [s.workspace.id for s in pair.stores]
    assert state["workspace_id"] == pair.stores[0].workspace.id
    for entry, store in zip(described, pair.stores, strict=True):
        assert entry["counts"]["shipments"] == len(store.shipments)
    one = admin(pair, "GET", f"/state?workspace={pair.stores[1].workspace.id}")
    assert one["workspace_id"] == pair.stores[1].workspace.id
    assert [w["workspace_id"] for w in one["workspaces"]] == [pair.stores[1].workspace.id]
    unknown = admin_response(pair, "GET", "/state?workspace=ws_nope")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"


def test_advance_moves_every_workspace_or_the_one_named() -> None:
    base = SandboxConfig(seed=31, shipments=300, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*base.workspaces(2)) as running:
        first_key, second_key = running.api_keys
        before = [_date_ms(running, key) for key in running.api_keys]
        moved = admin(running, "POST", "/advance", {"days": 2})
        after = [_date_ms(running, key) for key in running.api_keys]
        for earlier, later in zip(before, after, strict=True):
            assert 2 * 86_400_000 <= later - earlier < 2 * 86_400_000 + 60_000
        assert len(moved["workspaces"]) == 2
        assert moved["new_shipments"] == sum(w["new_shipments"] for w in moved["workspaces"])

        second_id = running.stores[1].workspace.id
        one = admin(running, "POST", f"/advance?workspace={second_id}", {"days": 3})
        assert [w["workspace_id"] for w in one["workspaces"]] == [second_id]
        final = [_date_ms(running, key) for key in running.api_keys]
        assert final[0] - after[0] < 60_000
        assert 3 * 86_400_000 <= final[1] - after[1] < 3 * 86_400_000 + 60_000

        touched = admin(running, "POST", f"/touch?workspace={second_id}", {"entity": "contacts"})
        assert touched["touched"] == 1
        assert [w["workspace_id"] for w in touched["workspaces"]] == [second_id]
        assert _me(running, first_key) != _me(running, second_key)


def test_settings_and_keys_made_for_one_workspace_stay_there() -> None:
    base = SandboxConfig(seed=41, shipments=200, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*base.workspaces(2)) as running:
        first, second = running.stores
        admin(running, "PATCH", f"/config?workspace={second.workspace.id}", {"order": "desc"})
        assert (first.config.order, second.config.order) == ("asc", "desc")

        made = admin_response(
            running, "POST", f"/keys?workspace={second.workspace.id}", {"scopes": ["read"]}
        )
        assert made.status_code == 201, made.text
        assert [w["workspace_id"] for w in made.json()["workspaces"]] == [second.workspace.id]
        assert _me(running, made.json()["key"]) == second.workspace.id

        both = admin_response(running, "POST", "/keys", {"scopes": ["read"]})
        assert both.status_code == 201, both.text
        keys = {w["workspace_id"]: w["key"] for w in both.json()["workspaces"]}
        assert list(keys) == [first.workspace.id, second.workspace.id]
        for workspace_id, key in keys.items():
            assert _me(running, key) == workspace_id


def test_limits_are_per_workspace() -> None:
    """The free plan's 30 requests a minute: one workspace spending all of them leaves the
    other's allowance whole."""
    base = SandboxConfig(
        seed=51, shipments=100, start_ms=START_MS, plan="free", requests_per_second=1_000, burst=200
    )
    with RunningSandbox(*base.workspaces(2)) as running:
        first_key, second_key = running.api_keys
        with client_for(running, first_key) as one, client_for(running, second_key) as other:
            answers = [one.get("/me") for _ in range(31)]
            assert [r.status_code for r in answers[:30]] == [200] * 30
            assert answers[30].status_code == 429
            assert answers[30].headers["X-RateLimit-Scope"] == "key"
            fresh = other.get("/me")
            assert fresh.status_code == 200, fresh.text
            assert fresh.headers["X-RateLimit-Limit"] == "30"
            assert fresh.headers["X-RateLimit-Remaining"] == "29"
        state = admin(running, "GET", "/state")
        refused = {w["workspace_id"]: w["requests_refused"] for w in state["workspaces"]}
        assert refused == {running.stores[0].workspace.id: 1, running.stores[1].workspace.id: 0}


def test_one_server_refuses_workspaces_that_share_an_identity() -> None:
    config = SandboxConfig(seed=3, shipments=50, start_ms=START_MS)
    with closing(bind("127.0.0.1", 0)) as sock, pytest.raises(ValueError, match="distinct"):
        serve_forever([Store(config), Store(config)], sock)  # refused before serving
