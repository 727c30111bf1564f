"""Loads against a sandbox: the pacing for a limit-free one, and pointing the source at one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pipelines.environment import environment_set, source_environment
from sandbox import RunningSandbox

# Pacer settings for sandboxes with limits off: the source's default 10/s would only make the
# tests slow. Pass them to `load_incremental(..., **FAST)`; `cli_env` sets them by default.
FAST: dict[str, Any] = {"requests_per_second": 2000, "burst": 200}


@contextmanager
def pointed_at(running: RunningSandbox, key: str | None = None) -> Iterator[None]:
    """Configure the source for this sandbox through the documented environment variables."""
    with environment_set(source_environment(running.base_url, key or running.api_key)):
        yield
