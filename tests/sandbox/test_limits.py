"""Request limits and injected faults, through real HTTP against sandboxes with tight limits:
the per-key token bucket, the per-minute window, daily allowances, plan figures, per-instance and
per-key isolation, fault injection and changing all of it at runtime."""

from __future__ import annotations

import math
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest

from sandbox import SandboxConfig
from tests.support import SandboxFactory, admin, admin_response, client_for, new_key

RECIPIENT = {"name": "Ada Limit", "email": "ada.limit@example.com", "company": "Acme"}


def assert_rate_limited(response: httpx.Response, scope: str, *, injected: bool = False) -> int:
    """A 429 in the reference's shape; returns its Retry-After in seconds. An injected 429 is
    chaos, not a spent bucket: its X-RateLimit-Remaining may be anything."""
    assert response.status_code == 429, response.text
    body = response.json()
    assert body["error"]["code"] == "rate_limited"
    retry_after = int(response.headers["Retry-After"])
    assert body["retry_after"] == retry_after
    assert response.headers["X-RateLimit-Scope"] == scope
    if not injected:
        assert response.headers["X-RateLimit-Remaining"] == "0"
    return retry_after


def seconds_to_next_midnight(response: httpx.Response) -> float:
    """From the response's `Date` (the sandbox clock) to the next UTC midnight."""
    now = parsedate_to_datetime(response.headers["Date"])
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    return (midnight - now).total_seconds()


def a_document_id(client: httpx.Client) -> str:
    document_id = client.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
    assert isinstance(document_id, str)
    return document_id


# ---------------------------------------------------------------------- token bucket
def test_token_bucket_admits_the_burst_then_429_until_retry_after(
    make_sandbox: SandboxFactory,
) -> None:
    rate, burst = 10.0, 40
    running = make_sandbox(requests_per_second=rate, burst=burst, requests_per_minute=100_000)
    with client_for(running) as client:
        started = time.monotonic()
        responses = [client.get("/me") for _ in range(2 * burst)]
        elapsed = time.monotonic() - started
        admitted = sum(r.status_code == 200 for r in responses)
        assert {r.status_code for r in responses} == {200, 429}
        assert burst <= admitted <= burst + rate * elapsed + 1
        # Nothing is refused before the burst is used up.
        assert all(r.status_code == 200 for r in responses[:burst])
        refused = [r for r in responses if r.status_code == 429]
        waits = {assert_rate_limited(r, "key") for r in refused}
        assert all(1 <= wait <= math.ceil(1 / rate) for wait in waits)
        assert {r.headers["X-RateLimit-Limit"] for r in refused} == {str(burst)}
        time.sleep(int(refused[-1].headers["Retry-After"]))
        again = client.get("/me")
    assert again.status_code == 200
    assert again.headers["X-RateLimit-Scope"] == "key"


def test_token_bucket_is_per_key(make_sandbox: SandboxFactory) -> None:
    # Refill so slow that it cannot add a token while the test runs.
    running = make_sandbox(requests_per_second=0.01, burst=5, requests_per_minute=100_000)
    second = new_key(running, name="second", scopes=["read"])
    with client_for(running) as first_client, client_for(running, second) as second_client:
        first = [first_client.get("/me").status_code for _ in range(7)]
        other = [second_client.get("/me").status_code for _ in range(7)]
        still = first_client.get("/me")
    assert first == [200] * 5 + [429] * 2
    assert other == [200] * 5 + [429] * 2
    assert_rate_limited(still, "key")


