"""Helpers shared by the test modules (the pytest fixtures built on them are in conftest.py)."""

from .cli import (
    PROGRESS_LINE,
    cli_env,
    describe,
    error_lines,
    load_args,
    message_lines,
    run_cli,
    start_cli,
    workspaces_env,
)
from .loading import FAST, pointed_at
from .sandboxes import (
    START_MS,
    SandboxFactory,
    admin,
    admin_response,
    client_for,
    new_key,
    page_all,
    sandbox_now,
    served,
)
from .standin import Arrival, FakeAPI, FakeWorkspace, StandIn, honest_page, source_env
from .truth import differences, duplicate_keys, earliest, ms_of, week_of
from .warehouse import MARTS, MODELS_BUILT, mart_tables, raw_row_counts, raw_tables

__all__ = [
    "FAST",
    "MARTS",
    "MODELS_BUILT",
    "PROGRESS_LINE",
    "START_MS",
    "Arrival",
    "FakeAPI",
    "FakeWorkspace",
    "SandboxFactory",
    "StandIn",
    "admin",
    "admin_response",
    "cli_env",
    "client_for",
    "describe",
    "differences",
    "duplicate_keys",
    "earliest",
    "error_lines",
    "honest_page",
    "load_args",
    "mart_tables",
    "message_lines",
    "ms_of",
    "new_key",
    "page_all",
    "pointed_at",
    "raw_row_counts",
    "raw_tables",
    "run_cli",
    "sandbox_now",
    "served",
    "source_env",
    "start_cli",
    "week_of",
    "workspaces_env",
]
