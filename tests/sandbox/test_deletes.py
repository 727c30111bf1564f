"""Hard deletes and restores by the application: deleted records vanish from lists, totals, GETs
and a shipment's children; a restore brings them back without a change stamp; simulated
activity deletes at a seeded rate; the truth helpers agree with what the API serves."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from sandbox import RECORD_KINDS, RecordKind, RunningSandbox, SandboxConfig, Shipment
from tests.support import START_MS, SandboxFactory, admin, admin_response, client_for, page_all
from tests.support.sandboxes import deleted_on_server
from tests.support.truth import deleted_ids, deleted_rows, expected

WEEK_MS = 7 * 86_400_000


def _ids(client: httpx.Client, kind: str, **params: Any) -> set[str]:
    """Every id a list serves (archived shipments included unless `params` say otherwise)."""
    if kind == "shipments":
        params.setdefault("include_archived", "true")
    items = page_all(client, f"/{kind}", **params)
    ids = {item["id"] for item in items}
    assert len(ids) == len(items), f"{kind}: a record served twice"
    return ids


def _total(client: httpx.Client, kind: str, **params: Any) -> int:
    total = client.get(f"/{kind}", params={"limit": 1, **params}).json()["total"]
    assert isinstance(total, int)
    return total


def _not_found(response: httpx.Response) -> None:
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "not_found"


def _busy_shipment(running: RunningSandbox, *, archived: bool) -> Shipment:
    """A shipment with an audit trail and filled-in values, archived or not."""
    with running.store.lock:
        return next(
            s
            for s in running.store.shipments.by_id.values()
            if s.status == "completed"
            and len(s.recipients) > 1
            and (s.archived_at is not None) == archived
        )


def _some_id(running: RunningSandbox, kind: RecordKind) -> str:
    if kind == "shipments":
        return _busy_shipment(running, archived=False).id
    with running.store.lock:
        return running.store.live_ids(kind)[5]


# ---------------------------------------------------------------------- one record
@pytest.mark.parametrize("kind", RECORD_KINDS)
def test_a_deleted_record_leaves_lists_totals_and_gets(
    make_sandbox: SandboxFactory, kind: RecordKind
) -> None:
    running = make_sandbox(limits_enabled=False)
    record_id = _some_id(running, kind)
    with client_for(running) as client:
        before = _ids(client, kind)
        total = _total(client, kind, include_archived="true")
        since_start = _ids(client, kind, updated_since=str(START_MS - 30 * 86_400_000))
        assert record_id in before
        assert client.get(f"/{kind}/{record_id}").status_code == 200

        answer = admin(running, "POST", "/delete", {"kind": kind, "id": record_id})
        assert answer == {"kind": kind, "deleted": [record_id]}

        assert _ids(client, kind) == before - {record_id}
        assert _total(client, kind, include_archived="true") == total - 1
        assert _ids(client, kind, updated_since=str(START_MS - 30 * 86_400_000)) == since_start - {
            record_id
        }
        _not_found(client.get(f"/{kind}/{record_id}"))
    assert running.store.deleted_ids(kind) == {record_id}
    assert deleted_on_server(running)[kind] == {record_id}
    state = admin(running, "GET", "/state")
    assert state["deleted"][kind] == 1
    assert state["counts"][kind] == len(before) - 1


def test_a_deleted_shipments_children_and_aliases_answer_404(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False)
    shipment = _busy_shipment(running, archived=False)
    addresses = [
        f"/shipments/{shipment.id}",
        f"/shipments/{shipment.uuid}",
        f"/shipments/{shipment.recipients[1].link_id}",
        f"/shipments/{shipment.id}/events",
        f"/shipments/{shipment.id}/fields",
        f"/shipments/{shipment.recipients[0].link_id}/events",
    ]
    with client_for(running) as client:
        assert client.get(f"/shipments/{shipment.id}/events").json()["data"]
        for address in addresses:
            assert client.get(address).status_code == 200, address
        by_status = _ids(client, "shipments", status="signed")
        by_document = _ids(client, "shipments", document_id=shipment.document_id)
        unarchived = _ids(client, "shipments", include_archived="false")
        assert shipment.id in by_status & by_document & unarchived
        admin(running, "POST", "/delete", {"kind": "shipments", "id": shipment.id})
        for address in addresses:
            _not_found(client.get(address))
        assert _ids(client, "shipments", status="signed") == by_status - {shipment.id}
        assert _ids(client, "shipments", document_id=shipment.document_id) == by_document - {
            shipment.id
        }
        assert _ids(client, "shipments", include_archived="false") == unarchived - {shipment.id}
        assert _total(client, "shipments") == len(unarchived) - 1


# ---------------------------------------------------------------------- restore
@pytest.mark.parametrize("kind", RECORD_KINDS)
def test_a_restored_record_comes_back_as_it_was_without_a_change_stamp(
    make_sandbox: SandboxFactory, kind: RecordKind
) -> None:
    running = make_sandbox(limits_enabled=False)
    record_id = _some_id(running, kind)
    with client_for(running) as client:
        before = _ids(client, kind)
        body = client.get(f"/{kind}/{record_id}").json()
        admin(running, "POST", "/delete", {"kind": kind, "id": record_id})
        # An incremental client's cursor after the delete: newer than every stamp so far.
        cursor = running.store.clock.now_ms() + 1
        admin(running, "POST", "/advance", {"hours": 2})
        changed = _ids(client, kind, updated_since=str(cursor))

        answer = admin(running, "POST", "/restore", {"kind": kind, "id": record_id})
        assert answer == {"kind": kind, "restored": [record_id]}

        assert client.get(f"/{kind}/{record_id}").json() == body
        assert record_id in _ids(client, kind)
        assert record_id not in _ids(client, kind, updated_since=str(cursor))
        assert _ids(client, kind, updated_since=str(cursor)) == changed
        assert before <= _ids(client, kind)
    assert running.store.deleted_ids(kind) == set()
    assert deleted_on_server(running)[kind] == set()
    assert admin_response(
        running, "POST", "/restore", {"kind": kind, "id": record_id}
    ).status_code == (404)


def test_a_restored_archived_shipment_is_back_in_the_archived_view_only(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(limits_enabled=False)
    shipment = _busy_shipment(running, archived=True)
    with client_for(running) as client:
        everything = _ids(client, "shipments")
        unarchived = _ids(client, "shipments", include_archived="false")
        events = client.get(f"/shipments/{shipment.id}/events").json()
        fields = client.get(f"/shipments/{shipment.id}/fields").json()
        admin(running, "POST", "/delete", {"kind": "shipments", "id": shipment.id})
        assert _ids(client, "shipments") == everything - {shipment.id}
        assert _ids(client, "shipments", include_archived="false") == unarchived
        admin(running, "POST", "/restore", {"kind": "shipments", "id": shipment.id})
        assert _ids(client, "shipments") == everything
        assert _ids(client, "shipments", include_archived="false") == unarchived
        assert client.get(f"/shipments/{shipment.id}/events").json() == events
        assert client.get(f"/shipments/{shipment.id}/fields").json() == fields
        link = shipment.recipients[1].link_id
        assert client.get(f"/shipments/{link}").json()["data"]["id"] == shipment.id


def test_a_deleted_shipment_stands_still_and_stays_so_after_its_restore(
    make_sandbox: SandboxFactory,
) -> None:
    """The application cancels a deleted shipment's signing: nothing happens to it while it is
    deleted, and its restore brings back the record, not the process, whether the clock moved
    in between or not."""
    running = make_sandbox(limits_enabled=False)
    with running.store.lock:
        waiting, brief = [
            s
            for s in running.store.shipments.by_id.values()
            if s.status == "sent" and s.applied < len(s.timeline)
        ][:2]
    with client_for(running) as client:
        bodies = {s.id: client.get(f"/shipments/{s.id}").json() for s in (waiting, brief)}
        for shipment in (waiting, brief):
            admin(running, "POST", "/delete", {"kind": "shipments", "id": shipment.id})
        admin(running, "POST", "/restore", {"kind": "shipments", "id": brief.id})
        admin(running, "POST", "/advance", {"days": 40})
        admin(running, "POST", "/restore", {"kind": "shipments", "id": waiting.id})
        admin(running, "POST", "/advance", {"days": 40})
        for shipment_id, body in bodies.items():
            assert client.get(f"/shipments/{shipment_id}").json() == body


# ---------------------------------------------------------------------- what goes with what
def test_deleting_a_document_leaves_its_shipments(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False)
    with running.store.lock:
        document_id = next(iter(running.store.shipments.by_id.values())).document_id
    with client_for(running) as client:
        sent = _ids(client, "shipments", document_id=document_id)
        assert sent
        one = client.get(f"/shipments/{next(iter(sent))}").json()
        admin(running, "POST", "/delete", {"kind": "documents", "id": document_id})
        assert _ids(client, "shipments", document_id=document_id) == sent
        assert client.get(f"/shipments/{one['data']['id']}").json() == one
        refused = client.post(
            "/shipments",
            json={"document_id": document_id, "recipients": [{"name": "A", "email": "a@b.de"}]},
        )
        _not_found(refused)


def test_deleting_a_contact_leaves_recipients_and_frees_its_email(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(limits_enabled=False)
    with running.store.lock:
        recipient = next(
            r for s in running.store.shipments.by_id.values() for r in s.recipients if r.contact_id
        )
        shipment_id = next(
            s.id for s in running.store.shipments.by_id.values() if recipient in s.recipients
        )
        contact = running.store.contacts.by_id[str(recipient.contact_id)]
    with client_for(running) as client:
        shipment = client.get(f"/shipments/{shipment_id}").json()
        admin(running, "POST", "/delete", {"kind": "contacts", "id": contact.id})
        assert client.get(f"/shipments/{shipment_id}").json() == shipment
        assert recipient.email in {r["email"] for r in shipment["data"]["recipients"]}
        assert client.get("/contacts", params={"email": contact.email}).json()["total"] == 0
        assert contact.id not in {
            c["id"] for c in page_all(client, "/contacts", search=contact.name)
        }
        document_id = shipment["data"]["document_id"]
        refused = client.post(
            "/shipments", json={"document_id": document_id, "contact_ids": [contact.id]}
        )
        assert refused.status_code == 422, refused.text
        # The address is free: a new contact takes it, and the old one cannot come back.
        again = client.post("/contacts", json={"email": contact.email, "name": "New"})
        assert again.status_code == 201, again.text
        assert again.json()["data"]["id"] != contact.id
    conflict = admin_response(running, "POST", "/restore", {"kind": "contacts", "id": contact.id})
    assert conflict.status_code == 409, conflict.text
    assert conflict.json()["error"]["code"] == "conflict"
    assert running.store.deleted_ids("contacts") == {contact.id}


# ---------------------------------------------------------------------- many at once
def _mass_delete(running: RunningSandbox) -> dict[str, list[str]]:
    shipments = admin(running, "POST", "/delete", {"kind": "shipments", "count": 25})
    contacts = admin(running, "POST", "/delete", {"kind": "contacts", "share": 0.1})
    return {"shipments": shipments["deleted"], "contacts": contacts["deleted"]}


def test_mass_delete_is_deterministic_by_seed(make_sandbox: SandboxFactory) -> None:
    first = make_sandbox(seed=5, limits_enabled=False)
    twin = make_sandbox(seed=5, limits_enabled=False)
    other = make_sandbox(seed=6, id_seed=5, limits_enabled=False)
    contacts = len(first.store.contacts)
    done = [_mass_delete(running) for running in (first, twin, other)]
    assert done[0] == done[1]
    assert done[0]["shipments"] != done[2]["shipments"]  # the same ids, other choices
    assert len(done[0]["shipments"]) == 25
    assert len(done[0]["contacts"]) == round(contacts * 0.1)
    assert done[0]["shipments"] == sorted(done[0]["shipments"])
    with client_for(first) as client:
        assert not _ids(client, "shipments") & set(done[0]["shipments"])
        assert not _ids(client, "contacts") & set(done[0]["contacts"])
    assert deleted_on_server(first) == {
        "contacts": set(done[0]["contacts"]),
        "documents": set(),
        "shipments": set(done[0]["shipments"]),
    }
    every = admin(first, "POST", "/delete", {"kind": "documents", "share": 1})
    assert len(every["deleted"]) == len(first.store.deleted.documents)
    assert first.store.documents.by_id == {}
    moved = admin(first, "POST", "/advance", {"days": 2})
    assert moved["new_shipments"] == 0  # no template left to send


def test_several_ids_go_at_once_or_not_at_all(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False)
    first, second = running.store.live_ids("contacts")[:2]
    missing = admin_response(
        running, "POST", "/delete", {"kind": "contacts", "ids": [first, "ct_nope"]}
    )
    _not_found(missing)
    assert running.store.deleted_ids("contacts") == set()
    both = admin(running, "POST", "/delete", {"kind": "contacts", "ids": [first, second]})
    assert both["deleted"] == [first, second]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/delete", {"kind": "webhooks", "id": "wh_1"}, 422),
        ("/delete", {"id": "ct_1"}, 422),
        ("/delete", {"kind": "contacts"}, 422),
        ("/delete", {"kind": "contacts", "id": "ct_1", "count": 2}, 422),
        ("/delete", {"kind": "contacts", "count": -1}, 422),
        ("/delete", {"kind": "contacts", "count": True}, 422),
        ("/delete", {"kind": "contacts", "share": 1.5}, 422),
        ("/delete", {"kind": "contacts", "ids": []}, 422),
        ("/delete", {"kind": "contacts", "id": 7}, 422),
        ("/delete", {"kind": "contacts", "id": "ct_nope"}, 404),
        ("/restore", {"kind": "contacts", "id": "ct_nope"}, 404),
        ("/restore", {"kind": "contacts"}, 422),
        ("/restore", {"kind": "things", "id": "ct_1"}, 422),
    ],
)
def test_bad_delete_and_restore_requests_are_refused(
    shared_sandbox: RunningSandbox, path: str, body: dict[str, Any], status: int
) -> None:
    response = admin_response(shared_sandbox, "POST", path, body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == ("not_found" if status == 404 else "invalid_request")
    assert all(not shared_sandbox.store.deleted.of(kind) for kind in RECORD_KINDS)


def test_deletes_in_one_workspace_stay_there() -> None:
    base = SandboxConfig(seed=61, shipments=200, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*base.workspaces(2)) as running:
        first, second = running.stores
        shared_id = first.live_ids("shipments")[0]
        one = admin(
            running,
            "POST",
            f"/delete?workspace={second.workspace.id}",
            {"kind": "shipments", "id": shared_id},
        )
        assert [w["workspace_id"] for w in one["workspaces"]] == [second.workspace.id]
        with client_for(running, running.api_keys[0]) as mine:
            assert mine.get(f"/shipments/{shared_id}").status_code == 200
        with client_for(running, running.api_keys[1]) as theirs:
            _not_found(theirs.get(f"/shipments/{shared_id}"))
        # Without a workspace named: wherever the id is still live.
        both = admin(running, "POST", "/delete", {"kind": "shipments", "id": shared_id})
        assert [w["workspace_id"] for w in both["workspaces"]] == [first.workspace.id]
        listed = admin(running, "GET", "/deleted")
        assert [[d["id"] for d in w["deleted"]["shipments"]] for w in listed["workspaces"]] == [
            [shared_id],
            [shared_id],
        ]
        back = admin(
            running,
            "POST",
            f"/restore?workspace={first.workspace.id}",
            {"kind": "shipments", "id": shared_id},
        )
        assert [w["workspace_id"] for w in back["workspaces"]] == [first.workspace.id]
        assert (first.deleted_ids("shipments"), second.deleted_ids("shipments")) == (
            set(),
            {shared_id},
        )


# ---------------------------------------------------------------------- activity
def _served_matches_truth(running: RunningSandbox) -> None:
    """Every list, paged over HTTP, serves exactly the live records, and the deleted ones
    answer 404; `updated_since` and `include_archived` skip deleted records too."""
    store = running.store
    want = expected(store)
    gone = deleted_ids(store)
    with store.lock:
        unarchived = {s.id for s in store.shipments.by_id.values() if s.archived_at is None}
        recent = {c.id for c in store.contacts.by_id.values() if c.updated_at >= START_MS}
    with client_for(running) as client:
        for kind in RECORD_KINDS:
            served = _ids(client, kind)
            assert served == {row[0] for row in want[kind]}, kind
            assert not served & gone[kind], kind
            assert _total(client, kind, include_archived="true") == len(served)
            for record_id in sorted(gone[kind])[:3]:
                _not_found(client.get(f"/{kind}/{record_id}"))
        assert _ids(client, "shipments", include_archived="false") == unarchived
        assert _ids(client, "contacts", updated_since=str(START_MS)) == recent
        for shipment_id in sorted(gone["shipments"])[:3]:
            _not_found(client.get(f"/shipments/{shipment_id}/events"))
            _not_found(client.get(f"/shipments/{shipment_id}/fields"))
    assert deleted_on_server(running) == gone
    state = admin(running, "GET", "/state")
    assert state["deleted"] == {kind: len(ids) for kind, ids in gone.items()}
    with store.lock:
        for index in (store.documents, store.contacts, store.shipments, store.unarchived_shipments):
            page = index.page(None, "asc", 0, len(index) + 10)
            keys = [(r.updated_at, r.id) for r in page.items]
            assert page.total == len(index)
            assert keys == sorted((r.updated_at, r.id) for r in index.by_id.values())


def test_activity_deletes_and_restores_over_a_week(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False, shipments=600, delete_rate=0.02, restore_rate=0.2)
    twin = make_sandbox(limits_enabled=False, shipments=600, delete_rate=0.02, restore_rate=0.2)
    totals = {"deleted": 0, "restored": 0}
    for _ in range(7):
        moved = admin(running, "POST", "/advance", {"days": 1})
        admin(twin, "POST", "/advance", {"days": 1})
        for name in totals:
            totals[name] += moved[name]
    gone = deleted_ids(running.store)
    assert gone["shipments"]
    assert gone["contacts"]
    assert totals["restored"] > 0
    assert totals["deleted"] - totals["restored"] == sum(len(ids) for ids in gone.values())
    assert deleted_ids(twin.store) == gone  # deterministic from the seed
    _served_matches_truth(running)


def test_background_activity_deletes_once_switched_on(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False, shipments=600)
    assert admin(running, "GET", "/state")["deleted"] == dict.fromkeys(RECORD_KINDS, 0)
    changed = admin(running, "PATCH", "/config", {"delete_rate": 0.03})
    assert changed["delete_rate"] == 0.03
    start = running.store.clock.now_ms()
    admin(running, "POST", "/activity", {"speed": 400_000, "touches_per_second": 50})
    give_up = time.monotonic() + 120  # a stalled activity fails here, not at the suite's limit
    try:
        while running.store.clock.now_ms() < start + WEEK_MS:
            assert time.monotonic() < give_up, "background activity did not cover a week"
            time.sleep(0.05)
    finally:
        admin(running, "POST", "/activity", {"running": False})
    gone = deleted_ids(running.store)
    assert gone["shipments"]
    assert gone["contacts"]
    _served_matches_truth(running)


def test_deletes_are_off_by_default(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False, shipments=600)
    assert SandboxConfig().delete_rate == SandboxConfig().restore_rate == 0
    moved = admin(running, "POST", "/advance", {"days": 7})
    assert (moved["deleted"], moved["restored"]) == (0, 0)
    assert deleted_on_server(running) == {kind: set() for kind in RECORD_KINDS}


# ---------------------------------------------------------------------- truth helpers
def test_truth_splits_the_rows_into_live_and_deleted(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False)
    before = expected(running.store)
    assert all(not rows for rows in deleted_rows(running.store).values())
    admin(running, "POST", "/delete", {"kind": "shipments", "count": 30})
    admin(running, "POST", "/delete", {"kind": "contacts", "count": 10})
    admin(running, "POST", "/delete", {"kind": "documents", "count": 2})
    live, gone = expected(running.store), deleted_rows(running.store)
    for table, rows in before.items():
        assert not live[table] & gone[table], table
        assert live[table] | gone[table] == rows, table
    ids = deleted_ids(running.store)
    assert [len(ids[kind]) for kind in ("shipments", "contacts", "documents")] == [30, 10, 2]
    assert {row[0] for row in gone["shipments"]} == ids["shipments"]
    assert {row[1] for row in gone["audit_events"]} <= ids["shipments"]
    assert {row[0] for row in gone["shipment_fields"]} <= ids["shipments"]
    assert gone["audit_events"]
