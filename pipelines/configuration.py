"""Which workspaces a run loads: named entries of dlt's configuration, or the single key.

Each entry names one key of one workspace:

    [sources.signing.workspaces.acme]        # .dlt/secrets.toml
    api_key = "sk_live_..."
    base_url = "https://host/api/v1"         # optional: `sources.signing.base_url` otherwise
    deletes = "hard"                         # optional: `sources.signing.deletes` otherwise

or `SOURCES__SIGNING__WORKSPACES__ACME__API_KEY` (and `__BASE_URL`, `__DELETES`) in the
environment; the source's other settings are `[sources.signing]`'s, shared by every entry.
Without named entries, the single `sources.signing.api_key` (`SOURCES__SIGNING__API_KEY`) is
the one workspace, named `default`. The name is only a handle for `--workspace`: a
workspace's state belongs to the id its key's `/me` answers with, so renaming an entry or
rotating its key continues where it was.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dlt

from pipelines.errors import ConfigError
from sources.signing import (
    DELETE_MODES,
    SigningAPIError,
    SigningConfiguration,
    checked_base_url,
    configured_source,
)
from sources.signing.errors import one_line

SECTION = ("sources", "signing", "workspaces")
DEFAULT_NAME = "default"
# What a named entry may set for its workspace besides its key.
ENTRY_SETTINGS = ("base_url", "deletes")
_ENV_KEY = re.compile(r"^SOURCES__SIGNING__WORKSPACES__(?P<name>[A-Za-z0-9_-]+?)__API_KEY$")


@dataclass(frozen=True)
class WorkspaceEntry:
    """One configured workspace: its name, its key and the API root to ask."""

    name: str
    base_url: str  # checked: no user, password or query string, so it may be shown
    api_key: str = field(repr=False)  # never printed
    deletes: str | None = None  # its own treatment of deleted records (checked), else shared

    def settings(self) -> SigningConfiguration:
        """The source's settings for this workspace: its key and API root, the rest from
        `[sources.signing]` (resolved now, from dlt's configuration).

        Raises:
            ConfigValueCannotBeCoercedException: a setting is not of its type.
        """
        return configured_source(api_key=self.api_key, base_url=self.base_url, deletes=self.deletes)


def _configured_entries() -> dict[str, dict[str, str]]:
    """Each named entry's settings, the environment first, then the providers in dlt's order:
    the first value of a field wins. An entry is read as a whole, never through a dotted key,
    so a name with dots or quotes (`[sources.signing.workspaces."eu.sales"]`) is found as
    written."""
    entries: dict[str, dict[str, str]] = {}
    for variable in sorted(os.environ):
        found = _ENV_KEY.match(variable)
        if found:
            entry = entries.setdefault(found["name"].lower(), {})
            entry["api_key"] = os.environ[variable]
            for name in ENTRY_SETTINGS:
                value = os.environ.get(variable.removesuffix("API_KEY") + name.upper())
                if value:
                    entry[name] = value
    for provider in dlt.config.config_providers:
        value, _ = provider.get_value(SECTION[-1], dict, None, *SECTION[:-1])
        for name, fields in value.items() if isinstance(value, dict) else []:
            entry = entries.setdefault(str(name), {})
            for field_name, field_value in _fields(fields):
                entry.setdefault(field_name, field_value)
    return entries


def _fields(fields: Any) -> list[tuple[str, str]]:
    """The set fields of one entry as a provider holds it."""
    if not isinstance(fields, dict):
        return []
    return [(str(k), str(v)) for k, v in fields.items() if v not in (None, "")]


def configured_workspaces() -> list[WorkspaceEntry]:
    """Every configured workspace, in configuration order; the single key when none is named.

    Raises:
        ConfigError: an entry lacks its key or base URL, names an unknown `deletes`, two
            entries name one workspace (the same key and URL), or nothing is configured.
    """
    default_url = _setting("sources.signing.base_url")
    named = _configured_entries()
    if not named:
        key = _setting("sources.signing.api_key")
        if not key or not default_url:
            missing = [n for n, v in (("api_key", key), ("base_url", default_url)) if not v]
            raise ConfigError(
                f"missing configuration: {', '.join(missing)}; set SOURCES__SIGNING__API_KEY "
                "and SOURCES__SIGNING__BASE_URL, or name workspaces in .dlt/secrets.toml "
                "([sources.signing.workspaces.<name>] api_key, base_url)"
            )
        return [WorkspaceEntry(DEFAULT_NAME, _checked(default_url, DEFAULT_NAME), key)]
    entries: list[WorkspaceEntry] = []
    for name, fields in named.items():
        key, url = fields.get("api_key"), fields.get("base_url") or default_url
        if not key or not url:
            what = "api_key" if not key else "base_url"
            variable = f"{'__'.join((*SECTION, name, what))}".upper()
            raise ConfigError(
                f"workspace {name!r} has no {what}; set it in .dlt/secrets.toml "
                f'([{".".join(SECTION)}."{name}"] {what} = ...) or as {variable}'
            )
        deletes = _deletes(fields.get("deletes"), name)
        entry = WorkspaceEntry(name, _checked(url, name), key, deletes)
        twin = next(
            (e.name for e in entries if (e.api_key, e.base_url) == (key, entry.base_url)), None
        )
        if twin is not None:  # one key opens one workspace: two names would split its record
            raise ConfigError(
                f"workspaces {twin!r} and {name!r} have the same api_key and base_url, so they "
                "are one workspace: name it once"
            )
        entries.append(entry)
    return entries


def configured_names() -> list[str]:
    """The names the configuration gives its workspaces, also when an entry is incomplete (so
    a run that cannot start can still be recorded under them); `default` for the single key,
    none when nothing names a workspace."""
    named = list(_configured_entries())
    if named:
        return named
    if _setting("sources.signing.api_key") or _setting("sources.signing.base_url"):
        return [DEFAULT_NAME]
    return []


def _checked(base_url: str, name: str) -> str:
    """The base URL, or a one-line ConfigError that never repeats a secret part of it."""
    try:
        checked_base_url(base_url)
    except SigningAPIError as error:
        raise ConfigError(f"workspace {name!r}: {error}") from None
    return base_url


def _deletes(value: str | None, name: str) -> str | None:
    """An entry's own `deletes`, or a one-line ConfigError that names its variable."""
    if value is None or value.strip().lower() in DELETE_MODES:
        return value
    variable = "__".join((*SECTION, name, "deletes")).upper()
    raise ConfigError(
        f"workspace {name!r}: deletes must be {' or '.join(DELETE_MODES)} ({variable}), "
        f"not {one_line(value, 40)!r}"
    )


def choose(entries: Sequence[WorkspaceEntry], names: Iterable[str]) -> list[WorkspaceEntry]:
    """The entries named (all when no name is given), or one line naming the known ones."""
    wanted = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not wanted:
        return list(entries)
    by_name = {entry.name: entry for entry in entries}
    unknown = [name for name in wanted if name not in by_name]
    if unknown:
        raise ConfigError(
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
