"""Loads against a sandbox: the pacing for a limit-free one, and pointing the source at one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pipelines.environment import environment_set, source_environment
from sandbox import RunningSandbox
from sources.signing import Pacing, SigningConfiguration, configured_source

# Pacer settings for sandboxes with limits off: the source's default 10/s would only make the
# tests slow. `fast()` applies them to the source's settings; `cli_env` sets them by default.
FAST = Pacing(requests_per_second=2000, burst=200)


def fast(running: RunningSandbox | None = None, key: str | None = None) -> SigningConfiguration:
    """The source's settings, paced by `FAST`: for `running` (its URL, and `key` or its first
    key) when given, else as dlt's configuration has them now (`pointed_at`, `source_env`).
    Change more with `dataclasses.replace(fast(), page_size=10)`."""
    if running is None:
        return configured_source().paced(FAST)
    chosen = configured_source(api_key=key or running.api_key, base_url=running.base_url)
    return chosen.paced(FAST)


@contextmanager
def pointed_at(running: RunningSandbox, key: str | None = None) -> Iterator[None]:
    """Configure the source for this sandbox through the documented environment variables."""
    with environment_set(source_environment(running.base_url, key or running.api_key)):
        yield
