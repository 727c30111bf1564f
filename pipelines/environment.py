"""Environment variables set for a while: how dbt's profile, dlt's configuration and the
sandbox's demo are pointed at a warehouse or a service in this process."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def environment_set(values: Mapping[str, str]) -> Iterator[None]:
    """These environment variables set while the block runs, as they were afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def source_environment(base_url: str, api_key: str) -> dict[str, str]:
    """The documented variables that point the source at one service and key."""
    return {"SOURCES__SIGNING__BASE_URL": base_url, "SOURCES__SIGNING__API_KEY": api_key}
