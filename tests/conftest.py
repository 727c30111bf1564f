"""Fixtures shared by the whole suite: sandboxes served over real HTTP on loopback."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from sandbox import RunningSandbox, SandboxConfig

# 2026-01-01T00:00:00Z: a fixed clock start makes the synthetic data identical on every run.
START_MS = 1_767_225_600_000

SandboxFactory = Callable[..., RunningSandbox]


@pytest.fixture(scope="session")
def shared_sandbox() -> Iterator[RunningSandbox]:
    """One read-mostly sandbox for the suite, limits off; tests that change data or limits
    start their own with `make_sandbox`."""
    config = SandboxConfig(seed=7, shipments=1_500, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(config) as running:
        yield running


@pytest.fixture
def make_sandbox() -> Iterator[SandboxFactory]:
    """Start sandboxes with any `SandboxConfig` settings; all are stopped after the test."""
    started: list[RunningSandbox] = []

    def start(**settings: Any) -> RunningSandbox:
        settings.setdefault("start_ms", START_MS)
        settings.setdefault("shipments", 300)
        running = RunningSandbox(SandboxConfig(**settings)).start()
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


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


@pytest.fixture
def api(shared_sandbox: RunningSandbox) -> Iterator[httpx.Client]:
    with client_for(shared_sandbox) as client:
        yield client
