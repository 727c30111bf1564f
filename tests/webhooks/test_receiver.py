"""The receiver (`signing-etl webhooks serve`, run as a user runs it) over real HTTP, with
deliveries made by hand and signed with the sandbox's own `signature`: what it keeps (read
back with plain sqlite3), what it refuses, with which status and reason, and that hostile
input never earns a 5xx nor forges a log line."""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.waiting import wait_until
from tests.support.webhooks import (
    ServedReceiver,
    delivery,
    free_port,
    inbox_status,
    subscribed_receiver,
)

SECRET = "whsec_receiver_test_secret"
WORKSPACE_ID = "ws_receiver_test"


class Served:
    """The module's receiver: its URL, folder and warehouse."""

    def __init__(self, folder: Path, receiver: ServedReceiver, url: str) -> None:
        self.folder = folder
        self.warehouse = folder / "signing.duckdb"
        self.receiver = receiver
        self.url = url
        self.env = receiver.env

    def kept(self) -> dict[str, tuple[Any, ...]]:
        """The inbox's deliveries, read with plain sqlite3: id -> (event, kind, record id)."""
        path = self.folder / ".signing.webhooks" / "inbox.sqlite"
        with sqlite3.connect(path) as db:
            rows = db.execute(
                "select delivery_id, event, record_kind, record_id from deliveries"
            ).fetchall()
        return {row[0]: tuple(row[1:]) for row in rows}

    def refusals(self, reason: str) -> int:
        """The inbox's count of refusals for `reason`, read with plain sqlite3 (cheap to poll)."""
        path = self.folder / ".signing.webhooks" / "inbox.sqlite"
        with sqlite3.connect(path) as db:
            row = db.execute(
                "select coalesce(sum(count), 0) from counts where outcome = 'rejected' "
                "and reason = ?",
                (reason,),
            ).fetchone()
        return int(row[0])

    def counts(self) -> dict[str, Any]:
        status = inbox_status(self.folder, self.warehouse, self.env)
        return dict(status.get("default", {}))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("receiver")
    port = free_port()
    options = ("--port", str(port), "--no-loads", "--max-body-bytes", "4096")
    receiver = subscribed_receiver(folder, WORKSPACE_ID, SECRET, *options)
    [line] = receiver.start()
    url = f"http://127.0.0.1:{port}/default"
    assert line == f"workspace default: {url}"
    yield Served(folder, receiver, url)
    assert receiver.stop() == 128 + signal.SIGTERM


def shipment_sent(shipment_id: str = "shp_1", workspace_id: str = WORKSPACE_ID) -> dict[str, Any]:
    return {
        "event": "shipment.sent",
        "workspace_id": workspace_id,
        "occurred_at": "2026-01-02T03:04:05.000Z",
        "shipment": {"id": shipment_id, "status": "sent"},
        "recipient": {"id": "rcp_1", "email": "ada@example.com"},
    }


def test_a_verified_delivery_is_on_disk_before_its_answer(served: Served) -> None:
    answer = delivery(served.url, SECRET, shipment_sent("shp_kept"), delivery_id="dlv_kept")
    assert answer.status_code == 200, answer.text
    assert served.kept()["dlv_kept"] == ("shipment.sent", "shipments", "shp_kept")
    path = served.folder / ".signing.webhooks" / "inbox.sqlite"
    assert b"ada@example.com" not in path.read_bytes()  # ids only, never the body


def test_a_delivery_id_accepted_before_is_answered_200_and_kept_once(served: Served) -> None:
    before = served.counts()
    for _ in range(3):
        answer = delivery(served.url, SECRET, shipment_sent("shp_twice"), delivery_id="dlv_twice")
        assert answer.status_code == 200
    after = served.counts()
    assert list(served.kept()).count("dlv_twice") == 1
    assert after["accepted"] - before["accepted"] == 1
    assert after["duplicated"] - before["duplicated"] == 2


def test_a_signed_delivery_replayed_under_another_id_is_kept_once(served: Served) -> None:
    """The delivery id is not signed: whoever captured a delivery could send it again under
    new ids within the timestamp's tolerance. What the service signed is kept once."""
    sent_at = int(time.time())
    payload = shipment_sent("shp_replayed")
    before = served.counts()
    for replay in range(3):
        answer = delivery(
            served.url, SECRET, payload, delivery_id=f"dlv_replay_{replay}", timestamp=sent_at
        )
        assert answer.status_code == 200, answer.text
    kept = [d for d in served.kept() if d.startswith("dlv_replay_")]
    assert kept == ["dlv_replay_0"]
    after = served.counts()
    assert after["accepted"] - before["accepted"] == 1
    assert after["duplicated"] - before["duplicated"] == 2
    # The same event signed anew (another second) is another delivery: kept.
    again = delivery(
        served.url, SECRET, payload, delivery_id="dlv_replay_new", timestamp=sent_at - 1
    )
    assert again.status_code == 200, again.text
    assert "dlv_replay_new" in served.kept()


def _body_changed(payload: dict[str, Any]) -> dict[str, Any]:
    return {"body": orjson.dumps({**payload, "tampered": True})}


