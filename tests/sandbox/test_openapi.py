"""The sandbox against its OpenAPI document, with schemathesis over real HTTP on loopback.

Every response fails the test when it is a 5xx or breaks the document: an undeclared status
code, a body outside the response schema, an undeclared content type, or a missing or malformed
declared header (and a refusal whose error code is not the one the reference gives its status).

Three generated passes, all deterministic and bounded:

- every operation with generated valid and invalid inputs (schemathesis' examples, coverage and
  fuzzing phases);
- the operations that address one record, with ids of records that exist (generated ids only
  ever reach the 404 answer);
- the writes, with references that exist so that they succeed, each followed by reads of what
  was written;

then a few invalid inputs by hand that once got nonconforming answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode, Response
from schemathesis.checks import (
    CheckContext,
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sandbox import RunningSandbox, SandboxConfig
from tests.support import START_MS, client_for

OPENAPI_PATH = Path(__file__).parents[2] / "sandbox" / "openapi.yaml"

# Per operation: the document's examples, every coverage case, then this many fuzzed cases.
MAX_EXAMPLES = 50
# Per operation in the passes with existing records.
KNOWN_EXAMPLES = 40
SEED = 20260101

# The reference's Errors part: the code each refusal status carries.
ERROR_CODE_OF_STATUS = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    422: "invalid_request",
    429: "rate_limited",
}


def error_code_matches_status(
    ctx: CheckContext, response: Response, case: Case[Any]
) -> bool | None:
    """A refusal names the reason the reference gives for its status: invalid input is
    answered 422 `invalid_request`, an unknown record 404 `not_found`."""
    expected = ERROR_CODE_OF_STATUS.get(response.status_code)
    if expected is None:
        return None
    code = response.json()["error"]["code"]
    assert code == expected, f"HTTP {response.status_code} with error code {code!r}"
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    error_code_matches_status,
]

DOCUMENT: dict[str, Any] = yaml.safe_load(OPENAPI_PATH.read_text())
schema = schemathesis.openapi.from_dict(
    DOCUMENT,
    config=schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "request-timeout": 10,
            "generation": {"mode": "all", "max-examples": MAX_EXAMPLES, "deterministic": True},
        }
    ),
)

bounded = settings(
    max_examples=KNOWN_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    """A sandbox of its own, limits off. Webhook deliveries are switched off so that fuzzed
    subscriptions never make the sandbox POST to arbitrary hosts."""
    config = SandboxConfig(limits_enabled=False, shipments=300, start_ms=START_MS)
    with RunningSandbox(config) as running:
        running.store.listeners.remove(running.app.state.dispatcher.on_event)
        yield running


def call(case: Case[Any], sandbox: RunningSandbox) -> Response:
    """Send one case to the sandbox and validate the answer with every check."""
    response: Response = case.call_and_validate(
        base_url=sandbox.base_url,
        headers={"Authorization": f"Bearer {sandbox.api_key}"},
        checks=CHECKS,
    )
    return response


def read_back(sandbox: RunningSandbox, method: str, path: str, record_id: str) -> Response:
    """Call an operation on one record, validating the answer."""
    return call(schema[path][method].Case(path_parameters={"id": record_id}), sandbox)


# ---------------------------------------------------------------------- generated inputs
def _conformance_test(method: str, path: str) -> Callable[..., None]:
    """The generated-inputs test of one operation, as a function of its own. Schemathesis gives
    the operations of one parametrized test a single node id, and pytest-xdist then runs only
    one of them; one function per operation keeps every operation tested, each by name."""

    def test(case: Case[Any], sandbox: RunningSandbox) -> None:
        call(case, sandbox)

    name = re.sub(r"\W+", "_", f"{method} {path}".lower()).strip("_")
    test.__name__ = test.__qualname__ = f"test_responses_conform_to_the_document__{name}"
    only = schema.include(method=method.upper(), path=path)
    return cast("Callable[..., None]", only.parametrize()(test))


HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}
OPERATIONS = [
    (method, path)
    for path, item in DOCUMENT["paths"].items()
    for method in item
    if method in HTTP_METHODS
]
for _method, _path in OPERATIONS:
    _test = _conformance_test(_method, _path)
    globals()[_test.__name__] = _test


def test_every_operation_has_its_generated_test() -> None:
    generated = {name for name in globals() if name.startswith("test_responses_conform")}
    assert len(generated) == len(OPERATIONS) == len(list(schema.get_all_operations()))


# ---------------------------------------------------------------------- existing records
def _spread(ids: list[str], count: int) -> list[str]:
    """`count` ids evenly spread over a sorted list, for a sample that is the same every run."""
    ids = sorted(ids)
    step = max(1, len(ids) // count)
    return ids[::step][:count]


def _shipment_ids(sandbox: RunningSandbox) -> list[str]:
    """Shipments in every state, addressed by id, internal UUID and recipient link id."""
    store = sandbox.store
    by_state: dict[str, list[str]] = {}
    for shipment in store.shipments.by_id.values():
        by_state.setdefault(f"{shipment.status}/{shipment.activity_status}", []).append(shipment.id)
    ids = [i for group in by_state.values() for i in _spread(group, 4)]
    archived = [s.id for s in store.shipments.by_id.values() if s.archived_at is not None]
    ids += _spread(archived, 3)
    for shipment_id in _spread(ids, 4):
        shipment = store.shipments.by_id[shipment_id]
        ids += [shipment.uuid, shipment.recipients[-1].link_id]
    return sorted(set(ids))


def _webhook_ids(sandbox: RunningSandbox) -> list[str]:
    """At least four subscriptions, made through the API (DELETE cases take some away)."""
    body = {"event": "shipment.signed", "target_url": "https://hooks.example.com/in"}
    with client_for(sandbox) as client:
        while len(sandbox.store.webhooks) < 4:
            response = client.post("/webhooks", json=body)
            assert response.status_code == 201, response.text
    with sandbox.store.lock:
        return sorted(sandbox.store.webhooks)


KNOWN_RECORDS: dict[tuple[str, str], Callable[[RunningSandbox], list[str]]] = {
    ("GET", "/documents/{id}"): lambda s: sorted(s.store.documents.by_id),
    ("GET", "/shipments/{id}"): _shipment_ids,
    ("GET", "/shipments/{id}/fields"): _shipment_ids,
    ("GET", "/shipments/{id}/events"): _shipment_ids,
    ("GET", "/contacts/{id}"): lambda s: _spread(list(s.store.contacts.by_id), 20),
    ("GET", "/webhooks/{id}"): _webhook_ids,
    ("DELETE", "/webhooks/{id}"): _webhook_ids,
}


@pytest.mark.parametrize(
    ("method", "path"), list(KNOWN_RECORDS), ids=[" ".join(r) for r in KNOWN_RECORDS]
)
def test_existing_records_conform(sandbox: RunningSandbox, method: str, path: str) -> None:
    operation = schema[path][method]
    ids = KNOWN_RECORDS[method, path](sandbox)
    # Invalid inputs need something besides the id to get wrong.
    modes = [GenerationMode.POSITIVE]
    if operation.query:
        modes.append(GenerationMode.NEGATIVE)

    @bounded
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        record_id = data.draw(st.sampled_from(ids), label="id")
        mode = data.draw(st.sampled_from(modes), label="mode")
        case = data.draw(
            operation.as_strategy(generation_mode=mode, path_parameters={"id": record_id})
        )
        call(case, sandbox)

    run()


# ---------------------------------------------------------------------- writes, read back
class Writer:
    """Makes generated writes refer to records that exist, so that many of them succeed."""

    def __init__(self, sandbox: RunningSandbox, data: st.DataObject) -> None:
        self.store = sandbox.store
        self.data = data

    def pick(self, ids: list[str]) -> str:
        return self.data.draw(st.sampled_from(_spread(ids, 50)))

    def shipment(self, body: dict[str, Any]) -> None:
        """An existing document and contacts, e-mail addresses for the recipients, the
        document's field ids for the field values, a validity the reference accepts."""
        document = self.store.documents.by_id[self.pick(list(self.store.documents.by_id))]
        body["document_id"] = document.id
        recipients = body.get("recipients")
        if isinstance(recipients, list):
            for number, recipient in enumerate(recipients):
                if isinstance(recipient, dict) and isinstance(recipient.get("email"), str):
                    recipient["email"] = f"recipient{number}@example.com"
        contact_ids = body.get("contact_ids")
        if isinstance(contact_ids, list):
            body["contact_ids"] = [self.pick(list(self.store.contacts.by_id)) for _ in contact_ids]
        if not recipients and not body.get("contact_ids"):
            body["contact_ids"] = [self.pick(list(self.store.contacts.by_id))]
        values = body.get("field_values")
        if isinstance(values, dict):
            field_ids = [f.id for f in document.fields]
            body["field_values"] = dict(zip(field_ids, values.values(), strict=False))
        days = body.get("expires_in_days")
        if isinstance(days, int) and not isinstance(days, bool):
            body["expires_in_days"] = 1 + days % 365

    def contact(self, body: dict[str, Any]) -> None:
        """A new contact, or an update of an existing one found by e-mail or by id."""
        target = self.data.draw(st.sampled_from(["new", "same email", "same id"]))
        if target != "new":
            contact = self.store.contacts.by_id[self.pick(list(self.store.contacts.by_id))]
            if target == "same email":
                body["email"] = contact.email.upper()
            else:
                body["id"] = contact.id
        email = body.get("email")
        if isinstance(email, str) and "@" not in email:
            body["email"] = f"{email}@example.com"

    def webhook(self, body: dict[str, Any]) -> None:
        return None


