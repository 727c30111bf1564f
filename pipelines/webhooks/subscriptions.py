"""Subscriptions managed by the tool: `webhooks subscribe`, `list` and `unsubscribe`, per
configured workspace, through the service's `GET`, `POST` and `DELETE /webhooks`.

The source's client only reads, so subscriptions have this small client of their own, with the
source's checks and words: the base URL checked before it is shown (`checked_base_url`), the
service's words as one clean line with the key blanked (`one_line`), 429s waited out as their
`Retry-After` says. A subscription's secret is saved (`secrets_file`) the moment the service
shows it, before anything else is asked.

A workspace's receiver path is `<target URL>/<workspace name>`: one public URL, behind which the
receiver serves each configured workspace at its own path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from pipelines.configuration import WorkspaceEntry
from pipelines.errors import WebhooksError
from pipelines.webhooks.secrets_file import (
    SecretsFile,
    StoredSubscription,
    WorkspaceSecrets,
    now_utc,
    stamp,
)
from sources.signing import SigningAPIError, checked_base_url
from sources.signing.answers import retry_after_seconds
from sources.signing.errors import without_secret
from sources.signing.urls import item_path

# The events whose deliveries name a record the drains load (the reference's, without
# `inquiry.answered`: inquiries are not loaded).
EVENTS = (
    "shipment.sent",
    "shipment.opened",
    "shipment.signed",
    "shipment.completed",
    "shipment.expired",
    "shipment.delivery_failed",
    "contact.created",
)
ATTEMPTS = 4  # per request, for time-outs, 5xx and 429s
LONGEST_WAIT_SECONDS = 60.0  # a longer Retry-After is a failure, said in one line


@dataclass(frozen=True)
class Change:
    """What `subscribe` or `unsubscribe` did to one subscription of one workspace."""

    workspace: str
    event: str
    target_url: str
    subscription_id: str
    action: str  # subscribed, kept, replaced (secret lost), rotated, unsubscribed


@dataclass(frozen=True)
class Listed:
    """A subscription as the service lists it, and whether this warehouse holds its secret."""

    workspace: str
    subscription: dict[str, Any]
    secret_held: bool


class _Again(Exception):
    """A failure worth another try (time-out, 5xx, 429), with the wait the service asked."""

    def __init__(self, reason: str, wait: float | None = None) -> None:
        super().__init__(reason)
        self.wait = wait


_BACKOFF = wait_exponential(multiplier=0.5, max=8)


def _wait(state: RetryCallState) -> float:
    """As long as a 429 asked, else a growing back-off."""
    failure = state.outcome.exception() if state.outcome else None
    asked = failure.wait if isinstance(failure, _Again) else None
    return asked if asked is not None else _BACKOFF(state)


class SubscriptionClient:
    """`/me` and `/webhooks` of one configured workspace, as its key may use them."""

    def __init__(self, entry: WorkspaceEntry, timeout: float = 30.0) -> None:
        try:
            checked_base_url(entry.base_url)
        except SigningAPIError as error:
            raise WebhooksError(f"workspace {entry.name}: {error}") from None
        self.entry = entry
        self._http = httpx.Client(
            base_url=entry.base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {entry.api_key}", "Accept": "application/json"},
            timeout=timeout,
        )

    def __enter__(self) -> SubscriptionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def workspace_id(self) -> str:
        body = self._request("GET", "/me")
        workspace = body.get("workspace") if isinstance(body, dict) else None
        found = workspace.get("id") if isinstance(workspace, dict) else None
        if not isinstance(found, str | int) or isinstance(found, bool) or found == "":
            raise self._error("GET /me did not answer like the signing API (no workspace)")
        return str(found)

    def listed(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The workspace's subscriptions, and the events the service supports."""
        body = self._request("GET", "/webhooks")
        hooks = body.get("data") if isinstance(body, dict) else None
        events = body.get("events") if isinstance(body, dict) else None
        if not isinstance(hooks, list) or not all(_subscription(h) for h in hooks):
            raise self._error("GET /webhooks did not answer a list of subscriptions")
        supported = [e for e in events if isinstance(e, str)] if isinstance(events, list) else []
        return hooks, supported or list(EVENTS)

    def create(self, event: str, target_url: str) -> dict[str, Any]:
        body = self._request("POST", "/webhooks", {"event": event, "target_url": target_url})
        created = body.get("data") if isinstance(body, dict) else None
        if not isinstance(created, dict) or not _subscription(created) or not created.get("secret"):
            raise self._error("POST /webhooks answered without a subscription and its secret")
        return dict(created)

    def delete(self, subscription_id: str) -> None:
        """Remove a subscription (one already gone is fine)."""
        self._request("DELETE", item_path("webhooks", subscription_id), missing_ok=True)

    def _request(
        self, method: str, path: str, body: Any = None, *, missing_ok: bool = False
    ) -> Any:
        retrying = Retrying(
            retry=retry_if_exception_type(_Again),
            stop=stop_after_attempt(ATTEMPTS),
            wait=_wait,
            reraise=True,
        )
        try:
            return retrying(self._once, method, path, body, missing_ok)
        except _Again as error:
            raise self._error(f"{method} {path}: {error}") from None

    def _once(self, method: str, path: str, body: Any, missing_ok: bool) -> Any:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as error:
            host = self._http.base_url.host
            raise _Again(f"no answer from {host} ({type(error).__name__})") from None
        status = response.status_code
        try:
            answer = response.json() if response.content else None
        except ValueError:
            answer = None
        if status < 300 or (status == 404 and missing_ok):
            return answer
        if status == 429:
            wait = retry_after_seconds(response.headers, answer)
            if wait is not None and wait > LONGEST_WAIT_SECONDS:
                raise self._error(f"{method} {path} was refused: 429, retry after {wait:,.0f} s")
            raise _Again("answered 429 every time", wait)
        if status >= 500 or status == 408:
            raise _Again(f"answered HTTP {status}")
        raise self._refused(method, path, status, answer)

    def _refused(self, method: str, path: str, status: int, answer: Any) -> WebhooksError:
        error = answer.get("error") if isinstance(answer, dict) else None
        said = error.get("message") if isinstance(error, dict) else None
        detail = f": {self._clean(said)}" if said else ""
        if status == 401:
            return self._error(f"the API key was refused (401 unauthorized{detail})")
        if status == 403:
            return self._error(
                f"the API key lacks the `write` scope that webhook subscriptions need (403 on "
                f"{method} {path}{detail}); use a key with `write` for the webhooks commands "
                "(loads need only `read`)"
            )
        return self._error(f"{method} {path} was refused (HTTP {status}{detail})")

    def _error(self, message: str) -> WebhooksError:
        return WebhooksError(f"workspace {self.entry.name}: {self._clean(message)}")

    def _clean(self, text: object) -> str:
        return without_secret(text, self.entry.api_key, 300)


