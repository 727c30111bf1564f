"""Any delivery under a valid signature is judged: kept, or refused with a 4xx reason; never an
exception of another kind, which the receiver would answer with a 5xx. Inputs are drawn by
hypothesis (payload shapes and values, delivery ids, times at the edges of the calendar)."""

from __future__ import annotations

import hashlib
import hmac
import time

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.webhooks.inbox import Delivery
from pipelines.webhooks.verify import STATUS_OF_REASON, Expected, Refusal, judge

SECRET = "whsec_fuzz"
WORKSPACE_ID = "ws_1"

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=60),
    st.sampled_from(
        [
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59-14:00",
            "2026-11-25T10:00:00Z",
            "2026-02-30T00:00:00Z",
            "ws_1",
            "",
        ]
    ),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
_payloads = st.fixed_dictionaries(
    {},
    optional={
        "event": st.one_of(st.sampled_from(["shipment.sent", "contact.updated", "x"]), _values),
        "workspace_id": st.one_of(st.just(WORKSPACE_ID), _values),
        "shipment": st.one_of(st.fixed_dictionaries({"id": _values}), _values),
        "contact": st.one_of(st.fixed_dictionaries({"id": _values}), _values),
        "recipient": st.one_of(st.fixed_dictionaries({"id": _values}), _values),
        "occurred_at": _values,
    },
)


def _judged(headers: dict[str, str], body: bytes, expected: Expected) -> Delivery | Refusal:
    """The delivery kept, or the refusal; any other exception propagates (and fails the test)."""
    try:
        return judge(headers, body, expected)
    except Refusal as refusal:
        return refusal


def _signed(body: bytes, timestamp: str) -> str:
    digest = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


@settings(max_examples=400, deadline=None)
@given(
    payload=_payloads,
    delivery_id=st.one_of(st.text(max_size=30), st.just("dlv_1")),
    skew=st.integers(min_value=-(10**6), max_value=10**6),
)
def test_a_signed_delivery_is_kept_or_refused_with_a_4xx_whatever_it_holds(
    payload: dict[str, object], delivery_id: str, skew: int
) -> None:
    now = time.time()
    timestamp = str(max(0, int(now) + skew))
    body = orjson.dumps(payload)
    headers = {
        "x-service-timestamp": timestamp,
        "x-service-signature": _signed(body, timestamp),
        "x-service-delivery": delivery_id,
    }
    expected = Expected("w", WORKSPACE_ID, [SECRET], now)
    judged = _judged(headers, body, expected)
    if isinstance(judged, Refusal):
        assert 400 <= STATUS_OF_REASON[judged.reason] < 500
    else:
        assert judged.workspace_id == WORKSPACE_ID


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=300), timestamp=st.text(max_size=14))
def test_any_signed_body_and_timestamp_text_is_kept_or_refused(body: bytes, timestamp: str) -> None:
    headers = {
        "x-service-timestamp": timestamp,
        "x-service-signature": _signed(body, timestamp),
        "x-service-delivery": "dlv_1",
    }
    judged = _judged(headers, body, Expected("w", WORKSPACE_ID, [SECRET], time.time()))
    assert isinstance(judged, Delivery) or 400 <= judged.status < 500


def test_an_event_dated_before_year_one_in_utc_is_kept_without_its_time() -> None:
    """`0001-01-01T00:00:00+14:00` is a valid ISO time whose UTC falls before year 1."""
    now = time.time()
    timestamp = str(int(now))
    body = orjson.dumps(
        {
            "event": "shipment.sent",
            "workspace_id": WORKSPACE_ID,
            "shipment": {"id": "shp_1"},
            "occurred_at": "0001-01-01T00:00:00+14:00",
        }
    )
    headers = {
        "x-service-timestamp": timestamp,
        "x-service-signature": _signed(body, timestamp),
        "x-service-delivery": "dlv_1",
    }
    kept = judge(headers, body, Expected("w", WORKSPACE_ID, [SECRET], now))
    assert kept.record_id == "shp_1"
    assert kept.occurred_at is None
