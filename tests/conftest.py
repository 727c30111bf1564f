"""The suite's pytest fixtures: sandboxes served over real HTTP on loopback, and an API client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sandbox import RunningSandbox, SandboxConfig
from tests.support import START_MS, SandboxFactory, client_for


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


@pytest.fixture
def api(shared_sandbox: RunningSandbox) -> Iterator[httpx.Client]:
    """A client of the shared sandbox with its main key."""
    with client_for(shared_sandbox) as client:
        yield client
