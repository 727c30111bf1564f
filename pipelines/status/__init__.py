"""The warehouse's state for its operator, in layer order: `read` (each workspace's runs,
cursors, rows and freshness, and the last model build, read without writing), `health` (each
workspace's health, defined once: ok, failed or stale, and why), `display` (tables, one JSON
document), `alerts` (a notification when a workspace's health changes) and `cli` (`signing-etl
status`, whose `--check` exits on the health)."""

from __future__ import annotations

from .cli import status_command
from .read import Status, WorkspaceStatus, last_attempts, read_status

__all__ = ["Status", "WorkspaceStatus", "last_attempts", "read_status", "status_command"]
