"""`signing-etl webhooks`: subscribe, list, unsubscribe, serve, status. The commands parse
options, call the functions of this package and print; they hold no logic of their own.
The receiver's service is imported where it is used: its drains load dlt, which `list` and
`status` don't need."""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Annotated

import typer

from pipelines.configuration import WorkspaceEntry, choose, configured_workspaces
from pipelines.console import output
from pipelines.console.commands import fail, warehouse_named
from pipelines.console.options import WarehouseDestination, WarehouseFile, WorkspacesOption
from pipelines.errors import SigningEtlError
from pipelines.outcome import SIGNAL_BASE
from pipelines.warehouse import DEFAULT_DESTINATION, DEFAULT_WAREHOUSE
from pipelines.webhooks.display import print_changes, print_inbox, print_listed, print_urls
from pipelines.webhooks.guard import DEFAULT_LIMITS
from pipelines.webhooks.inbox import Inbox
from pipelines.webhooks.receiver import DEFAULT_PORT, ReceiverSettings
from pipelines.webhooks.secrets_file import SecretsFile
from pipelines.webhooks.subscriptions import (
    EVENTS,
    Change,
    Listed,
    list_subscriptions,
    subscribe,
    unsubscribe,
)
from pipelines.webhooks.verify import DEFAULT_MAX_BODY_BYTES, DEFAULT_TOLERANCE_SECONDS

