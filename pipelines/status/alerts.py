"""Alerts when a workspace's health changes: `status --check` works out each workspace's health
(ok, failed, stale), compares it with the health it last told, and sends one notification per
change (failed, stale, recovered) to every URL in `[alerts] urls`, through Apprise (Slack,
e-mail, Teams, a plain JSON webhook and dozens more, each by its URL scheme). A workspace that
stays failed is told once, not at every hourly check.

What was last told is kept beside the warehouse (`.<name>.alerts.json`), written after the
notifications were handed over. The URLs carry the services' tokens, so they are read from
dlt's configuration (`.dlt/secrets.toml` or the environment: `ALERTS__URLS`) and never shown.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import dlt

from pipelines.console import output
from pipelines.status.health import Health, WorkspaceHealth
from pipelines.warehouse import Warehouse
from sources.signing.errors import one_line


@dataclass(frozen=True)
class Change:
    """A workspace whose health is not the one last told."""

    workspace: str
    was: Health | None  # None: never told (a workspace seen for the first time)
    now: Health
    why: str

    @property
    def text(self) -> str:
        """One clean line: the name and the reason (a run's stop reason, which may quote the
        service) can neither add lines nor carry control characters into a chat or a mail."""
        workspace = one_line(self.workspace)
        if self.now is Health.OK:
            return f"workspace {workspace} recovered: loaded again"
        return f"workspace {workspace} is {self.now}: {one_line(self.why)}"


def alert_urls() -> list[str]:
    """The configured notification URLs (`[alerts] urls`), none when not configured."""
    for provider in (dlt.secrets, dlt.config):
        urls: object = provider.get("alerts.urls")
        if isinstance(urls, str) and urls.strip().startswith("["):
            urls = json.loads(urls)  # a TOML or JSON list given as one environment value
        if isinstance(urls, str) and urls:
            return [urls]  # Apprise takes several, separated by commas or spaces
        if isinstance(urls, list) and urls:
            return [str(url) for url in urls]
    return []


def changes(told: dict[str, str], current: dict[str, WorkspaceHealth]) -> list[Change]:
    """The workspaces whose health differs from what was told; a workspace first seen healthy
    is no news."""
    found = []
    for workspace, now in sorted(current.items()):
        was = Health(told[workspace]) if told.get(workspace) in set(Health) else None
        if now.health is not was and not (was is None and now.health is Health.OK):
            found.append(Change(workspace, was, now.health, now.why))
    return found


def announce(warehouse: Warehouse, current: dict[str, WorkspaceHealth]) -> list[Change]:
    """Notify every configured URL of the workspaces whose health changed since the last
    announcement, and remember what was told; the changes (none sent when no URL is set)."""
    urls = alert_urls()
    if not urls:
        return []
    ledger = _ledger_path(warehouse)
    told = _read(ledger)
    news = changes(told, current)
    if news and not _notify(urls, news):
        return news  # not told: tried again at the next check
    _write(ledger, {name: str(each.health) for name, each in current.items()})
    return news


def _notify(urls: list[str], news: list[Change]) -> bool:
    """Hand the changes to Apprise, one notification each; False when any URL refused."""
    import apprise  # only when alerts are configured: its plugins take a while to load

    sender = apprise.Apprise()
    for url in urls:
        if not sender.add(url):
            output.warning("alerts: a URL in [alerts] urls is not one Apprise knows; skipped")
    delivered = True
    for change in news:
        kind = apprise.NotifyType.SUCCESS if change.now is Health.OK else apprise.NotifyType.FAILURE
        if not sender.notify(title="signing-etl", body=change.text, notify_type=kind):
            delivered = False
    if not delivered:
        output.warning("alerts: a notification was not delivered; it is sent again next time")
    return delivered


def _ledger_path(warehouse: Warehouse) -> Path:
    return warehouse.path.parent / f".{warehouse.path.stem}.alerts.json"


def _read(path: Path) -> dict[str, str]:
    try:
        told = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in told.items()} if isinstance(told, dict) else {}


def _write(path: Path, told: dict[str, str]) -> None:
    """Replace the ledger whole (a reader never sees half of it)."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(json.dumps(told, sort_keys=True))
        os.replace(partial, path)
    except OSError as error:
        output.warning(f"alerts: cannot remember what was told in {path}: {error.strerror}")
