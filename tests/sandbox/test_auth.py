"""Authentication, scopes and the error envelope of `/v1`, through real HTTP: who gets 401, 403,
404, 405 and 500, and that every one of those answers still carries the limit headers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from sandbox import RunningSandbox, SandboxConfig
from tests.support import (
    START_MS,
    SandboxFactory,
    admin,
    admin_response,
    client_for,
    new_key,
    sandbox_now,
)

LIMIT_HEADERS = (
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "X-RateLimit-Scope",
    "X-Daily-Limit",
    "X-Daily-Remaining",
)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    """Limits on (so the headers come from real buckets) but far above what these tests use."""
    config = SandboxConfig(
        seed=11,
        shipments=300,
        start_ms=START_MS,
        requests_per_second=1_000,
        burst=200,  # below the per-address burst, so the key's bucket is the tightest
        requests_per_minute=100_000,
    )
    with RunningSandbox(config) as running:
        yield running


def assert_limit_headers(response: httpx.Response) -> None:
    """The six limit headers are there, numeric where they are counts."""
    missing = [name for name in LIMIT_HEADERS if name not in response.headers]
    assert not missing, f"{response.status_code} answer lacks {missing}"
    for name in LIMIT_HEADERS:
        if name != "X-RateLimit-Scope":
            assert int(response.headers[name]) >= 0, name
    assert response.headers["X-RateLimit-Scope"] in ("key", "ip", "daily")


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    """The reference's error envelope with `code`; returns the message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["error"]["code"] == code
    message = body["error"]["message"]
    assert isinstance(message, str)
    assert message
    assert_limit_headers(response)
    return message


def get_me(running: RunningSandbox, headers: dict[str, str]) -> httpx.Response:
    return httpx.get(f"{running.base_url}/me", headers=headers)


def test_bearer_and_x_api_key_are_both_accepted(sandbox: RunningSandbox) -> None:
    for headers in (
        {"Authorization": f"Bearer {sandbox.api_key}"},
        {"X-API-Key": sandbox.api_key},
    ):
        response = get_me(sandbox, headers)
        assert response.status_code == 200, headers
        assert response.json()["api_version"] == "v1"
        assert_limit_headers(response)
        assert response.headers["X-RateLimit-Scope"] == "key"


def test_missing_or_unknown_key_is_unauthorized(sandbox: RunningSandbox) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer sk_live_0000000000000000000000000000000000000000"},
        {"X-API-Key": "sk_live_not_a_key"},
        {"Authorization": f"Basic {sandbox.api_key}"},  # not a bearer token
        {"Authorization": "Bearer"},
    ):
        assert_error(get_me(sandbox, headers), 401, "unauthorized")


def test_revoked_key_is_unauthorized(sandbox: RunningSandbox) -> None:
    key = new_key(sandbox, name="to revoke", scopes=["read"])
    headers = {"Authorization": f"Bearer {key}"}
    assert get_me(sandbox, headers).status_code == 200
    revoked = admin_response(sandbox, "POST", "/keys/revoke", {"key": key})
    assert revoked.status_code == 200
    assert_error(get_me(sandbox, headers), 401, "unauthorized")
    assert_error(get_me(sandbox, {"X-API-Key": key}), 401, "unauthorized")
    # Revoking one key leaves the others alone.
    assert get_me(sandbox, {"X-API-Key": sandbox.api_key}).status_code == 200


def test_expired_key_is_unauthorized(sandbox: RunningSandbox) -> None:
    now = sandbox_now(sandbox)
    expired = new_key(sandbox, scopes=["read"], expires_at=(now - timedelta(hours=1)).isoformat())
    assert_error(get_me(sandbox, {"Authorization": f"Bearer {expired}"}), 401, "unauthorized")


def test_key_expiry_is_judged_by_the_sandbox_clock(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False)
    # A day after the sandbox's now, which is still before the real date: valid here.
    expires = sandbox_now(running) + timedelta(days=1)
    assert expires < datetime.now(UTC)
    key = new_key(running, scopes=["read"], expires_at=expires.isoformat())
    headers = {"Authorization": f"Bearer {key}"}
    assert get_me(running, headers).status_code == 200
    admin(running, "POST", "/advance", {"hours": 25})
    assert_error(get_me(running, headers), 401, "unauthorized")


