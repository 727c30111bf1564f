"""The receiver's bounds for the open internet (`pipelines/webhooks/guard.py`), tried on
`signing-etl webhooks serve` run as a user runs it, with a descriptor limit of 1,024: idle and
half-sent connections are closed, the oldest idle ones give way when connections pile up, a
header block past its cap is cut off, and a flood of bad deliveries is counted in full but
logged in a few lines."""

from __future__ import annotations

import select
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.waiting import wait_until
from tests.support.webhooks import (
    ServedReceiver,
    delivery,
    free_port,
    inbox_status,
    subscribed_receiver,
)

SECRET = "whsec_limits_test_secret"
WORKSPACE_ID = "ws_limits_test"
DESCRIPTORS = 1_024
# A safety bound for reads that must end because the receiver closes the connection; the
# receiver is told to allow one second for a request.
CLOSED_WITHIN_S = 60


class Served:
    def __init__(self, folder: Path, receiver: ServedReceiver, port: int) -> None:
        self.folder = folder
        self.receiver = receiver
        self.port = port
        self.url = f"http://127.0.0.1:{port}/default"

    def rejected(self, reason: str) -> int:
        found = inbox_status(self.folder, self.folder / "signing.duckdb", self.receiver.env)
        return int(found.get("default", {}).get("rejected", {}).get(reason, 0))

    def accepts(self, delivery_id: str) -> None:
        # Its own shipment: the same signed content under another id is a replay (a duplicate).
        answer = delivery(self.url, SECRET, _sent(f"shp_{delivery_id}"), delivery_id=delivery_id)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"accepted": True, "duplicate": False}


def _sent(shipment_id: str = "shp_limits") -> dict[str, object]:
    return {
        "event": "shipment.sent",
        "workspace_id": WORKSPACE_ID,
        "occurred_at": "2026-03-01T10:00:00.000Z",
        "shipment": {"id": shipment_id, "status": "sent"},
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("receiver_limits")
    port = free_port()
    options = ("--port", str(port), "--no-loads", "--request-seconds", "1")
    receiver = subscribed_receiver(
        folder, WORKSPACE_ID, SECRET, *options, descriptor_limit=DESCRIPTORS
    )
    receiver.start()
    yield Served(folder, receiver, port)
    assert receiver.stop() == 128 + signal.SIGTERM


def _closed_by_the_receiver(sock: socket.socket) -> bool:
    """Whether the receiver closed `sock` (it reads as ended, or was reset) within the bound."""
    sock.settimeout(CLOSED_WITHIN_S)
    try:
        while sock.recv(65_536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_a_connection_that_never_sends_a_request_is_closed(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port)) as idle:
        assert _closed_by_the_receiver(idle)


def test_a_request_sent_in_part_is_closed(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port)) as slow:
        slow.sendall(b"POST /default HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Service-Delivery: dlv")
        assert _closed_by_the_receiver(slow)
    with socket.create_connection(("127.0.0.1", served.port)) as slow_body:
        slow_body.sendall(b"POST /default HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert _closed_by_the_receiver(slow_body)
    served.accepts("dlv_after_slow_ones")


def test_idle_connections_past_the_descriptor_limit_give_way_to_a_delivery(
    served: Served,
) -> None:
    idle: list[socket.socket] = []
    try:
        for _ in range(1_500):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", served.port))
            idle.append(sock)
        # Once the receiver holds as many as its descriptor limit allows (less a margin), it
        # makes room by closing the oldest idle ones; before, it held them all and a delivery
        # behind them got no answer.
        readable, _, _ = select.select(idle[:500], [], [], CLOSED_WITHIN_S)
        assert readable, "no idle connection was closed by the receiver"
        served.accepts("dlv_past_the_idle_ones")
    finally:
        for sock in idle:
            sock.close()
    assert "Too many open files" not in served.receiver.log()
    served.accepts("dlv_after_the_idle_ones")


def _sent_before_cut_off(sock: socket.socket, whole: int) -> int:
    """Bytes of a header block of `whole` bytes sent before the receiver stopped reading (reset
    or broken pipe); `whole` when it read it all."""
    sock.sendall(b"POST /default HTTP/1.1\r\nHost: x\r\nX-Big: ")
    sent, chunk = 0, b"a" * 65_536
    try:
        while sent < whole:
            sock.sendall(chunk)
            sent += len(chunk)
        sock.sendall(b"\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        return sent
    return sent


def test_a_header_block_past_its_cap_is_cut_off(served: Served) -> None:
    whole = 20 * 1024 * 1024
    with socket.create_connection(("127.0.0.1", served.port)) as big:
        assert _sent_before_cut_off(big, whole) < whole
    served.accepts("dlv_after_the_big_header")


def test_too_many_headers_are_refused(served: Served) -> None:
    many: dict[str, str | bytes] = {f"X-Padding-{n}": "x" for n in range(100)}
    answer = delivery(served.url, SECRET, _sent(), delivery_id="dlv_many", headers=many)
    assert answer.status_code == 431


def test_a_flood_of_bad_deliveries_is_counted_in_full_and_logged_in_a_few_lines(
    served: Served,
) -> None:
    before = served.rejected("bad_signature")
    lines_before = served.receiver.log().count("refused delivery")
    flood = 300
    with httpx.Client(timeout=30) as client:
        for n in range(flood):
            answer = client.post(
                served.url,
                content=b"{}",
                headers={
                    "X-Service-Delivery": f"dlv_flood_{n}",
                    "X-Service-Timestamp": "1",
                    "X-Service-Signature": "sha256=" + "0" * 64,
                },
            )
            assert answer.status_code == 401
    wait_until(
        lambda: served.rejected("bad_signature") == before + flood,
        CLOSED_WITHIN_S,
        "every refusal of the flood counted in the inbox",
    )
    log = served.receiver.log()
    lines = log.count("refused delivery") - lines_before
    assert 0 < lines < flood // 2, lines