WRITES: dict[tuple[str, str], tuple[Callable[[Writer, dict[str, Any]], None], list[str]]] = {
    ("POST", "/shipments"): (
        Writer.shipment,
        ["GET /shipments/{id}", "GET /shipments/{id}/fields", "GET /shipments/{id}/events"],
    ),
    ("POST", "/contacts"): (Writer.contact, ["GET /contacts/{id}"]),
    ("POST", "/webhooks"): (
        Writer.webhook,
        ["GET /webhooks/{id}", "DELETE /webhooks/{id}", "GET /webhooks/{id}"],
    ),
}


@pytest.mark.parametrize(("method", "path"), list(WRITES), ids=[" ".join(w) for w in WRITES])
def test_writes_conform_and_read_back(sandbox: RunningSandbox, method: str, path: str) -> None:
    operation = schema[path][method]
    prepare, reads = WRITES[method, path]
    succeeded: list[int] = []

    @bounded
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        mode = data.draw(st.sampled_from(list(GenerationMode)), label="mode")
        case = data.draw(operation.as_strategy(generation_mode=mode))
        if isinstance(case.body, dict):
            prepare(Writer(sandbox, data), case.body)
        if case.headers and "Idempotency-Key" in case.headers:
            # Generated keys repeat; keep each one to one body (a repeat is tried below).
            case.headers["Idempotency-Key"] += f"-{len(succeeded)}-{data.draw(st.integers())}"
        response = call(case, sandbox)
        if response.status_code not in (200, 201):
            return
        succeeded.append(response.status_code)
        if case.headers and "Idempotency-Key" in case.headers:
            assert call(case, sandbox).json() == response.json()
        record_id = response.json()["data"]["id"]
        for read in reads:
            read_method, read_path = read.split(" ")
            read_back(sandbox, read_method, read_path, record_id)

    run()
    assert len(succeeded) >= KNOWN_EXAMPLES // 4, f"only {len(succeeded)} writes succeeded"


