"""The warehouse's state for its operator, in layer order: `read` (each workspace's runs,
cursors, rows and freshness, read without writing), `display` (tables, one JSON document, the
freshness check), `alerts` (a notification when a workspace's health changes) and `cli`
(`signing-etl status`)."""

from __future__ import annotations

from .cli import status_command
from .read import Status, WorkspaceStatus, last_attempts, read_status

__all__ = ["Status", "WorkspaceStatus", "last_attempts", "read_status", "status_command"]