# ---------------------------------------------------------------------- per minute
def test_per_minute_window_refuses_the_request_after_the_limit(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(requests_per_minute=12, burst=1_000, requests_per_second=1_000)
    with client_for(running) as client:
        admitted = [client.get("/me") for _ in range(12)]
        refused = client.get("/me")
    assert [r.status_code for r in admitted] == [200] * 12
    assert {r.headers["X-RateLimit-Limit"] for r in admitted} == {"12"}
    # One request spends one: 11 left after the first, none after the twelfth.
    assert [int(r.headers["X-RateLimit-Remaining"]) for r in admitted] == list(range(11, -1, -1))
    retry_after = assert_rate_limited(refused, "key")
    assert 1 <= retry_after <= 60
    assert refused.headers["X-RateLimit-Limit"] == "12"
    assert int(refused.headers["X-RateLimit-Reset"]) == retry_after


def test_remaining_falls_by_one_per_request_on_every_endpoint(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(requests_per_minute=50, burst=1_000, requests_per_second=1_000)
    with client_for(running) as client:
        responses = [
            client.get("/me"),
            client.get("/documents", params={"limit": 2}),
            client.get("/contacts", params={"limit": 2}),
            client.get("/shipments", params={"limit": 2}),
            client.get("/webhooks"),
            client.get("/documents/doc_unknown"),  # a 404 is spent too
        ]
    remaining = [int(r.headers["X-RateLimit-Remaining"]) for r in responses]
    assert remaining == list(range(49, 49 - len(responses), -1))


def test_free_plan_allows_30_requests_per_minute(make_sandbox: SandboxFactory) -> None:
    assert SandboxConfig(plan="free").effective_requests_per_minute == 30
    assert SandboxConfig(plan="free", requests_per_minute=7).effective_requests_per_minute == 7
    running = make_sandbox(plan="free")
    with client_for(running) as client:
        admitted = [client.get("/me") for _ in range(30)]
        refused = client.get("/me")
    assert admitted[0].json()["workspace"]["plan"] == "free"
    assert [r.status_code for r in admitted] == [200] * 30
    # The minute window (29 left after one) is tighter than the burst of 40 from the start.
    assert {r.headers["X-RateLimit-Limit"] for r in admitted} == {"30"}
    assert_rate_limited(refused, "key")
    assert refused.headers["X-RateLimit-Limit"] == "30"


def test_limits_belong_to_each_sandbox_instance(make_sandbox: SandboxFactory) -> None:
    tight = make_sandbox(requests_per_minute=3, burst=1_000, requests_per_second=1_000)
    loose = make_sandbox(requests_per_minute=6, burst=1_000, requests_per_second=1_000)
    with client_for(tight) as tight_client, client_for(loose) as loose_client:
        pairs = [(tight_client.get("/me"), loose_client.get("/me")) for _ in range(8)]
    assert [t.status_code for t, _ in pairs] == [200] * 3 + [429] * 5
    assert [loose.status_code for _, loose in pairs] == [200] * 6 + [429] * 2
    assert pairs[0][0].headers["X-RateLimit-Limit"] == "3"
    assert pairs[0][1].headers["X-RateLimit-Limit"] == "6"


# ---------------------------------------------------------------------- daily
def test_daily_shipment_allowance_ends_with_429_until_midnight(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(daily_shipments=2)
    with client_for(running) as client:
        body = {"document_id": a_document_id(client), "recipients": [RECIPIENT]}
        before = client.get("/me")
        sent = [client.post("/shipments", json=body) for _ in range(2)]
        total_before = client.get("/shipments").json()["total"]
        refused = client.post("/shipments", json=body)
        total_after = client.get("/shipments").json()["total"]
    assert before.headers["X-Daily-Limit"] == "2"
    assert before.headers["X-Daily-Remaining"] == "2"
    assert [r.status_code for r in sent] == [201, 201]
    assert [r.headers["X-Daily-Remaining"] for r in sent] == ["1", "0"]
    retry_after = assert_rate_limited(refused, "daily")
    assert abs(retry_after - seconds_to_next_midnight(refused)) <= 2
    assert refused.headers["X-Daily-Remaining"] == "0"
    assert total_after == total_before  # the refused shipment was not made


def test_daily_shipment_allowance_renews_at_the_sandbox_midnight(
    make_sandbox: SandboxFactory,
) -> None:
    running = make_sandbox(daily_shipments=1, limits_enabled=False)
    with client_for(running) as client:
        body = {"document_id": a_document_id(client), "recipients": [RECIPIENT]}
        assert client.post("/shipments", json=body).status_code == 201
        assert client.post("/shipments", json=body).status_code == 429
        assert admin_response(running, "POST", "/advance", {"hours": 24}).status_code == 200
        renewed = client.post("/shipments", json=body)
    assert renewed.status_code == 201
    assert renewed.headers["X-Daily-Remaining"] == "0"


def test_daily_request_cap_answers_429_scope_daily(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(daily_requests=3, burst=1_000, requests_per_second=1_000)
    with client_for(running) as client:
        admitted = [client.get("/me") for _ in range(3)]
        refused = client.get("/documents")
    assert [r.status_code for r in admitted] == [200] * 3
    retry_after = assert_rate_limited(refused, "daily")
    assert abs(retry_after - seconds_to_next_midnight(refused)) <= 2


# ---------------------------------------------------------------------- faults
def test_injected_429s_follow_the_configured_rate(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(fault_429_rate=0.5, limits_enabled=False)
    with client_for(running) as client:
        statuses: Counter[int] = Counter()
        for _ in range(200):
            response = client.get("/me")
            statuses[response.status_code] += 1
            if response.status_code == 429:
                assert assert_rate_limited(response, "key", injected=True) == 1
    assert set(statuses) == {200, 429}
    # Binomial(200, 0.5): mean 100, standard deviation about 7.1; five of them either side.
    assert 65 <= statuses[429] <= 135


def test_injected_429_can_give_retry_after_as_an_http_date(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(fault_429_rate=1.0, fault_retry_after="http-date", limits_enabled=False)
    gaps: list[float] = []
    with client_for(running) as client:
        for _ in range(5):
            response = client.get("/me")
            assert response.status_code == 429
            assert response.json()["error"]["code"] == "rate_limited"
            retry_at = parsedate_to_datetime(response.headers["Retry-After"])
            assert retry_at.tzinfo is not None
            date = parsedate_to_datetime(response.headers["Date"])
            gaps.append((retry_at - date).total_seconds())
    assert all(0 <= gap <= 5 for gap in gaps), gaps
    assert max(gaps) >= 1, gaps


def test_injected_429_can_say_retry_after_zero(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(fault_429_rate=1.0, fault_retry_after="zero", limits_enabled=False)
    with client_for(running) as client:
        response = client.get("/me")
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "0"
    assert response.json()["retry_after"] == 0


def test_mixed_retry_after_uses_all_three_forms(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(fault_429_rate=1.0, fault_retry_after="mixed", limits_enabled=False)
    forms: Counter[str] = Counter()
    with client_for(running) as client:
        for _ in range(60):
            value = client.get("/me").headers["Retry-After"]
            if value == "0":
                forms["zero"] += 1
            elif value.isdigit():
                forms["seconds"] += 1
            else:
                parsedate_to_datetime(value)
                forms["http-date"] += 1
    assert set(forms) == {"zero", "seconds", "http-date"}


def test_injected_5xx_carry_the_error_body(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(fault_5xx_rate=0.5, limits_enabled=False)
    failures = 0
    with client_for(running) as client:
        for _ in range(100):
            response = client.get("/me")
            if response.status_code == 200:
                continue
            failures += 1
            assert response.status_code in (500, 502, 503)
            assert response.json()["error"]["code"] == "server_error"
            assert "X-RateLimit-Remaining" in response.headers
    # Binomial(100, 0.5): mean 50, standard deviation 5; five of them either side.
    assert 25 <= failures <= 75


def test_truncated_list_response_breaks_the_read(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(fault_truncate_rate=1.0, limits_enabled=False)
    with (
        client_for(running) as client,
        pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)),
    ):
        client.get("/documents")


# ---------------------------------------------------------------------- runtime config
def test_config_changes_at_runtime(make_sandbox: SandboxFactory) -> None:
    running = make_sandbox(limits_enabled=False)
    with client_for(running) as client:
        assert all(client.get("/me").status_code == 200 for _ in range(10))
        changed = admin_response(
            running,
            "PATCH",
            "/config",
            {"limits_enabled": True, "requests_per_minute": 4, "burst": 1_000},
        )
        assert changed.status_code == 200
        assert changed.json()["requests_per_minute"] == 4
        assert changed.json()["limits_enabled"] is True
        statuses = [client.get("/me").status_code for _ in range(5)]
        assert statuses == [200] * 4 + [429]
        # A change starts the buckets afresh with the new figures.
        relaxing = admin_response(running, "PATCH", "/config", {"requests_per_minute": 50})
        assert relaxing.status_code == 200
        relaxed = client.get("/me")
        assert relaxed.status_code == 200
        assert relaxed.headers["X-RateLimit-Limit"] == "50"
        # Faults too: a truncating sandbox, then a healthy one again.
        admin(running, "PATCH", "/config", {"fault_truncate_rate": 1.0})
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            client.get("/documents")
        admin(running, "PATCH", "/config", {"fault_truncate_rate": 0.0})
        assert client.get("/documents").status_code == 200


@pytest.mark.parametrize("body", [{"no_such_setting": 1}, {"order": "sideways"}])
def test_config_refuses_unknown_settings(make_sandbox: SandboxFactory, body: Any) -> None:
    running = make_sandbox(limits_enabled=False)
    response = admin_response(running, "PATCH", "/config", body)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize(
    "body",
    [
        {"requests_per_minute": "many"},
        {"burst": -3},
        {"fault_429_rate": "often"},
        {"hold_after": 1.5},
        {"hold_after": -1},
    ],
    ids=["string-for-int", "negative-burst", "string-for-rate", "fraction-held", "negative-held"],
)
def test_config_refuses_values_that_would_break_the_sandbox(
    make_sandbox: SandboxFactory, body: Any
) -> None:
    running = make_sandbox()
    response = admin_response(running, "PATCH", "/config", body)
    assert response.status_code == 422, response.text
    with client_for(running) as client:
        assert client.get("/me").status_code == 200
