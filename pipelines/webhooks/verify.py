"""One delivery judged before anything of it is kept: its signature over the raw bytes, in
constant time, against every secret the workspace's subscriptions may sign with (several while
a secret rotates); its timestamp within the tolerance window; its id; and a payload that names
the workspace it was sent to. What it names (a shipment or a contact) is all the inbox keeps.

The signature is `sha256=<hex>`, an HMAC-SHA256 over `<X-Service-Timestamp>.<raw body>`. The
delivery id header is not signed: a replayed delivery under a new id within the window only
makes a drain read one record again.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from pipelines.webhooks.inbox import Delivery
from pipelines.webhooks.secrets_file import stamp

DEFAULT_TOLERANCE_SECONDS = 300.0  # how far a delivery's timestamp may be from this clock
DEFAULT_MAX_BODY_BYTES = 1_048_576  # a shipment with 200 recipients is about 100 kB
SIGNATURE_SCHEME = "sha256="
_TIMESTAMP = re.compile(r"\d{1,12}")
# Ids and names the inbox keeps: printable, no spaces, of a sensible length.
_TOKEN = re.compile(r"[\x21-\x7e]{1,200}")
# The events whose payload names a record, and where: the kind of record and its field.
RECORD_OF_EVENT = {"shipment.": ("shipments", "shipment"), "contact.": ("contacts", "contact")}


# Why a delivery is refused, and the status it is answered with (never 5xx): 401 when nothing
# verifies it, 400 when it verified but cannot be kept, 413 when it is too large to read.
STATUS_OF_REASON = {
    "no_subscription": 401,  # no secret to verify with: the workspace is not subscribed
    "no_signature": 401,
    "bad_signature": 401,
    "bad_timestamp": 400,
    "stale": 400,  # outside the tolerance window
    "bad_delivery_id": 400,
    "malformed": 400,
    "other_workspace": 400,  # signed, but for another workspace than this path's
    "too_large": 413,
}


class Refusal(Exception):
    """A delivery refused: `reason` (a key of `STATUS_OF_REASON`) and its `status`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = STATUS_OF_REASON[reason]


@dataclass(frozen=True)
class Expected:
    """What a workspace's deliveries must show: a secret it signs with, its id, fresh time."""

    workspace: str  # the configured name (the receiver's path)
    workspace_id: str
    secrets: Sequence[str]
    now: float  # this clock, epoch seconds
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS


def judge(headers: Mapping[str, str], body: bytes, expected: Expected) -> Delivery:
    """The delivery to keep, or the `Refusal` that says why not.

    `headers` are the request's (names in any case, as Starlette's are)."""
    if not expected.secrets:
        raise Refusal("no_subscription")
    timestamp = headers.get("x-service-timestamp", "")
    check_signature(timestamp, body, headers.get("x-service-signature", ""), expected.secrets)
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Refusal("bad_timestamp")
    if abs(expected.now - int(timestamp)) > expected.tolerance_seconds:
        raise Refusal("stale")
    delivery_id = headers.get("x-service-delivery", "")
    if not _TOKEN.fullmatch(delivery_id):
        raise Refusal("bad_delivery_id")
    signed = hashlib.sha256(timestamp.encode() + b"." + body).hexdigest()
    return _delivery(expected, delivery_id, timestamp, _payload(body), signed)


def check_signature(timestamp: str, body: bytes, header: str, secrets: Sequence[str]) -> None:
    """Raise unless one of the header's `sha256=` signatures is the HMAC of one secret; every
    comparison runs (in constant time) whatever the earlier ones found."""
    given = [
        part.strip()[len(SIGNATURE_SCHEME) :]
        for part in header.split(",")
        if part.strip().startswith(SIGNATURE_SCHEME)
    ]
    if not given:
        raise Refusal("no_signature")
    signed = timestamp.encode() + b"." + body
    matched = False
    for secret in secrets:
        digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        for candidate in given:
            matched |= hmac.compare_digest(digest.encode(), candidate.lower().encode())
    if not matched:
        raise Refusal("bad_signature")


def _payload(body: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Refusal("malformed") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("event"), str):
        raise Refusal("malformed")
    return payload


def _delivery(
    expected: Expected, delivery_id: str, timestamp: str, payload: dict[str, Any], signed: str
) -> Delivery:
    """What the inbox keeps of a verified payload: who, what, which record, when."""
    if _id(payload.get("workspace_id")) != expected.workspace_id:
        raise Refusal("other_workspace")
    event = payload["event"]
    if not _TOKEN.fullmatch(event):
        raise Refusal("malformed")
    kind, record_id = None, None
    for prefix, (table, name) in RECORD_OF_EVENT.items():
        if event.startswith(prefix):
            record = payload.get(name)
            record_id = _id(record.get("id")) if isinstance(record, dict) else None
            if record_id is None:
                raise Refusal("malformed")
            kind = table
    recipient = payload.get("recipient")
    return Delivery(
        workspace=expected.workspace,
        delivery_id=delivery_id,
        workspace_id=expected.workspace_id,
        event=event,
        record_kind=kind,
        record_id=record_id,
        recipient_id=_id(recipient.get("id")) if isinstance(recipient, dict) else None,
        occurred_at=_time(payload.get("occurred_at")),
        sent_at=stamp(datetime.fromtimestamp(int(timestamp), UTC)),
        signed=signed,
    )


def _id(value: Any) -> str | None:
    """An id as text: a printable string without spaces, or an integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) and _TOKEN.fullmatch(value) else None


def _time(value: Any) -> str | None:
    """An ISO time from the payload, in the inbox's form; None when it is not one."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return stamp(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    except (ValueError, OverflowError):  # not a time, or one whose UTC is before year 1
        return None
