"""Webhook subscriptions and deliveries, received for real: a small HTTP server in a thread on
loopback records what the sandbox POSTs and answers with scripted status codes."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import orjson
import pytest

from sandbox import RunningSandbox
from tests.support import START_MS, SandboxFactory, admin, admin_response, client_for, sandbox_now

# A reply of the receiver: a status code, or (seconds to stall first, status code).
Reply = int | tuple[float, int]

EVENTS = [
    "shipment.sent",
    "shipment.opened",
    "shipment.signed",
    "shipment.completed",
    "shipment.expired",
    "shipment.delivery_failed",
    "contact.created",
    "inquiry.answered",
]
DEADLINE_S = 10.0
# How long to watch for something that must not arrive; far longer than the first retry delay.
QUIET_S = 0.5


@dataclass(frozen=True, slots=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    at: float  # time.monotonic() on arrival

    def json(self) -> dict[str, Any]:
        payload = orjson.loads(self.body)
        assert isinstance(payload, dict)
        return payload


class _Server(ThreadingHTTPServer):
    # The sandbox delivers up to 16 requests at once; the default backlog of 5 drops some.
    request_queue_size = 64
    daemon_threads = True


class Receiver:
    """Records every request; answers from `script` in arrival order, then `default`."""

    def __init__(self, script: Sequence[Reply] = (), default: int = 200) -> None:
        self._script = list(script)
        self._default = default
        self._lock = threading.Lock()
        self._received: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reply = receiver._record(
                    Received(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        time.monotonic(),
                    )
                )
                delay, status = reply if isinstance(reply, tuple) else (0.0, reply)
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the sandbox gave up waiting (a time-out test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    def _record(self, request: Received) -> Reply:
        with self._lock:
            self._received.append(request)
            return self._script.pop(0) if self._script else self._default

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def wait_for(self, count: int, deadline_s: float = DEADLINE_S) -> list[Received]:
        """At least `count` requests, polling until the deadline."""
        wait_until(lambda: len(self.received) >= count, deadline_s, f"{count} deliveries")
        return self.received

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def wait_until(condition: Callable[[], bool], deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {deadline_s} s for {what}")
        time.sleep(0.02)


def stays(condition: Callable[[], bool], seconds: float = QUIET_S) -> bool:
    """Whether `condition` holds throughout the next `seconds` (for what must not happen)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not condition():
            return False
        time.sleep(0.02)
    return condition()


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    started: list[Receiver] = []

    def start(script: Sequence[Reply] = (), default: int = 200) -> Receiver:
        receiver = Receiver(script, default)
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.close()


@pytest.fixture
def running(make_sandbox: SandboxFactory) -> RunningSandbox:
    """Fast retries (20 ms doubling), a half-second delivery time-out, no request limits."""
    return make_sandbox(webhook_retry_base_s=0.02, webhook_timeout_s=0.5, limits_enabled=False)


@pytest.fixture
def api(running: RunningSandbox) -> Iterator[httpx.Client]:
    """Here `api` talks to this module's own sandbox, not the shared one."""
    with client_for(running) as client:
        yield client


def subscribe(api: httpx.Client, event: str, target_url: str) -> dict[str, Any]:
    response = api.post("/webhooks", json={"event": event, "target_url": target_url})
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    assert isinstance(data, dict)
    return data


def hook(api: httpx.Client, hook_id: str) -> dict[str, Any]:
    response = api.get(f"/webhooks/{hook_id}")
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert isinstance(data, dict)
    return data


