"""Sandboxes for tests: the fixed start time, API clients, list paging and the admin API."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import httpx

from sandbox import JSON, RunningSandbox

from .waiting import wait_until

# 2026-01-01T00:00:00Z: a fixed clock start makes the synthetic data identical on every run.
START_MS = 1_767_225_600_000

# The `make_sandbox` fixture: `SandboxConfig` settings in, a started sandbox out.
SandboxFactory = Callable[..., RunningSandbox]


def client_for(running: RunningSandbox, key: str | None = None) -> httpx.Client:
    """An HTTP client of the v1 API with a bearer key (the sandbox's main key by default)."""
    return httpx.Client(
        base_url=running.base_url,
        headers={"Authorization": f"Bearer {key or running.api_key}"},
        timeout=30,
    )


def page_all(
    client: httpx.Client, path: str, *, pause: float = 0.0, **params: Any
) -> list[dict[str, Any]]:
    """Every item of a list endpoint, 200 at a time (`pause` seconds between pages)."""
    items: list[dict[str, Any]] = []
    offset = 0
    while True:
        body = client.get(path, params={**params, "limit": 200, "offset": offset}).json()
        items.extend(body["data"])
        offset += len(body["data"])
        if not body["data"] or offset >= body["total"]:
            return items
        time.sleep(pause)


def admin_response(
    running: RunningSandbox, method: str, path: str, body: JSON | None = None
) -> httpx.Response:
    """Call the admin endpoint `/_sandbox{path}` (it needs no key) and return the response as it
    came, for tests about the admin API's own status codes and refusals."""
    # Advancing a large sandbox by days can take a while; the default 5 s is too tight.
    return httpx.request(method, f"{running.root_url}/_sandbox{path}", json=body, timeout=60)


def admin(running: RunningSandbox, method: str, path: str, body: JSON | None = None) -> Any:
    """Call the admin endpoint `/_sandbox{path}`, which must answer 200, and return its JSON."""
    response = admin_response(running, method, path, body)
    assert response.status_code == 200, response.text
    return response.json()


def advance_every_workspace(running: RunningSandbox, **by: int) -> None:
    """Move the clock of each of the sandbox's workspaces on (`hours=12`, `days=2`), with the
    activity that time brings, as `/_sandbox/advance?workspace=` does for one."""
    for store in running.stores:
        admin(running, "POST", f"/advance?workspace={store.workspace.id}", dict(by))


def served(running: RunningSandbox) -> int:
    """`/v1` requests the sandbox has answered so far, refused ones included."""
    return int(admin(running, "GET", "/state")["requests_served"])


def held_now(running: RunningSandbox, workspace_id: str) -> int:
    """The workspace's `/v1` requests the sandbox holds unanswered right now (`hold_after`)."""
    return int(admin(running, "GET", f"/state?workspace={workspace_id}")["requests_held"])


@contextmanager
def holding(
    running: RunningSandbox, workspace_id: str, after: int, key: str | None = None
) -> Iterator[None]:
    """Let the workspace's next `after` requests through (of those with `key`, when given),
    then hold the later ones unanswered until the block ends: a run kept part-way through its
    reads for as long as a test needs."""
    path = f"/config?workspace={workspace_id}"
    admin(running, "PATCH", path, {"hold_after": after, "hold_key": key})
    try:
        yield
    finally:
        admin(running, "PATCH", path, {"hold_after": None, "hold_key": None})


def wait_until_held(
    running: RunningSandbox, workspace_id: str, still_running: Callable[[], bool]
) -> None:
    """Block until one of the workspace's requests is held: whatever asked is now waiting for
    its answer, part-way through its reads. `still_running` tells whether it is alive."""

    def held() -> bool:
        if held_now(running, workspace_id) > 0:
            return True
        assert still_running(), "the run ended before any of its requests was held"
        return False

    wait_until(held, 120, "a request of the run to hold")


def new_key(running: RunningSandbox, **body: Any) -> str:
    """A new API key made through the admin API (`body`: name, scopes, expires_at, ...)."""
    response = admin_response(running, "POST", "/keys", body)
    assert response.status_code == 201, response.text
    key = response.json()["key"]
    assert isinstance(key, str)
    return key


def sandbox_now(running: RunningSandbox) -> datetime:
    """The sandbox clock's current time, as its admin state reports it."""
    return datetime.fromisoformat(admin(running, "GET", "/state")["now"])


def deleted_on_server(running: RunningSandbox) -> dict[str, set[str]]:
    """The ids per kind (`contacts`, `documents`, `shipments`) that `GET /_sandbox/deleted`
    says the application deleted in the first workspace and has not restored."""
    listed = admin(running, "GET", "/deleted")["deleted"]
    return {kind: {entry["id"] for entry in entries} for kind, entries in listed.items()}
