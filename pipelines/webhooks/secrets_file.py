"""The signing secrets of the webhook subscriptions the tool made.

The service shows a subscription's secret once, in its creation answer, and the receiver needs
it to verify every delivery. The secrets live in one file beside the warehouse,
`<folder>/.<warehouse>.webhooks/secrets.json`, created 0600 in a folder 0700 and replaced
atomically, and nowhere else: not in the warehouse, not in dlt's state or folders, not in a log
line, not in git (`warehouse/` is ignored; keep other warehouse folders out of git too).

Why not `.dlt/secrets.toml`: that file is the user's, edited by hand and shared by every
warehouse of the project, while these secrets belong to one warehouse's receiver and are
written by the tool whenever it subscribes, rotates or unsubscribes.

The file is keyed by the configured workspace name (the receiver's path), and each entry
remembers the workspace id `/me` answered when it subscribed. A retired secret (rotated out, or
unsubscribed) still verifies for `RETIRED_GRACE_SECONDS`, for deliveries already signed with
it, and is then dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from pipelines.errors import WebhooksError

FILE_NAME = "secrets.json"
# How long a retired secret still verifies: the sender's retries of a delivery signed with it.
RETIRED_GRACE_SECONDS = 600.0


def private_folder(folder: Path) -> Path:
    """`folder`, created readable by its owner only when it does not exist yet."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


@dataclass(frozen=True)
class StoredSubscription:
    """One subscription at the service and its signing secret (never shown)."""

    id: str
    event: str
    target_url: str
    secret: str = field(repr=False)
    created_at: str
    retired_at: str | None = None  # when it was rotated out or unsubscribed

    def verifies_at(self, now: datetime) -> bool:
        """Whether deliveries signed with this secret are still accepted at `now`."""
        if self.retired_at is None:
            return True
        retired = datetime.fromisoformat(self.retired_at)
        return now - retired <= timedelta(seconds=RETIRED_GRACE_SECONDS)


@dataclass(frozen=True)
class WorkspaceSecrets:
    """The subscriptions of one configured workspace, and the workspace id they belong to."""

    workspace_id: str
    subscriptions: tuple[StoredSubscription, ...] = ()

    def active(self) -> list[StoredSubscription]:
        return [s for s in self.subscriptions if s.retired_at is None]

    def secrets_at(self, now: datetime) -> list[str]:
        """Every secret a delivery may be signed with at `now` (several while rotating)."""
        return [s.secret for s in self.subscriptions if s.verifies_at(now)]

    def retired(self, ids: set[str], now: datetime) -> WorkspaceSecrets:
        """These subscriptions retired at `now`; expired retired ones dropped."""
        kept = [
            replace(s, retired_at=stamp(now)) if s.id in ids and s.retired_at is None else s
            for s in self.subscriptions
        ]
        return replace(self, subscriptions=tuple(s for s in kept if s.verifies_at(now)))


Secrets = dict[str, WorkspaceSecrets]  # by configured workspace name


class SecretsFile:
    """The secrets file of one warehouse's receiver."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / FILE_NAME

    def read(self) -> Secrets:
        """Every workspace's subscriptions; none when the file does not exist.

        Raises:
            WebhooksError: the file cannot be read or is not one this tool wrote.
        """
        try:
            content = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise WebhooksError(f"cannot read {self.path}: {error.strerror}") from None
        try:
            return _parsed(orjson.loads(content))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise WebhooksError(
                f"{self.path} is not a secrets file of signing-etl; move it away and subscribe "
                "again (`signing-etl webhooks subscribe` replaces subscriptions whose secret "
                "is lost)"
            ) from None

    def signature(self) -> tuple[int, int, int] | None:
        """What changes when the file is replaced (so a reader knows to read it again)."""
        try:
            found = self.path.stat()
        except FileNotFoundError:
            return None
        return (found.st_ino, found.st_mtime_ns, found.st_size)

    @contextlib.contextmanager
    def changing(self) -> Iterator[Secrets]:
        """The secrets to change in the block, written back when it ends; one writer at a
        time (two `subscribe` commands at once take turns)."""
        try:
            private_folder(self.folder)
            lock = open(self.folder / "secrets.lock", "a")  # noqa: SIM115 (closed below)
        except OSError as error:
            raise WebhooksError(f"cannot write in {self.folder}: {error.strerror}") from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                secrets = self.read()
                yield secrets
                self._write(secrets)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def update(
        self, name: str, change: Callable[[WorkspaceSecrets | None], WorkspaceSecrets]
    ) -> None:
        """Replace one workspace's entry by what `change` makes of it, at once on disk."""
        with self.changing() as secrets:
            secrets[name] = change(secrets.get(name))

    def _write(self, secrets: Secrets) -> None:
        """Write the file whole: a new file made 0600 from the start, synced, then renamed
        over the old one, so a reader sees the old or the new file, never half of one."""
        body = orjson.dumps(
            {"version": 1, "workspaces": {name: asdict(ws) for name, ws in secrets.items()}},
            option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS,
        )
        try:
            handle, temporary = tempfile.mkstemp(prefix=".secrets.", dir=self.folder)
        except OSError as error:
            raise WebhooksError(f"cannot write in {self.folder}: {error.strerror}") from None
        try:
            try:
                os.fchmod(handle, 0o600)
                os.write(handle, body)
                os.fsync(handle)
            finally:
                os.close(handle)
            os.replace(temporary, self.path)
        except OSError as error:
            Path(temporary).unlink(missing_ok=True)
            raise WebhooksError(f"cannot write {self.path}: {error.strerror}") from None


def _parsed(document: Any) -> Secrets:
    workspaces = document["workspaces"]
    if document.get("version") != 1 or not isinstance(workspaces, dict):
        raise ValueError("not a secrets file")
    return {
        str(name): WorkspaceSecrets(
            workspace_id=str(entry["workspace_id"]),
            subscriptions=tuple(StoredSubscription(**s) for s in entry["subscriptions"]),
        )
        for name, entry in workspaces.items()
    }


def now_utc() -> datetime:
    return datetime.now(UTC)


def stamp(moment: datetime) -> str:
    """A UTC time as ISO text of one fixed width, so that texts sort as the times do."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")