def test_key_allowed_only_from_another_address_is_unauthorized(sandbox: RunningSandbox) -> None:
    elsewhere = new_key(sandbox, scopes=["read"], ip_allowlist=["203.0.113.9"])
    assert_error(get_me(sandbox, {"Authorization": f"Bearer {elsewhere}"}), 401, "unauthorized")
    here = new_key(sandbox, scopes=["read"], ip_allowlist=["203.0.113.9", "127.0.0.1"])
    assert get_me(sandbox, {"Authorization": f"Bearer {here}"}).status_code == 200


@pytest.mark.parametrize(
    ("scopes", "method", "path", "body", "missing"),
    [
        pytest.param(
            ["read"], "POST", "/contacts", {"email": "scope.test@example.com"}, "write", id="write"
        ),
        pytest.param(["read"], "POST", "/shipments", {"document_id": "x"}, "send", id="send"),
        pytest.param(["write", "send"], "GET", "/documents", None, "read", id="read"),
    ],
)
def test_key_without_the_scope_is_forbidden_and_told_which(
    sandbox: RunningSandbox,
    scopes: list[str],
    method: str,
    path: str,
    body: dict[str, str] | None,
    missing: str,
) -> None:
    key = new_key(sandbox, scopes=scopes)
    with client_for(sandbox, key) as client:
        message = assert_error(client.request(method, path, json=body), 403, "forbidden")
    assert missing in message
    others = {"read", "write", "send"} - {missing}
    assert not any(f"'{other}'" in message for other in others), message


def test_forbidden_write_changes_nothing(sandbox: RunningSandbox) -> None:
    email = "never.created@example.com"
    with client_for(sandbox, new_key(sandbox, scopes=["read"])) as reader:
        assert reader.post("/contacts", json={"email": email}).status_code == 403
        found = reader.get("/contacts", params={"email": email})
    assert found.status_code == 200
    assert found.json()["total"] == 0


def test_scoped_key_may_use_its_scope(sandbox: RunningSandbox) -> None:
    with client_for(sandbox, new_key(sandbox, scopes=["read"])) as reader:
        assert reader.get("/documents").status_code == 200
    with client_for(sandbox, new_key(sandbox, scopes=["write"])) as writer:
        assert writer.post("/contacts", json={"email": "writer@example.com"}).status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"scopes": "read"}, id="scopes-a-string"),
        pytest.param({"scopes": ["read", "admin"]}, id="unknown-scope"),
        pytest.param({"scopes": ["read"], "expires_at": START_MS}, id="expiry-a-number"),
        pytest.param({"scopes": ["read"], "ip_allowlist": "127.0.0.1"}, id="allowlist-a-string"),
        pytest.param({"scopes": ["read"], "name": ["nightly"]}, id="name-a-list"),
    ],
)
def test_malformed_key_requests_are_refused(sandbox: RunningSandbox, body: dict[str, Any]) -> None:
    """Not a key with the letters of "read" as its scopes, nor a crash."""
    response = admin_response(sandbox, "POST", "/keys", body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("path", ["/nothing-here", "/documents/doc_unknown", "/me/too"])
def test_unknown_path_or_resource_is_not_found(sandbox: RunningSandbox, path: str) -> None:
    with client_for(sandbox) as client:
        assert_error(client.get(path), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/me"), ("PUT", "/shipments"), ("PATCH", "/contacts/ct_1"), ("DELETE", "/documents")],
)
def test_wrong_method_is_method_not_allowed(
    sandbox: RunningSandbox, method: str, path: str
) -> None:
    with client_for(sandbox) as client:
        assert_error(client.request(method, path), 405, "method_not_allowed")


def test_a_crash_answers_500_with_the_error_body(
    make_sandbox: SandboxFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = make_sandbox(limits_enabled=True)

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated crash in the store")

    monkeypatch.setattr(running.store, "list_documents", crash)
    with client_for(running) as client:
        assert_error(client.get("/documents"), 500, "server_error")
        # The server survives its crash.
        assert client.get("/me").status_code == 200
