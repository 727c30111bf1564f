"""Every v1 endpoint, through real HTTP, checked against the sandbox's own records."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest

from sandbox import RunningSandbox
from tests.support import SandboxFactory, client_for, page_all


def test_me_names_the_workspace_and_key(api: httpx.Client, shared_sandbox: RunningSandbox) -> None:
    body = api.get("/me").json()
    workspace = shared_sandbox.store.workspace
    assert body == {
        "workspace": {
            "id": workspace.id,
            "name": workspace.name,
            "slug": workspace.slug,
            "plan": workspace.plan,
        },
        "key_name": shared_sandbox.store.main_key.name,
        "api_version": "v1",
    }


def test_documents_list_pages_every_document_once_in_updated_order(
    api: httpx.Client, shared_sandbox: RunningSandbox
) -> None:
    documents = page_all(api, "/documents")
    truth = shared_sandbox.store.documents.by_id
    assert Counter(d["id"] for d in documents) == Counter(list(truth))
    keys = [(d["updated_at"], d["id"]) for d in documents]
    assert keys == sorted(keys)
    some = documents[0]
    assert some["updated_at"] == _iso(truth[some["id"]].updated_at)
    assert "blocks" not in some
    assert "theme" not in some


def test_single_document_adds_blocks_and_theme(api: httpx.Client) -> None:
    listed = api.get("/documents", params={"limit": 1}).json()["data"][0]
    single = api.get(f"/documents/{listed['id']}").json()["data"]
    assert {k: v for k, v in single.items() if k not in ("blocks", "theme")} == listed
    assert single["blocks"]
    assert all({"id", "type", "content"} <= set(block) for block in single["blocks"])
    assert isinstance(single["theme"]["id"], str)
    missing = api.get("/documents/doc_nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


def test_some_documents_have_a_payment_field_and_placeholders(api: httpx.Client) -> None:
    documents = page_all(api, "/documents")
    assert any(f["type"] == "payment" for d in documents for f in d["fields"])
    assert any(d["placeholders"] for d in documents)


def test_documents_search_matches_names_case_insensitively(
    api: httpx.Client, shared_sandbox: RunningSandbox
) -> None:
    found = page_all(api, "/documents", search="nda")
    truth = {d.id for d in shared_sandbox.store.documents.by_id.values() if "nda" in d.name.lower()}
    assert truth
    assert {d["id"] for d in found} == truth


def test_updated_since_is_inclusive_and_accepts_iso_and_milliseconds(
    api: httpx.Client, shared_sandbox: RunningSandbox
) -> None:
    contacts = sorted(shared_sandbox.store.contacts.by_id.values(), key=lambda c: c.updated_at)
    pivot = contacts[len(contacts) // 2]
    truth = {c.id for c in contacts if c.updated_at >= pivot.updated_at}
    by_ms = page_all(api, "/contacts", updated_since=str(pivot.updated_at))
    by_iso = page_all(api, "/contacts", updated_since=_iso(pivot.updated_at))
    assert {c["id"] for c in by_ms} == truth
    assert {c["id"] for c in by_iso} == truth
    assert pivot.id in {c["id"] for c in by_iso}
    envelope = api.get("/contacts", params={"updated_since": str(pivot.updated_at)}).json()
    assert envelope["total"] == len(truth)
    assert envelope["limit"] == 50
    assert envelope["offset"] == 0


def test_shipments_list_hides_archived_unless_asked(
    api: httpx.Client, shared_sandbox: RunningSandbox
) -> None:
    everything = page_all(api, "/shipments", include_archived="true")
    visible = page_all(api, "/shipments")
    truth = shared_sandbox.store.shipments.by_id
    archived = {i for i, s in truth.items() if s.archived_at is not None}
    assert archived
    assert Counter(s["id"] for s in everything) == Counter(list(truth))
    assert {s["id"] for s in visible} == set(truth) - archived
    assert all(s["archived_at"] is not None for s in everything if s["id"] in archived)


@pytest.mark.parametrize("status", ["sent", "opened", "signed", "expired", "revoked"])
def test_shipments_status_filter_is_the_activity_status(
    api: httpx.Client, shared_sandbox: RunningSandbox, status: str
) -> None:
    found = page_all(api, "/shipments", status=status, include_archived="true")
    truth = {s.id for s in shared_sandbox.store.shipments.by_id.values() if _activity(s) == status}
    assert truth, f"the synthetic data should have {status} shipments"
    assert {s["id"] for s in found} == truth
    assert all(s["activity_status"] == status for s in found)


def test_shipments_filter_by_document(api: httpx.Client, shared_sandbox: RunningSandbox) -> None:
    shipments = list(shared_sandbox.store.shipments.by_id.values())
    document_id = Counter(s.document_id for s in shipments).most_common(1)[0][0]
    found = page_all(api, "/shipments", document_id=document_id, include_archived="true")
    assert {s["id"] for s in found} == {s.id for s in shipments if s.document_id == document_id}


def test_single_shipment_by_id_uuid_or_recipient_link(
    api: httpx.Client, shared_sandbox: RunningSandbox
) -> None:
    shipment = next(
        s for s in shared_sandbox.store.shipments.by_id.values() if len(s.recipients) > 1
    )
    by_id = api.get(f"/shipments/{shipment.id}").json()["data"]
    assert by_id["id"] == shipment.id
    assert [r["id"] for r in by_id["recipients"]] == [r.id for r in shipment.recipients]
    assert api.get(f"/shipments/{shipment.uuid}").json()["data"] == by_id
    assert api.get(f"/shipments/{shipment.recipients[1].link_id}").json()["data"] == by_id
    missing = api.get("/shipments/shp_missing")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


def test_audit_trail_is_newest_first_and_agrees_with_recipients(
    api: httpx.Client, shared_sandbox: RunningSandbox
) -> None:
    shipment = next(
        s
        for s in shared_sandbox.store.shipments.by_id.values()
        if s.status == "completed" and len(s.recipients) > 1
    )
    events = api.get(f"/shipments/{shipment.id}/events").json()["data"]
    stamps = [e["at"] for e in events]
    assert stamps == sorted(stamps, reverse=True)
    for recipient in shipment.recipients:
        signed = [e for e in events if e["type"] == "signed" and e["recipient_id"] == recipient.id]
        assert [e["at"] for e in signed] == [_iso(recipient.signed_at)]
    assert [e["type"] for e in events].count("completed") == 1
    assert len({e["id"] for e in events}) == len(events)
    limited = api.get(f"/shipments/{shipment.id}/events", params={"limit": 2}).json()["data"]
    assert limited == events[:2]
    assert api.get(f"/shipments/{shipment.id}/events", params={"limit": 501}).status_code == 422
    assert api.get(f"/shipments/{shipment.id}/events", params={"limit": 500}).status_code == 200


def test_filled_fields_carry_text_and_payment_values_of_signers(
    api: httpx.Client, shared_sandbox: RunningSandbox
) -> None:
    shipment = next(
        s
        for s in shared_sandbox.store.shipments.by_id.values()
        if s.status == "completed" and any(f.type == "payment" for f in s.document_fields)
    )
    body = api.get(f"/shipments/{shipment.id}/fields").json()
    assert body["shipment_id"] == shipment.id
    assert body["document_name"] == shipment.document_name
    assert [d["recipient_id"] for d in body["data"]] == [r.id for r in shipment.recipients]
    values = [f["value"] for d in body["data"] for f in d["fields"]]
    payments = [v for v in values if isinstance(v, dict)]
    assert payments
    assert all(isinstance(p["variantId"], str) and isinstance(p["extras"], dict) for p in payments)
    assert all(v is not None for v in values), "every recipient of a completed shipment signed"


def test_contacts_search_and_exact_email(api: httpx.Client, shared_sandbox: RunningSandbox) -> None:
    contact = next(c for c in shared_sandbox.store.contacts.by_id.values() if c.company)
    by_email = api.get("/contacts", params={"email": contact.email.upper()}).json()
    assert [c["id"] for c in by_email["data"]] == [contact.id]
    assert by_email["total"] == 1
    needle = contact.company.split()[0].lower() if contact.company else ""
    found = page_all(api, "/contacts", search=needle)
    truth = {
        c.id
        for c in shared_sandbox.store.contacts.by_id.values()
        if any(needle in (v or "").lower() for v in (c.name, c.email, c.company, c.phone))
    }
    assert {c["id"] for c in found} == truth
    single = api.get(f"/contacts/{contact.id}").json()["data"]
    assert single == by_email["data"][0]
    assert api.get("/contacts/ct_missing").status_code == 404


def test_contacts_keep_custom_keys_with_dots(api: httpx.Client) -> None:
    contacts = page_all(api, "/contacts")
    assert any("." in key for c in contacts for key in c["custom"])


def test_contact_upsert_creates_then_updates_and_merges_custom(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(limits_enabled=False)
    with client_for(running) as client:
        created = client.post(
            "/contacts",
            json={
                "email": "ada@example.net",
                "name": "Ada",
                "custom": {"crm.id": "1"},
                "group_ids": ["grp_new_group"],
            },
        )
        assert created.status_code == 201
        contact = created.json()["data"]
        assert contact["group_ids"] == ["grp_new_group"]
        updated = client.post(
            "/contacts", json={"email": "ADA@example.net", "custom": {"billing.vat.id": "DE1"}}
        )
        assert updated.status_code == 200
        merged = updated.json()["data"]
        assert merged["id"] == contact["id"]
        assert merged["custom"] == {"crm.id": "1", "billing.vat.id": "DE1"}
        assert merged["updated_at"] >= contact["updated_at"]
        by_id = client.post("/contacts", json={"id": contact["id"], "company": "Analytical"})
        assert by_id.status_code == 200
        assert by_id.json()["data"]["company"] == "Analytical"
        neither = client.post("/contacts", json={"name": "Nobody"})
        assert neither.status_code == 422
        assert neither.json()["error"]["code"] == "invalid_request"
        # The automatically created group reaches the contact when shipping to it.
        document_id = client.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        sent = client.post(
            "/shipments", json={"document_id": document_id, "group_ids": ["grp_new_group"]}
        )
        assert sent.status_code == 201
        assert [r["email"] for r in sent.json()["data"]["recipients"]] == ["ada@example.net"]


def test_contact_upsert_cannot_take_another_contacts_email(make_sandbox: SandboxFactory) -> None:
    """A live contact's e-mail is its own: `?email=` finds one contact, and a restore relies on
    it. Moving to a free address works."""
    running = make_sandbox(limits_enabled=False)
    first, second = list(running.store.contacts.by_id.values())[:2]
    first_before, old_email = first.to_json(), first.email
    with client_for(running) as client:
        taken = client.post(
            "/contacts", json={"id": first.id, "email": second.email.upper(), "name": "Taken"}
        )
        assert taken.status_code == 422, taken.text
        assert taken.json()["error"]["code"] == "invalid_request"
        assert client.get(f"/contacts/{first.id}").json()["data"] == first_before
        by_email = client.get("/contacts", params={"email": second.email}).json()["data"]
        assert [c["id"] for c in by_email] == [second.id]
        moved = client.post("/contacts", json={"id": first.id, "email": "moved.on@example.net"})
        assert moved.status_code == 200, moved.text
        found = client.get("/contacts", params={"email": "moved.on@example.net"}).json()["data"]
        assert [c["id"] for c in found] == [first.id]
        assert client.get("/contacts", params={"email": old_email}).json()["data"] == []


def test_shipment_creation_combines_recipients_contacts_and_groups(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(limits_enabled=False)
    store = running.store
    contact = next(iter(store.contacts.by_id.values()))
    group = "grp_vip"
    members = {c.email.lower() for c in store.contacts.by_id.values() if group in c.group_ids}
    assert members
    with client_for(running) as client:
        document_id = client.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        response = client.post(
            "/shipments",
            json={
                "document_id": document_id,
                "recipients": [{"name": "Eve", "email": "eve@example.net", "company": "E"}],
                "contact_ids": [contact.id],
                "group_ids": [group],
                "placeholders": {"customer_name": "Eve"},
                "expires_in_days": 10,
                "signature_level": "ees",
            },
        )
        assert response.status_code == 201
        body = response.json()
        emails = {r["email"].lower() for r in body["data"]["recipients"]}
        assert emails == {"eve@example.net", contact.email.lower()} | members
        dispatch = body["dispatch"]
        assert dispatch["sent"] + dispatch["failed"] + dispatch["remaining"] == len(emails)
        assert body["data"]["signature_level"] == "ees"
        links = [r["link_id"] for r in body["data"]["recipients"]]
        assert all(links)
        fetched = client.get(f"/shipments/{links[0]}").json()["data"]
        assert fetched["id"] == body["data"]["id"]


def test_shipment_creation_refuses_no_recipient_and_unknown_document(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(limits_enabled=False)
    with client_for(running) as client:
        document_id = client.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        empty = client.post("/shipments", json={"document_id": document_id, "recipients": []})
        assert empty.status_code == 422
        assert empty.json()["error"]["code"] == "invalid_request"
        assert "recipient" in empty.json()["error"]["message"]
        unknown = client.post(
            "/shipments",
            json={"document_id": "doc_unknown", "recipients": [{"name": "A", "email": "a@b.c"}]},
        )
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "not_found"


def test_idempotency_key_replays_the_stored_response_and_sends_nothing(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(limits_enabled=False)
    with client_for(running) as client:
        document_id = client.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        body = {"document_id": document_id, "recipients": [{"name": "Bo", "email": "bo@x.de"}]}
        headers = {"Idempotency-Key": "order-4711"}
        first = client.post("/shipments", json=body, headers=headers)
        count = len(running.store.shipments)
        daily_left = first.headers["X-Daily-Remaining"]
        again = client.post("/shipments", json=body, headers=headers)
        assert again.status_code == 201
        assert again.json() == first.json()
        assert len(running.store.shipments) == count
        assert again.headers["X-Daily-Remaining"] == daily_left
        other = client.post("/shipments", json={**body, "message": "hi"}, headers=headers)
        assert other.status_code == 422
        fresh = client.post("/shipments", json=body)
        assert fresh.json()["data"]["id"] != first.json()["data"]["id"]
        assert len(running.store.shipments) == count + 1


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/documents", {"limit": "0"}),
        ("/documents", {"limit": "201"}),
        ("/documents", {"limit": "ten"}),
        ("/contacts", {"offset": "-1"}),
        ("/contacts", {"updated_since": "yesterday"}),
        ("/shipments", {"status": "lost"}),
        ("/shipments", {"include_archived": "maybe"}),
    ],
)
def test_invalid_parameters_answer_422_invalid_request(
    api: httpx.Client, path: str, params: dict[str, str]
) -> None:
    response = api.get(path, params=params)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"


def test_limit_bounds_are_accepted(api: httpx.Client) -> None:
    assert len(api.get("/contacts", params={"limit": 1}).json()["data"]) == 1
    assert len(api.get("/contacts", params={"limit": 200}).json()["data"]) == 200


def test_descending_order_is_configurable(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False, order="desc")
    with client_for(running) as client:
        contacts = page_all(client, "/contacts")
    keys = [(c["updated_at"], c["id"]) for c in contacts]
    assert keys == sorted(keys, reverse=True)
    assert len(keys) == len(running.store.contacts)


def _activity(shipment: Any) -> str:
    """The activity status, computed here from the records rather than by the sandbox."""
    if shipment.revoked_at is not None:
        return "revoked"
    if shipment.expired_at is not None:
        return "expired"
    if shipment.completed_at is not None:
        return "signed"
    if any(r.first_opened_at is not None for r in shipment.recipients):
        return "opened"
    return "sent"


def _iso(ms: int | None) -> str:
    from datetime import UTC, datetime

    assert ms is not None
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
