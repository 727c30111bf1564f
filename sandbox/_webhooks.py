"""Webhooks: deliveries made for real over HTTP, their signature, faults, and acceptable targets.

As the reference's Events part describes: each matching event is POSTed to every active
subscription with the four `X-Service-*` headers and an HMAC-SHA256 signature over
`<timestamp>.<raw body>`. A time-out, a network failure, HTTP 5xx, 408 or 429 is retried up to
5 times with a doubling delay and the same delivery id; 410 Gone deactivates the subscription.
`X-Service-Timestamp` is real (wall) time, as the service's, whatever the sandbox clock says.

Faults a receiver must survive, per workspace (`SandboxConfig.webhook_*`, 0 by default): drop,
duplicate, tamper, stale timestamp, a fixed delay and a random hold that reorders. Each delivery's
faults and id are drawn, in event order, from a stream seeded by its workspace; what the sender
did is kept per delivery (`WebhookDispatcher.deliveries`) for tests to compare.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import random
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
import orjson

from ._model import JSON, Webhook, iso
from ._store import StepEvent, Store

MAX_RETRIES = 5
RETRYABLE_STATUS = frozenset({408, 429})
# How old a stale delivery's timestamp is: twice the 5 minutes receivers commonly allow.
STALE_AGE_S = 600
# Deliveries whose record is kept per workspace; older ones are forgotten.
KEPT_DELIVERIES = 10_000
FORGED_SECRET = "whsec_forged"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

# An absolute http(s) URI as RFC 3986 spells it: only its characters, `[]` only around an IP
# literal, percent signs only in escapes. (`urlsplit` alone accepts spaces and drops tabs.)
_CHARS = r"A-Za-z0-9\-._~!$&'()*+,;="
_ESCAPE = r"%[0-9A-Fa-f]{2}"
_URI = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*://"
    rf"(?:(?:[{_CHARS}:]|{_ESCAPE})*@)?"
    rf"(?:\[[0-9A-Fa-f:.]+\]|(?:[{_CHARS}]|{_ESCAPE})*)(?::[0-9]*)?"
    rf"(?:/(?:[{_CHARS}:@/]|{_ESCAPE})*)?"
    rf"(?:\?(?:[{_CHARS}:@/?]|{_ESCAPE})*)?"
    rf"(?:#(?:[{_CHARS}:@/?]|{_ESCAPE})*)?"
)


def acceptable_target(url: str) -> bool:
    """Whether a subscription may deliver to `url`: HTTPS, or plain HTTP to this machine."""
    if not _URI.fullmatch(url):
        return False
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        return False
    if not parts.hostname:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOCAL_HOSTS)


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The `X-Service-Signature` value for one delivery."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


@dataclass(slots=True)
class Attempt:
    """One POST of a delivery and what came of it."""

    sent_at: float  # wall time, epoch seconds
    timestamp: str  # the X-Service-Timestamp it carried
    status: int | None  # the receiver's answer; None for a time-out or network error
    outcome: str  # the status as text, "timeout" or "network error: ..."
    answer_lost: bool = False  # a 2xx the sender acted as if it never got: a duplicate follows

    def to_json(self) -> JSON:
        return {
            "sent_at": _wall_iso(self.sent_at),
            "timestamp": self.timestamp,
            "status": self.status,
            "outcome": self.outcome,
            "answer_lost": self.answer_lost,
        }


@dataclass(slots=True)
class Delivery:
    """One event for one subscription: the faults drawn for it and every attempt the sender
    made. `state`: waiting (for its first attempt or a retry), sending, delivered, failed (a
    final refusal or retries used up), dropped (never sent), deactivated (410, or the
    subscription was inactive), unsubscribed (deleted meanwhile)."""

    delivery_id: str
    webhook_id: str
    event: str
    target_url: str
    occurred_at: int  # the event's sandbox time
    held_s: float  # wait before the first attempt: webhook_delay_s plus the reorder hold
    dropped: bool
    duplicate: bool  # planned: its first 2xx answer is "lost", so it is sent once more
    tampered: str | None  # "body" (changed after signing), "signature" (a forged one) or None
    stale: bool  # its timestamp is STALE_AGE_S old, and signed so
    state: str = "waiting"
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def duplicated(self) -> bool:
        """Whether the receiver was sent it again after it had answered 2xx."""
        return any(attempt.answer_lost for attempt in self.attempts)

    def to_json(self) -> JSON:
        return {
            "delivery_id": self.delivery_id,
            "webhook_id": self.webhook_id,
            "event": self.event,
            "target_url": self.target_url,
            "occurred_at": iso(self.occurred_at),
            "state": self.state,
            "held_s": round(self.held_s, 6),
            "dropped": self.dropped,
            "duplicated": self.duplicated,
            "tampered": self.tampered,
            "stale": self.stale,
            "retries": max(0, len(self.attempts) - 1),
            "attempts": [attempt.to_json() for attempt in self.attempts],
        }


def delivery_counts(deliveries: Sequence[Delivery]) -> dict[str, int]:
    """How many deliveries had each fault, were retried, and in which state they are."""
    counts = Counter(d.state for d in deliveries)
    return {
        "deliveries": len(deliveries),
        "attempts": sum(len(d.attempts) for d in deliveries),
        "dropped": sum(d.dropped for d in deliveries),
        "duplicated": sum(d.duplicated for d in deliveries),
        "tampered": sum(d.tampered is not None for d in deliveries),
        "stale": sum(d.stale for d in deliveries),
        "retried": sum(len(d.attempts) > 1 for d in deliveries),
        **{state: counts[state] for state in STATES},
    }


STATES = ("waiting", "sending", "delivered", "failed", "dropped", "deactivated", "unsubscribed")


class WebhookDispatcher:
    """Turns the events of every workspace into deliveries on the server's event loop."""

    def __init__(self, stores: Sequence[Store], *, concurrency: int = 16) -> None:
        # Set while the server runs: a sandbox can be stopped and started again, on a new loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self.attempts: Counter[str] = Counter()  # POSTs made by workspace id, retries included
        # What the sender did, by workspace id; events arrive on any thread, hence the lock.
        self._records_lock = threading.Lock()
        self._deliveries: dict[str, deque[Delivery]] = {}
        # Delivery ids and faults, drawn in event order from a stream per workspace.
        self._rngs: dict[str, random.Random] = {}
        for store in stores:
            store.listeners.append(self.on_event)
            self._deliveries[store.workspace.id] = deque(maxlen=KEPT_DELIVERIES)
            self._rngs[store.workspace.id] = random.Random(f"{store.workspace.id}:webhooks")

    async def start(self) -> None:
        # A semaphore belongs to the loop it first waited on: each start makes its own.
        self._slots = asyncio.Semaphore(self._concurrency)
        self._client = httpx.AsyncClient()  # each POST sets the time-out its workspace has now
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        """The sender is down until started again: events meanwhile are not delivered."""
        self._loop = None
        for task in list(self._tasks):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def deliveries(self, store: Store) -> list[Delivery]:
        """The workspace's deliveries, oldest first (the last KEPT_DELIVERIES)."""
        with self._records_lock:
            return list(self._deliveries[store.workspace.id])

    def on_event(self, store: Store, event: StepEvent) -> None:
        """Called under the store lock from whatever thread changed the data."""
        loop = self._loop
        if loop is None:
            return
        hooks = [h for h in store.webhooks.values() if h.is_active and h.event == event.event]
        if not hooks:
            return
        payload = {
            "event": event.event,
            "workspace_id": store.workspace.id,
            "occurred_at": iso(event.at_ms),
            "shipment": event.shipment.to_json() if event.shipment else None,
            "recipient": event.recipient.to_json() if event.recipient else None,
        }
        if event.contact is not None:
            payload["contact"] = event.contact.to_json()
        body = orjson.dumps(payload)
        for hook in hooks:
            delivery = self._plan(store, hook.id, hook.target_url, event)
            with self._records_lock:
                self._deliveries[store.workspace.id].append(delivery)
            if not delivery.dropped:
                with contextlib.suppress(RuntimeError):  # the loop closed since: the server stopped
                    loop.call_soon_threadsafe(self._spawn, store, delivery, body)

    def _plan(self, store: Store, hook_id: str, target_url: str, event: StepEvent) -> Delivery:
        """The delivery's id and faults: the same number of draws whatever the rates, so that
        changing one rate leaves the others' choices alone."""
        config, rng = store.config, self._rngs[store.workspace.id]
        delivery_id = f"dlv_{rng.getrandbits(80):020x}"
        drop, duplicate, tamper, how, stale, hold = (rng.random() for _ in range(6))
        dropped = drop < config.webhook_drop_rate
        return Delivery(
            delivery_id=delivery_id,
            webhook_id=hook_id,
            event=event.event,
            target_url=target_url,
            occurred_at=event.at_ms,
            held_s=config.webhook_delay_s + hold * config.webhook_reorder_s,
            dropped=dropped,
            duplicate=duplicate < config.webhook_duplicate_rate,
            tampered=(
                ("body" if how < 0.5 else "signature")
                if tamper < config.webhook_tamper_rate
                else None
            ),
            stale=stale < config.webhook_stale_rate,
            state="dropped" if dropped else "waiting",
        )

    def _spawn(self, store: Store, delivery: Delivery, body: bytes) -> None:
        task = asyncio.get_running_loop().create_task(self._deliver(store, delivery, body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, store: Store, delivery: Delivery, body: bytes) -> None:
        """Every attempt of one delivery, until an answer is final or the retries are used up."""
        if delivery.held_s > 0:
            await asyncio.sleep(delivery.held_s)
        delay = store.config.webhook_retry_base_s
        sent_body = _tampered(body) if delivery.tampered == "body" else body
        for number in range(1 + MAX_RETRIES):
            hook = store.webhooks.get(delivery.webhook_id)
            if hook is None or not hook.is_active:
                delivery.state = "unsubscribed" if hook is None else "deactivated"
                return
            delivery.state = "sending"
            attempt = await self._post(store, hook, delivery, body, sent_body)
            with store.lock:
                again = _settle(store, hook, delivery, attempt, last=number == MAX_RETRIES)
            if not again:
                return
            delivery.state = "waiting"
            await asyncio.sleep(delay)
            delay *= 2

    async def _post(
        self, store: Store, hook: Webhook, delivery: Delivery, body: bytes, sent_body: bytes
    ) -> Attempt:
        """One POST of the delivery, signed over `body`, carrying `sent_body`; recorded."""
        assert self._client is not None
        sent_at = time.time()
        # Real time, as the service stamps it: receivers judge freshness by their clock.
        timestamp = str(int(sent_at) - (STALE_AGE_S if delivery.stale else 0))
        headers = {
            "Content-Type": "application/json",
            "X-Service-Event": delivery.event,
            "X-Service-Delivery": delivery.delivery_id,
            "X-Service-Timestamp": timestamp,
        }
        if hook.secret:
            secret = FORGED_SECRET if delivery.tampered == "signature" else hook.secret
            headers["X-Service-Signature"] = signature(secret, timestamp, body)
        async with self._slots:
            try:
                response = await self._client.post(
                    hook.target_url,
                    content=sent_body,
                    headers=headers,
                    timeout=store.config.webhook_timeout_s,  # may change at run time
                )
                status: int | None = response.status_code
                outcome = str(status)
            except httpx.TimeoutException:
                status, outcome = None, "timeout"
            except httpx.TransportError as error:
                status, outcome = None, f"network error: {type(error).__name__}"
            except asyncio.CancelledError:
                if self._loop is None:  # the sender is stopping: cancelled by `stop`
                    raise
                # A cancellation the sender never asked for, let out of the HTTP client's own
                # time-out. A delivery was seen once "sending" for good with no attempt
                # recorded (Python 3.11.2, a busy machine, the receiver killed and started
                # again): something other than httpx's errors had ended its task. Now the
                # attempt fails and the delivery goes on with its retries.
                status, outcome = None, "network error: CancelledError"
            except Exception as error:  # any other failure is the one attempt's, as above
                status, outcome = None, f"network error: {type(error).__name__}"
        attempt = Attempt(sent_at, timestamp, status, outcome)
        delivery.attempts.append(attempt)
        self.attempts[store.workspace.id] += 1
        return attempt


def _settle(
    store: Store, hook: Webhook, delivery: Delivery, attempt: Attempt, *, last: bool
) -> bool:
    """Count an attempt's answer on the subscription, and whether to send again; an answer
    that ends the delivery sets its state. Called under the store lock."""
    status = attempt.status
    if status is not None and 200 <= status < 300:
        if delivery.duplicate and not delivery.duplicated and not last:
            # The answer is "lost": the sender knows no better than to send again.
            attempt.answer_lost = True
            hook.failure_count += 1
            hook.last_error = "answer lost"
            return True
        hook.delivery_count += 1
        hook.last_delivered_at = store.clock.now_ms()
        delivery.state = "delivered"
        return False
    hook.failure_count += 1
    hook.last_error = attempt.outcome if status is None else f"HTTP {status}"
    if status == 410:
        hook.is_active = False
        delivery.state = "deactivated"
        return False
    retryable = status is None or status >= 500 or status in RETRYABLE_STATUS
    if not retryable or last:
        delivery.state = "failed"
        return False
    return True


def _tampered(body: bytes) -> bytes:
    """The body changed in transit, after it was signed."""
    payload = orjson.loads(body)
    payload["tampered"] = True
    return orjson.dumps(payload)


def _wall_iso(seconds: float) -> str | None:
    return iso(int(seconds * 1000))
