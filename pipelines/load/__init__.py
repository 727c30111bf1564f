"""Loading, in layer order: `signals` (SIGINT and SIGTERM turned into a clean stop), `run`
(one workspace's run: what it is asked, dlt's steps, its record), `workspaces` (the configured
workspaces in turn or side by side), `display` (what a load says as it runs and ends) and `cli`
(`signing-etl load`)."""

from __future__ import annotations

from .cli import load_command
from .run import LoadOptions, LoadResult, load_incremental
from .signals import stop_on_signals
from .workspaces import LoadWatcher, WorkspaceLoad, in_turns, load_workspace, load_workspaces

__all__ = [
    "LoadOptions",
    "LoadResult",
    "LoadWatcher",
    "WorkspaceLoad",
    "in_turns",
    "load_command",
    "load_incremental",
    "load_workspace",
    "load_workspaces",
    "stop_on_signals",
]