def _subscription(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("id"), str) and bool(value["id"])


def target_for(target_url: str, workspace: str) -> str:
    """The URL of one workspace's path behind the receiver's public URL.

    Raises:
        WebhooksError: not an http(s) URL with a host, or one holding a user name, password,
            query or fragment (the service keeps the URL, and the warehouse loads it).
    """
    try:
        url = httpx.URL(target_url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise WebhooksError("--target-url is not a valid URL") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise WebhooksError("--target-url must be an http(s) URL with a host")
    if url.userinfo or url.query or url.fragment:
        raise WebhooksError(
            "--target-url must not hold a user name, password, query or fragment: the service "
            "keeps it and `load` copies it into raw.webhooks (deliveries are signed instead)"
        )
    return f"{str(url).rstrip('/')}/{quote(workspace, safe='')}"


def subscribe(
    entry: WorkspaceEntry,
    secrets: SecretsFile,
    target_url: str,
    events: Sequence[str] = (),
    *,
    rotate: bool = False,
) -> list[Change]:
    """Subscribe one workspace's receiver path to `events` (every one of `EVENTS` the service
    supports by default). A subscription whose secret this warehouse holds is kept (`rotate`:
    replaced by a new one with a new secret, the old secret verifying a while longer); one
    whose secret was lost is replaced."""
    target = target_for(target_url, entry.name)
    with SubscriptionClient(entry) as client:
        workspace_id = client.workspace_id()
        listed, supported = client.listed()
        wanted = _chosen(events, supported, entry.name)
        held = _held_ids(secrets, entry.name, workspace_id)
        changes = []
        for event in wanted:
            same = [h for h in listed if h.get("event") == event and h.get("target_url") == target]
            kept = [h for h in same if h["id"] in held and h.get("is_active") is True]
            if kept and not rotate:
                changes.append(Change(entry.name, event, target, kept[0]["id"], "kept"))
                continue
            created = client.create(event, target)
            _save(secrets, entry.name, workspace_id, created)
            old = {h["id"] for h in same}
            for subscription_id in sorted(old):
                client.delete(subscription_id)
            _retire(secrets, entry.name, old)
            changes.append(Change(entry.name, event, target, created["id"], _done(same, held)))
    return changes


def _done(replaced: list[dict[str, Any]], held: set[str]) -> str:
    """What creating a subscription did to those it replaced."""
    if not replaced:
        return "subscribed"
    if any(h["id"] in held and h.get("is_active") is True for h in replaced):
        return "rotated"
    if any(h["id"] in held for h in replaced):
        return "replaced (inactive)"
    return "replaced (secret lost)"


def list_subscriptions(entry: WorkspaceEntry, secrets: SecretsFile) -> list[Listed]:
    """The workspace's subscriptions at the service, each saying whether its secret is held."""
    with SubscriptionClient(entry) as client:
        workspace_id = client.workspace_id()
        listed, _ = client.listed()
    held = _held_ids(secrets, entry.name, workspace_id)
    return [Listed(entry.name, hook, hook["id"] in held) for hook in listed]


def unsubscribe(
    entry: WorkspaceEntry, secrets: SecretsFile, target_url: str | None = None
) -> list[Change]:
    """Remove the workspace's subscriptions: those at `target_url` (its receiver path or the
    URL itself; secret held or not), else every one whose secret this warehouse holds."""
    with SubscriptionClient(entry) as client:
        workspace_id = client.workspace_id()
        listed, _ = client.listed()
        if target_url is not None:
            targets = {target_url, target_for(target_url, entry.name)}
            chosen = [h for h in listed if h.get("target_url") in targets]
        else:
            held = _held_ids(secrets, entry.name, workspace_id)
            chosen = [h for h in listed if h["id"] in held]
        for hook in chosen:
            client.delete(hook["id"])
    _retire(secrets, entry.name, {h["id"] for h in chosen})
    return [
        Change(entry.name, str(h.get("event")), str(h.get("target_url")), h["id"], "unsubscribed")
        for h in chosen
    ]


def _chosen(events: Sequence[str], supported: Sequence[str], workspace: str) -> list[str]:
    if not events:
        return [event for event in EVENTS if event in supported]
    unknown = [event for event in events if event not in supported]
    if unknown:
        raise WebhooksError(
            f"workspace {workspace}: the service supports no event {', '.join(unknown)}; "
            f"it supports {', '.join(supported)}"
        )
    return list(dict.fromkeys(events))


def _held_ids(secrets: SecretsFile, name: str, workspace_id: str) -> set[str]:
    """The subscriptions whose secret this warehouse holds for `name`, if it is still the
    workspace its key belongs to."""
    held = secrets.read().get(name)
    if held is None or held.workspace_id != workspace_id:
        return set()
    return {s.id for s in held.active()}


def _save(secrets: SecretsFile, name: str, workspace_id: str, created: dict[str, Any]) -> None:
    """Keep a new subscription's secret at once: the service shows it only now."""
    stored = StoredSubscription(
        id=created["id"],
        event=str(created.get("event")),
        target_url=str(created.get("target_url")),
        secret=created["secret"],
        created_at=stamp(now_utc()),
    )

    def add(current: WorkspaceSecrets | None) -> WorkspaceSecrets:
        if current is None or current.workspace_id != workspace_id:
            current = WorkspaceSecrets(workspace_id)  # the key now names another workspace
        return WorkspaceSecrets(workspace_id, (*current.subscriptions, stored))

    secrets.update(name, add)


def _retire(secrets: SecretsFile, name: str, ids: set[str]) -> None:
    """These subscriptions are gone at the service: their secrets verify a while longer."""
    if not ids:
        return
    with secrets.changing() as held:
        if name in held:
            held[name] = held[name].retired(ids, now_utc())