def _signed_as(payload: dict[str, Any], secret: str = SECRET, **change: Any) -> dict[str, Any]:
    """Send `change` applied to the payload, correctly signed with `secret`."""
    return {"payload": {**payload, **change}, "secret": secret}


def refusals(now: int) -> dict[str, tuple[int, str, dict[str, Any]]]:
    """Each refused case: its status, its reason and how its delivery is made, with times
    counted from `now`, taken as the test sends it (a time taken at import would be minutes
    old by then, and "ten minutes ahead" no longer ahead by more than the receiver allows)."""
    return {
        "wrong secret": (401, "bad_signature", {"secret": "whsec_forged"}),
        "body changed after signing": (401, "bad_signature", _body_changed(shipment_sent())),
        "no signature": (401, "no_signature", {"headers": {"X-Service-Signature": ""}}),
        "another timestamp than signed": (
            401,
            "bad_signature",
            {"headers": {"X-Service-Timestamp": str(now + 1)}},
        ),
        "ten minutes old": (400, "stale", {"timestamp": now - 600}),
        "ten minutes ahead": (400, "stale", {"timestamp": now + 600}),
        "another workspace": (
            400,
            "other_workspace",
            _signed_as(shipment_sent(), workspace_id="ws_x"),
        ),
        "no shipment id": (400, "malformed", _signed_as(shipment_sent(), shipment={"status": "x"})),
        "a delivery id with a space": (400, "bad_delivery_id", {"delivery_id": "dlv 1"}),
        "too large": (413, "too_large", _signed_as(shipment_sent(), padding="x" * 5000)),
    }


@pytest.mark.parametrize("case", list(refusals(0)))
def test_a_delivery_that_does_not_verify_is_refused_counted_and_not_kept(
    served: Served, case: str
) -> None:
    status, reason, how = refusals(int(time.time()))[case]
    delivery_id = how.get("delivery_id", f"dlv_refused_{abs(hash(case))}")
    before = served.counts()
    answer = delivery(
        served.url,
        how.get("secret", SECRET),
        how.get("payload", shipment_sent()),
        delivery_id=delivery_id,
        timestamp=how.get("timestamp"),
        body=how.get("body"),
        headers=how.get("headers"),
    )
    assert answer.status_code == status, answer.text
    assert answer.json() == {"error": reason}
    assert delivery_id not in served.kept()
    # Refusals are counted in memory and written within a few seconds (no disk sync each).
    earlier = before.get("rejected", {}).get(reason, 0)
    wait_until(lambda: served.refusals(reason) > earlier, 60, f"the refusal for {reason} counted")
    after = served.counts()
    assert after["rejected"].get(reason, 0) - before.get("rejected", {}).get(reason, 0) == 1
    assert after["accepted"] == before["accepted"]


def test_a_timestamp_that_is_no_number_is_refused_even_when_signed(served: Served) -> None:
    payload = orjson.dumps(shipment_sent())
    from sandbox import signature

    answer = httpx.post(
        served.url,
        content=payload,
        headers={
            "X-Service-Delivery": "dlv_odd_time",
            "X-Service-Timestamp": "yesterday",
            "X-Service-Signature": signature(SECRET, "yesterday", payload),
        },
    )
    assert (answer.status_code, answer.json()) == (400, {"error": "bad_timestamp"})


def test_a_body_past_the_bound_is_refused_without_a_length_too(served: Served) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield b"x" * 1000

    answer = httpx.post(served.url, content=chunks(), headers={"X-Service-Delivery": "dlv_big"})
    assert answer.status_code == 413


def test_paths_and_methods_it_does_not_serve(served: Served) -> None:
    other = served.url.rsplit("/", 1)[0] + "/nobody"
    assert delivery(other, SECRET, shipment_sent(), delivery_id="dlv_x").status_code == 404
    assert httpx.get(served.url).status_code == 405


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Service-Signature": b"sha256=" + b"zz" * 40},
        {"X-Service-Signature": "sha256=é".encode()},
        {"X-Service-Timestamp": b"1" * 5000},
        {"X-Service-Delivery": b"x" * 5000},
        {"X-Service-Delivery": "dlv_é".encode()},
        {"Content-Type": b"text/html"},
    ],
)
def test_hostile_headers_never_earn_a_5xx(served: Served, headers: dict[str, str | bytes]) -> None:
    answer = delivery(
        served.url, SECRET, shipment_sent(), delivery_id="dlv_hostile", headers=headers
    )
    assert answer.status_code < 500


def test_a_delivery_id_with_control_characters_is_logged_escaped_on_one_line(
    served: Served,
) -> None:
    # Latin-1 bytes reach the app as they are: 0x85 is NEL (a line break to some readers),
    # 0x9b is CSI (an escape sequence to some terminals).
    forged = b"dlv_\x9b31m\x85FORGED ERROR"
    answer = delivery(
        served.url,
        "whsec_forged",
        shipment_sent(),
        delivery_id="x",
        headers={"X-Service-Delivery": forged},
    )
    assert answer.status_code == 401
    log = served.receiver.log()
    assert "dlv_\\x9b31m\\x85FORGED ERROR" in log
    assert "\x9b" not in log
    assert "\x85" not in log
