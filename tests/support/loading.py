"""Loads against a sandbox: the pacing for a limit-free one, and pointing the source at one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sandbox import RunningSandbox

# Pacer settings for sandboxes with limits off: the source's default 10/s would only make the
# tests slow. Pass them to `load_incremental(..., **FAST)`; `cli_env` sets them by default.
FAST: dict[str, Any] = {"requests_per_second": 2000, "burst": 200}


@contextmanager
def pointed_at(running: RunningSandbox, key: str | None = None) -> Iterator[None]:
    """Configure the source for this sandbox through the documented environment variables."""
    saved = {
        name: os.environ.get(name)
        for name in ("SOURCES__SIGNING__API_KEY", "SOURCES__SIGNING__BASE_URL")
    }
    os.environ["SOURCES__SIGNING__API_KEY"] = key or running.api_key
    os.environ["SOURCES__SIGNING__BASE_URL"] = running.base_url
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