webhooks_app = typer.Typer(
    help="Webhooks: subscriptions, the receiver that keeps deliveries in an inbox beside the "
    "warehouse, and the loads that drain it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

TargetOption = Annotated[
    str,
    typer.Option(
        "--target-url",
        help="The receiver's public URL (your HTTPS proxy); each workspace is subscribed at "
        "<URL>/<workspace name>.",
    ),
]


def _entries(names: list[str] | None) -> list[WorkspaceEntry]:
    try:
        return choose(configured_workspaces(), names or [])
    except SigningEtlError as error:
        raise fail(str(error)) from None


@webhooks_app.command("subscribe")
def subscribe_command(
    target_url: TargetOption,
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    workspace: WorkspacesOption = None,
    event: Annotated[
        list[str] | None,
        typer.Option(help=f"Subscribe only this event (repeatable). Default: {', '.join(EVENTS)}."),
    ] = None,
    rotate: Annotated[
        bool,
        typer.Option(
            "--rotate", help="Replace held subscriptions by new ones with new secrets (rotation)."
        ),
    ] = False,
) -> None:
    """Subscribe each workspace's receiver path to the service's events (needs a key with the
    `write` scope). Kept when its secret is held, replaced when the secret was lost."""
    secrets = SecretsFile(warehouse_named(duckdb).webhooks_dir)
    changes: list[Change] = []
    failed = []
    for entry in _entries(workspace):
        try:
            changes += subscribe(entry, secrets, target_url, event or [], rotate=rotate)
        except SigningEtlError as error:
            failed.append(str(error))
    _finish(changes, failed)


@webhooks_app.command("list")
def list_command(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE, workspace: WorkspacesOption = None
) -> None:
    """List each workspace's subscriptions at the service, and whether their secret is held."""
    secrets = SecretsFile(warehouse_named(duckdb).webhooks_dir)
    listed: list[Listed] = []
    failed = []
    for entry in _entries(workspace):
        try:
            listed += list_subscriptions(entry, secrets)
        except SigningEtlError as error:
            failed.append(str(error))
    print_listed(listed)
    for line in failed:
        output.error(line)
    if failed:
        raise typer.Exit(1)


@webhooks_app.command("unsubscribe")
def unsubscribe_command(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    workspace: WorkspacesOption = None,
    target_url: Annotated[
        str | None,
        typer.Option(
            "--target-url",
            help="Remove every subscription at this receiver URL (secret held or not). "
            "Default: the subscriptions whose secret this warehouse holds.",
        ),
    ] = None,
) -> None:
    """Remove subscriptions at the service (and, after a grace period, their secrets)."""
    secrets = SecretsFile(warehouse_named(duckdb).webhooks_dir)
    changes: list[Change] = []
    failed = []
    for entry in _entries(workspace):
        try:
            changes += unsubscribe(entry, secrets, target_url)
        except SigningEtlError as error:
            failed.append(str(error))
    _finish(changes, failed)


def _finish(changes: list[Change], failed: list[str]) -> None:
    if changes:
        print_changes(changes)
    elif not failed:
        output.info("nothing to change")
    for line in failed:
        output.error(line)
    if failed:
        raise typer.Exit(1)


@webhooks_app.command("serve")
def serve_command(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on (0 picks a free one).")
    ] = (DEFAULT_PORT),
    host: Annotated[
        str, typer.Option(help="Address to listen on; keep loopback behind an HTTPS proxy.")
    ] = "127.0.0.1",
    load_after: Annotated[
        float,
        typer.Option(min=0, help="Seconds without a new delivery before a drain loads them."),
    ] = 10.0,
    load_within: Annotated[
        float,
        typer.Option(min=0, help="Most seconds a delivery waits for its drain while more come."),
    ] = 30.0,
    no_loads: Annotated[
        bool, typer.Option("--no-loads", help="Only keep deliveries; `load` drains them.")
    ] = False,
    no_marts: Annotated[
        bool,
        typer.Option(
            "--no-marts",
            help="Drains load raw only; the marts wait for the next `load` or `models`.",
        ),
    ] = False,
    tolerance: Annotated[
        float, typer.Option(min=1, help="Seconds a delivery's timestamp may be off this clock.")
    ] = DEFAULT_TOLERANCE_SECONDS,
    max_body_bytes: Annotated[
        int, typer.Option(min=1024, help="Largest delivery body read.")
    ] = DEFAULT_MAX_BODY_BYTES,
    request_seconds: Annotated[
        float,
        typer.Option(
            min=0.1, help="Seconds a connection has to send a whole request before it is closed."
        ),
    ] = DEFAULT_LIMITS.request_seconds,
    max_connections: Annotated[
        int,
        typer.Option(
            min=8,
            help="Open connections at most (fewer if `ulimit -n` is lower); past it the oldest "
            "idle ones are closed.",
        ),
    ] = DEFAULT_LIMITS.max_connections,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
    workspace: WorkspacesOption = None,
) -> None:
    """Receive webhook deliveries for every configured workspace at /<name>, keep them in the
    inbox beside the warehouse, and drain them into it. Prints each workspace's local URL."""
    from pipelines.webhooks.service import WebhookReceiver  # the drains' dlt: only here

    warehouse = warehouse_named(duckdb, destination)
    limits = replace(
        DEFAULT_LIMITS, request_seconds=request_seconds, max_connections=max_connections
    )
    settings = ReceiverSettings(host, port, tolerance, max_body_bytes, limits)
    try:
        receiver = WebhookReceiver(
            warehouse,
            _entries(workspace),
            settings,
            load_after=None if no_loads else load_after,
            load_within=load_within,
            marts=not no_marts,
        )
    except SigningEtlError as error:
        raise fail(str(error)) from None
    print_urls(receiver.urls())
    if no_loads:
        loads = "`signing-etl load` drains them"
    else:
        loads = f"a drain loads them {load_after:g} s after the last one arrived (at most "
        loads += f"{load_within:g} s after the first)"
        loads += "" if no_marts else ", then refreshes the marts"
    output.info(f"Deliveries are kept in {receiver.inbox.path}; {loads}. Ctrl-C stops.")
    stopped_by = receiver.run()
    if stopped_by is not None:
        output.info(f"stopped by {signal.Signals(stopped_by).name}")
        raise typer.Exit(SIGNAL_BASE + stopped_by)


@webhooks_app.command("status")
def status_command(
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    output_format: Annotated[
        str, typer.Option("--format", help="table, or json (one object a workspace).")
    ] = "table",
) -> None:
    """Deliveries accepted, duplicated and refused (and why) per workspace, what waits in the
    inbox and since when, and the last drain. Reads only the inbox, never the warehouse."""
    if output_format not in ("table", "json"):
        raise fail("--format must be table or json")
    folder = warehouse_named(duckdb).webhooks_dir
    try:
        inbox = Inbox.existing(folder)
        found = inbox.status() if inbox else {}
    except SigningEtlError as error:
        raise fail(str(error)) from None
    if inbox is None and output_format == "table":
        output.info(f"no webhook inbox at {folder} yet: `signing-etl webhooks serve` makes it")
        return
    print_inbox(found, output_format == "json")
