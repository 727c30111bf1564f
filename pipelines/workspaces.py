"""Which workspaces a run loads: named entries of dlt's configuration, or the single key.

Each entry names one key of one workspace:

    [sources.signing.workspaces.acme]        # .dlt/secrets.toml
    api_key = "sk_live_..."
    base_url = "https://host/api/v1"         # optional: `sources.signing.base_url` otherwise

or `SOURCES__SIGNING__WORKSPACES__ACME__API_KEY` in the environment. Without named entries, the
single `sources.signing.api_key` (`SOURCES__SIGNING__API_KEY`) is the one workspace, named
`default`. The name is only a handle for `--workspace`: a workspace's state belongs to the id
its key's `/me` answers with, so renaming an entry or rotating its key continues where it was.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dlt
from dlt.common.configuration.exceptions import ConfigFieldMissingException
from dlt.pipeline.exceptions import PipelineStepFailed

from pipelines.signing_pipeline import AlreadyRunning, LoadResult, WarehouseError, load_incremental
from pipelines.workspace_state import LegacyStateError
from sources.signing import RunControl, RunStopped, SigningAPIError

SECTION = ("sources", "signing", "workspaces")
DEFAULT_NAME = "default"
_ENV_KEY = re.compile(r"^SOURCES__SIGNING__WORKSPACES__(?P<name>[A-Za-z0-9_-]+?)__API_KEY$")


class WorkspaceConfigError(ValueError):
    """The workspaces' configuration is incomplete or names an unknown entry (one line)."""


@dataclass(frozen=True)
class WorkspaceEntry:
    """One configured workspace: its name, its key and the API root to ask."""

    name: str
    base_url: str
    api_key: str = field(repr=False)  # never printed

    def source_options(self) -> dict[str, Any]:
        return {"api_key": self.api_key, "base_url": self.base_url}


def configured_names() -> list[str]:
    """Names of the `[sources.signing.workspaces.<name>]` entries in every config provider
    (the toml files, and the environment's `SOURCES__SIGNING__WORKSPACES__<NAME>__API_KEY`)."""
    names: dict[str, None] = {}
    for provider in dlt.config.config_providers:
        value, _ = provider.get_value(SECTION[-1], dict, None, *SECTION[:-1])
        if isinstance(value, dict):
            names.update(dict.fromkeys(str(name) for name in value))
    for variable in sorted(os.environ):
        found = _ENV_KEY.match(variable)
        if found:
            names[found["name"].lower()] = None
    return list(names)


def configured_workspaces() -> list[WorkspaceEntry]:
    """Every configured workspace, in configuration order; the single key when none is named.

    Raises:
        WorkspaceConfigError: an entry lacks its key or base URL, or nothing is configured.
    """
    default_url = _setting("sources.signing.base_url")
    names = configured_names()
    if not names:
        key = _setting("sources.signing.api_key")
        if not key or not default_url:
            missing = [n for n, v in (("api_key", key), ("base_url", default_url)) if not v]
            raise WorkspaceConfigError(
                f"missing configuration: {', '.join(missing)}; set SOURCES__SIGNING__API_KEY "
                "and SOURCES__SIGNING__BASE_URL, or name workspaces in .dlt/secrets.toml "
                "([sources.signing.workspaces.<name>] api_key, base_url)"
            )
        return [WorkspaceEntry(DEFAULT_NAME, default_url, key)]
    entries = []
    for name in names:
        prefix = ".".join((*SECTION, name))
        key = _setting(f"{prefix}.api_key")
        url = _setting(f"{prefix}.base_url") or default_url
        if not key or not url:
            what = "api_key" if not key else "base_url"
            variable = f"{'__'.join((*SECTION, name, what))}".upper()
            raise WorkspaceConfigError(
                f"workspace {name!r} has no {what}; set it in .dlt/secrets.toml "
                f"([{prefix}] {what} = ...) or as {variable}"
            )
        entries.append(WorkspaceEntry(name, url, key))
    return entries