def wait_for_hook(
    api: httpx.Client, hook_id: str, condition: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    wait_until(lambda: condition(hook(api, hook_id)), DEADLINE_S, f"webhook {hook_id} state")
    return hook(api, hook_id)


def send_shipment(api: httpx.Client, email: str = "ada.hook@example.com") -> dict[str, Any]:
    document_id = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
    response = api.post(
        "/shipments",
        json={
            "document_id": document_id,
            "recipients": [{"name": "Ada Hook", "email": email, "company": "Acme"}],
        },
    )
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    assert isinstance(data, dict)
    return data


def expected_signature(secret: str, delivery: Received) -> str:
    timestamp = delivery.headers["x-service-timestamp"]
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + delivery.body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def delivery_ids(received: list[Received]) -> set[str]:
    return {r.headers["x-service-delivery"] for r in received}


# ---------------------------------------------------------------------- subscriptions
def test_secret_is_shown_only_on_creation(
    api: httpx.Client, receivers: Callable[..., Receiver]
) -> None:
    target = receivers().url()
    created = subscribe(api, "shipment.sent", target)
    assert created["secret"]
    assert created["event"] == "shipment.sent"
    assert created["target_url"] == target
    assert created["is_active"] is True
    assert (created["delivery_count"], created["failure_count"]) == (0, 0)
    listed = api.get("/webhooks").json()
    assert listed["events"] == EVENTS
    assert [h["id"] for h in listed["data"]] == [created["id"]]
    single = hook(api, created["id"])
    for shown in (listed["data"][0], single):
        assert "secret" not in shown
        assert shown == {k: v for k, v in created.items() if k != "secret"}


@pytest.mark.parametrize(
    "body",
    [
        {"event": "shipment.sent", "target_url": "http://hooks.example.com/hook"},
        {"event": "shipment.sent", "target_url": "ftp://127.0.0.1/hook"},
        {"event": "shipment.sent", "target_url": "not a url"},
        {"event": "shipment.sent"},
        {"event": "shipment.teleported", "target_url": "https://hooks.example.com/hook"},
        {"target_url": "https://hooks.example.com/hook"},
    ],
    ids=["http-remote", "ftp", "not-url", "no-url", "unknown-event", "no-event"],
)
def test_bad_subscription_is_refused(api: httpx.Client, body: dict[str, str]) -> None:
    response = api.post("/webhooks", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"
    assert api.get("/webhooks").json()["data"] == []


def test_https_remote_target_is_accepted(api: httpx.Client) -> None:
    created = subscribe(api, "contact.created", "https://hooks.example.com/hook")
    assert created["target_url"] == "https://hooks.example.com/hook"


def test_delete_removes_the_subscription(
    api: httpx.Client, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    removed = subscribe(api, "shipment.sent", receiver.url("/removed"))
    kept = subscribe(api, "shipment.sent", receiver.url("/kept"))
    deleted = api.delete(f"/webhooks/{removed['id']}")
    assert deleted.status_code == 200
    assert deleted.json() == {"data": {"id": removed["id"], "deleted": True}}
    gone = api.get(f"/webhooks/{removed['id']}")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "not_found"
    assert api.delete(f"/webhooks/{removed['id']}").status_code == 404
    assert [h["id"] for h in api.get("/webhooks").json()["data"]] == [kept["id"]]
    send_shipment(api)
    receiver.wait_for(1)
    assert stays(lambda: len(receiver.received) == 1)
    assert [r.path for r in receiver.received] == ["/kept"]


# ---------------------------------------------------------------------- one delivery
def test_shipment_sent_is_delivered_signed(
    api: httpx.Client, running: RunningSandbox, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    created = subscribe(api, "shipment.sent", receiver.url())
    shipment = send_shipment(api)
    [delivery] = receiver.wait_for(1)
    assert delivery.method == "POST"
    assert delivery.path == "/hook"
    assert delivery.headers["content-type"].startswith("application/json")
    assert delivery.headers["x-service-event"] == "shipment.sent"
    assert delivery.headers["x-service-delivery"]
    timestamp = int(delivery.headers["x-service-timestamp"])
    now = sandbox_now(running)
    assert 0 <= now.timestamp() - timestamp < 60  # the sandbox clock, in seconds
    signature = delivery.headers["x-service-signature"]
    assert hmac.compare_digest(signature, expected_signature(created["secret"], delivery))
    assert not hmac.compare_digest(signature, expected_signature("whsec_wrong", delivery))
    payload = delivery.json()
    assert payload["event"] == "shipment.sent"
    assert payload["workspace_id"] == api.get("/me").json()["workspace"]["id"]
    assert payload["shipment"]["id"] == shipment["id"]
    assert payload["recipient"]["id"] == shipment["recipients"][0]["id"]
    assert payload["recipient"]["email"] == "ada.hook@example.com"
    assert payload["recipient"]["sent_at"] is not None
    state = wait_for_hook(api, created["id"], lambda h: h["delivery_count"] == 1)
    assert state["failure_count"] == 0
    assert state["last_delivered_at"] is not None
    assert state["is_active"] is True
    assert stays(lambda: len(receiver.received) == 1)


# ---------------------------------------------------------------------- retries
@pytest.mark.parametrize(
    "failures", [[503, 503], [408, 429], [500, 502]], ids=["503-503", "408-429", "500-502"]
)
def test_retryable_failures_are_retried_with_the_same_delivery_id(
    api: httpx.Client, receivers: Callable[..., Receiver], failures: list[int]
) -> None:
    receiver = receivers([*failures, 200])
    created = subscribe(api, "shipment.sent", receiver.url())
    send_shipment(api)
    attempts = receiver.wait_for(3)
    assert len(delivery_ids(attempts)) == 1
    assert len({r.body for r in attempts}) == 1
    for attempt in attempts:  # each attempt is signed with its own timestamp
        assert attempt.headers["x-service-signature"] == expected_signature(
            created["secret"], attempt
        )
    state = wait_for_hook(api, created["id"], lambda h: h["delivery_count"] == 1)
    assert state["failure_count"] == 2
    assert state["is_active"] is True
    assert stays(lambda: len(receiver.received) == 3)


def test_persistent_5xx_gets_five_retries_with_growing_delays(
    api: httpx.Client, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(default=500)
    created = subscribe(api, "shipment.sent", receiver.url())
    send_shipment(api)
    state = wait_for_hook(api, created["id"], lambda h: h["failure_count"] >= 6)
    # The next delay would be 0.64 s; watch a little longer than that.
    assert stays(lambda: len(receiver.received) == 6, seconds=1.0)
    attempts = receiver.received
    assert len(delivery_ids(attempts)) == 1
    assert state["delivery_count"] == 0
    assert state["is_active"] is True
    assert "500" in state["last_error"]
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(attempts)]
    # Delays 0.02, 0.04, ... 0.32 s: the last wait is the longest.
    assert gaps[-1] >= 0.3
    assert gaps[-1] > gaps[0]


@pytest.mark.parametrize("status", [400, 404, 401])
def test_client_errors_are_not_retried(
    api: httpx.Client, receivers: Callable[..., Receiver], status: int
) -> None:
    receiver = receivers([status])
    created = subscribe(api, "shipment.sent", receiver.url())
    send_shipment(api)
    state = wait_for_hook(api, created["id"], lambda h: h["failure_count"] == 1)
    assert stays(lambda: len(receiver.received) == 1)
    assert state["delivery_count"] == 0
    assert state["is_active"] is True
    assert str(status) in state["last_error"]


def test_gone_deactivates_the_subscription(
    api: httpx.Client, receivers: Callable[..., Receiver]
) -> None:
    gone = receivers([410])
    sentinel = receivers()
    created = subscribe(api, "shipment.sent", gone.url())
    subscribe(api, "shipment.sent", sentinel.url())
    send_shipment(api, "first@example.com")
    state = wait_for_hook(api, created["id"], lambda h: h["is_active"] is False)
    assert state["failure_count"] == 1
    assert len(gone.received) == 1
    # A later event reaches the active subscription but not the deactivated one.
    sentinel.wait_for(1)
    send_shipment(api, "second@example.com")
    sentinel.wait_for(2)
    assert stays(lambda: len(gone.received) == 1)
    assert hook(api, created["id"])["is_active"] is False


def test_slow_receiver_is_timed_out_and_retried(
    api: httpx.Client, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers([(1.5, 200), 200])  # the first answer comes after the 0.5 s time-out
    created = subscribe(api, "shipment.sent", receiver.url())
    send_shipment(api)
    attempts = receiver.wait_for(2)
    assert len(delivery_ids(attempts)) == 1
    state = wait_for_hook(api, created["id"], lambda h: h["delivery_count"] == 1)
    assert state["failure_count"] == 1
    assert "timeout" in state["last_error"]


def test_delivery_time_out_can_be_changed_at_runtime(
    make_sandbox: SandboxFactory, receivers: Callable[..., Receiver]
) -> None:
    running = make_sandbox(webhook_retry_base_s=0.02, webhook_timeout_s=5.0, limits_enabled=False)
    changed = admin(running, "PATCH", "/config", {"webhook_timeout_s": 0.3})
    assert changed["webhook_timeout_s"] == 0.3
    receiver = receivers([(1.5, 200), 200])
    with client_for(running) as api:
        created = subscribe(api, "shipment.sent", receiver.url())
        send_shipment(api)
        state = wait_for_hook(
            api, created["id"], lambda h: h["delivery_count"] + h["failure_count"] >= 1
        )
    # The first attempt must end as a time-out after 0.3 s, not wait 1.5 s for the answer.
    assert state["failure_count"] == 1, state
    assert "timeout" in state["last_error"]


# ---------------------------------------------------------------------- other events
def test_contact_created_fires_on_create_not_on_update(
    api: httpx.Client, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    created = subscribe(api, "contact.created", receiver.url())
    first = api.post("/contacts", json={"email": "grace.new@example.com", "name": "Grace"})
    assert first.status_code == 201
    [delivery] = receiver.wait_for(1)
    assert delivery.headers["x-service-event"] == "contact.created"
    assert delivery.headers["x-service-signature"] == expected_signature(
        created["secret"], delivery
    )
    payload = delivery.json()
    assert payload["event"] == "contact.created"
    assert {"event", "workspace_id", "shipment", "recipient"} <= set(payload)
    assert payload["contact"]["id"] == first.json()["data"]["id"]
    updated = api.post("/contacts", json={"email": "grace.new@example.com", "name": "Grace H."})
    assert updated.status_code == 200
    # Another creation after the update: its delivery is the only one that follows.
    second = api.post("/contacts", json={"email": "alan.new@example.com", "name": "Alan"})
    assert second.status_code == 201
    receiver.wait_for(2)
    assert stays(lambda: len(receiver.received) == 2)
    assert receiver.received[1].json()["contact"]["id"] == second.json()["data"]["id"]


def test_advancing_the_clock_delivers_signed_events(
    make_sandbox: SandboxFactory, receivers: Callable[..., Receiver]
) -> None:
    # Dozens of deliveries at once: a generous time-out, so that none is retried.
    running = make_sandbox(
        shipments=3_000, webhook_retry_base_s=0.02, webhook_timeout_s=5.0, limits_enabled=False
    )
    receiver = receivers()
    with client_for(running) as api:
        created = subscribe(api, "shipment.signed", receiver.url())
        moved = admin_response(running, "POST", "/advance", {"hours": 48})
        assert moved.status_code == 200
        # Every recipient who signed after generation signed during the advance.
        signed: set[tuple[str, str]] = set()
        offset = 0
        while True:
            page = api.get(
                "/shipments",
                params={
                    "updated_since": START_MS,
                    "include_archived": "true",
                    "limit": 200,
                    "offset": offset,
                },
            ).json()
            for shipment in page["data"]:
                for recipient in shipment["recipients"]:
                    signed_at = recipient["signed_at"]
                    if signed_at and datetime.fromisoformat(signed_at).timestamp() * 1000 > (
                        START_MS
                    ):
                        signed.add((shipment["id"], recipient["id"]))
            offset += len(page["data"])
            if not page["data"] or offset >= page["total"]:
                break
        assert signed, "the advance should have produced signatures"
        deliveries = receiver.wait_for(len(signed))
        state = wait_for_hook(api, created["id"], lambda h: h["delivery_count"] == len(signed))
    assert stays(lambda: len(receiver.received) == len(signed))
    assert state["failure_count"] == 0, state
    assert {r.headers["x-service-event"] for r in deliveries} == {"shipment.signed"}
    assert len(delivery_ids(deliveries)) == len(signed)
    payloads = [r.json() for r in deliveries]
    assert {(p["shipment"]["id"], p["recipient"]["id"]) for p in payloads} == signed
    assert all(p["recipient"]["status"] == "signed" for p in payloads)
    assert all(
        r.headers["x-service-signature"] == expected_signature(created["secret"], r)
        for r in deliveries
    )