# ---------------------------------------------------------------------- regressions
def _existing(sandbox: RunningSandbox) -> dict[str, str]:
    store = sandbox.store
    document = next(d for d in store.documents.by_id.values() if len(d.fields) > 1)
    contact = store.contacts.by_id[sorted(store.contacts.by_id)[0]]
    return {
        "document": document.id,
        "text_field": next(f.id for f in document.fields if f.type == "text"),
        "contact": contact.id,
        "email": contact.email,
    }


# Invalid inputs the generated passes are unlikely to hit, each of which once got an answer
# that broke the document (a 500, or a 2xx echoing the invalid value back).
INVALID_INPUTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "limit with too many digits": ("GET", "/documents", {"query": {"limit": "9" * 5000}}),
    "offset beyond 64 bits": ("GET", "/contacts", {"query": {"offset": "9" * 20}}),
    "webhook target with a space": (
        "POST",
        "/webhooks",
        {"body": {"event": "shipment.sent", "target_url": "https://hooks.example.com/a b"}},
    ),
    "contact name null": ("POST", "/contacts", {"body": {"email": "{email}", "name": None}}),
    "recipient company not a string": (
        "POST",
        "/shipments",
        {
            "body": {
                "document_id": "{document}",
                "recipients": [{"name": "A", "email": "a@example.com", "company": 5}],
            }
        },
    ),
    "text field value not a string": (
        "POST",
        "/shipments",
        {
            "body": {
                "document_id": "{document}",
                "contact_ids": ["{contact}"],
                "field_values": {"{text_field}": 5},
            }
        },
    ),
}


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**names) if value.startswith("{") else value
    if isinstance(value, dict):
        return {_fill(k, names): _fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    return value


@pytest.mark.parametrize("name", list(INVALID_INPUTS))
def test_invalid_inputs_are_refused(sandbox: RunningSandbox, name: str) -> None:
    method, path, parts = INVALID_INPUTS[name]
    parts = _fill(parts, _existing(sandbox))
    response = call(schema[path][method].Case(**parts), sandbox)
    assert response.status_code == 422


def test_served_document_is_the_yaml_file(sandbox: RunningSandbox) -> None:
    response = httpx.get(f"{sandbox.root_url}/openapi.json", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == yaml.safe_load(OPENAPI_PATH.read_text())