def choose(entries: Sequence[WorkspaceEntry], names: Iterable[str]) -> list[WorkspaceEntry]:
    """The entries named (all when no name is given), or one line naming the known ones."""
    wanted = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not wanted:
        return list(entries)
    by_name = {entry.name: entry for entry in entries}
    unknown = [name for name in wanted if name not in by_name]
    if unknown:
        raise WorkspaceConfigError(
            f"unknown workspace {', '.join(unknown)}; configured: {', '.join(by_name) or '(none)'}"
        )
    return [by_name[name] for name in wanted]


def _setting(key: str) -> str | None:
    """A configured value from secrets or config (secrets first), or None."""
    for accessor in (dlt.secrets, dlt.config):
        value: Any = accessor.get(key)
        if value not in (None, ""):
            return str(value)
    return None


def worst_exit_code(codes: Iterable[int]) -> int:
    """The exit code of a run over several workspaces: an interruption (128 + signal) first,
    then a failure (any other non-zero but 75), then a stop on purpose (75), else 0."""
    seen = list(codes)

    def severity(code: int) -> int:
        return 3 if code > 128 else 0 if code == 0 else 1 if code == 75 else 2

    return max(seen, key=severity, default=0)


@dataclass
class WorkspaceLoad:
    """How one workspace's load ended, as the CLI exits for it: its code and one-line reason,
    what was loaded (None when it ended before loading anything), and `fatal` when no other
    workspace can load either (a locked or unusable warehouse, configuration missing)."""

    entry: WorkspaceEntry
    code: int
    reason: str | None = None
    result: LoadResult | None = None
    seconds: float = 0.0
    fatal: bool = False

    @property
    def kind(self) -> str:
        """`completed`, `stopped` (on purpose: exit 75) or `failed` (any other code)."""
        return {0: "completed", 75: "stopped"}.get(self.code, "failed")


def load_workspace(
    entry: WorkspaceEntry, warehouse: Path, control: RunControl, **options: Any
) -> WorkspaceLoad:
    """One workspace's incremental load, for the CLI and the Dagster assets alike. An error a
    load ends with is an outcome with its one-line reason, not an exception, so the next
    workspace still loads; any other exception is a bug and propagates."""
    started = time.monotonic()
    try:
        result = load_incremental(
            warehouse,
            control=control,
            workspace_name=entry.name,
            **options,
            **entry.source_options(),
        )
    except (AlreadyRunning, WarehouseError, LegacyStateError) as error:
        return WorkspaceLoad(entry, 1, str(error), fatal=True)
    except ConfigFieldMissingException as error:
        return WorkspaceLoad(entry, 1, missing_config_reason(error), fatal=True)
    except PipelineStepFailed as error:
        return WorkspaceLoad(entry, 1, step_failure_reason(error))
    except RunStopped as error:  # at the first request: nothing fetched, nothing written
        return WorkspaceLoad(entry, error.exit_code, str(error))
    except (SigningAPIError, ValueError) as error:
        return WorkspaceLoad(entry, 1, str(error))
    seconds = time.monotonic() - started
    return WorkspaceLoad(entry, result.exit_code, result.stopped, result, seconds)


def missing_config_reason(error: ConfigFieldMissingException) -> str:
    fields = ", ".join(error.fields)
    return (
        f"missing configuration: {fields}; set SOURCES__SIGNING__API_KEY and "
        "SOURCES__SIGNING__BASE_URL (or .dlt/secrets.toml, .dlt/config.toml)"
    )


def step_failure_reason(error: PipelineStepFailed) -> str:
    """The innermost known cause of a failed dlt step, in one line."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, SigningAPIError | ConfigFieldMissingException):
            if isinstance(cause, ConfigFieldMissingException):
                return missing_config_reason(cause)
            return str(cause)
        cause = cause.__cause__ or cause.__context__ or getattr(cause, "exception", None)
    first_line = str(error.exception).splitlines()[0] if str(error.exception) else ""
    return f"the {error.step} step failed: {type(error.exception).__name__}: {first_line}"
