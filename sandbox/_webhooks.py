"""Webhooks: deliveries made for real over HTTP, their signature, and acceptable targets.

As the reference's Events part describes: each matching event is POSTed to every active
subscription with the four `X-Service-*` headers and an HMAC-SHA256 signature over
`<timestamp>.<raw body>`. A time-out, a network failure, HTTP 5xx, 408 or 429 is retried up to
5 times with a doubling delay and the same delivery id; 410 Gone deactivates the subscription.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
from collections import Counter
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx
import orjson

from ._model import iso
from ._store import StepEvent, Store

MAX_RETRIES = 5
RETRYABLE_STATUS = frozenset({408, 429})
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


class WebhookDispatcher:
    """Turns the events of every workspace into deliveries on the server's event loop."""

    def __init__(self, stores: Sequence[Store], *, concurrency: int = 16) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self.attempts: Counter[str] = Counter()  # POSTs made by workspace id, retries included
        for store in stores:
            store.listeners.append(self.on_event)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._client = httpx.AsyncClient()  # each POST sets the time-out its workspace has now

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()

    def on_event(self, store: Store, event: StepEvent) -> None:
        """Called under the store lock from whatever thread changed the data."""
        if self._loop is None:
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
            delivery_id = f"dlv_{secrets.token_hex(10)}"
            self._loop.call_soon_threadsafe(
                self._spawn, store, hook.id, event.event, body, delivery_id
            )

    def _spawn(self, store: Store, hook_id: str, event: str, body: bytes, delivery_id: str) -> None:
        task = asyncio.get_running_loop().create_task(
            self._deliver(store, hook_id, event, body, delivery_id)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(
        self, store: Store, hook_id: str, event: str, body: bytes, delivery_id: str
    ) -> None:
        assert self._client is not None
        delay = store.config.webhook_retry_base_s
        for number in range(1 + MAX_RETRIES):
            hook = store.webhooks.get(hook_id)
            if hook is None or not hook.is_active:
                return
            timestamp = str(store.clock.now_ms() // 1000)
            headers = {
                "Content-Type": "application/json",
                "X-Service-Event": event,
                "X-Service-Delivery": delivery_id,
                "X-Service-Timestamp": timestamp,
            }
            if hook.secret:
                headers["X-Service-Signature"] = signature(hook.secret, timestamp, body)
            retry = False
            async with self._slots:
                try:
                    response = await self._client.post(
                        hook.target_url,
                        content=body,
                        headers=headers,
                        timeout=store.config.webhook_timeout_s,  # may change at run time
                    )
                    status: int | None = response.status_code
                    outcome = str(status)
                except httpx.TimeoutException:
                    status, outcome = None, "timeout"
                except httpx.TransportError as error:
                    status, outcome = None, f"network error: {type(error).__name__}"
            self.attempts[store.workspace.id] += 1
            with store.lock:
                if status is not None and 200 <= status < 300:
                    hook.delivery_count += 1
                    hook.last_delivered_at = store.clock.now_ms()
                    return
                hook.failure_count += 1
                hook.last_error = outcome if status is None else f"HTTP {status}"
                if status == 410:
                    hook.is_active = False
                    return
                retry = status is None or status >= 500 or status in RETRYABLE_STATUS
            if not retry or number == MAX_RETRIES:
                return
            await asyncio.sleep(delay)
            delay *= 2
