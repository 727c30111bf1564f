"""`signing-etl sandbox`: the local API served in the foreground, with the settings that point
the pipeline at it printed first (the single key's variables, or a `secrets.toml` of several
workspaces); and `signing-etl sandbox-advance`, which moves a running sandbox's clock so that
a trial sees a day of activity in seconds. The sandbox package is imported only when these
run: the other commands do without its start-up cost."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import httpx
import typer

from pipelines.console import output
from pipelines.demo import DEMO_DELETE_RATE
from pipelines.errors import ConfigError, SigningEtlError
from sources.signing import parse_iso

if TYPE_CHECKING:
    from sandbox import SandboxConfig, Store

PLANS = ("free", "starter", "pro", "business")
DEFAULT_PORT = 8787


def sandbox_command(
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0 picks a free one).")
    ] = DEFAULT_PORT,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic data.")] = 42,
    shipments: Annotated[
        int, typer.Option(min=0, help="Shipments of history per workspace (fewer load faster).")
    ] = 5_000,
    plan: Annotated[
        str, typer.Option(help=f"Plan whose limits apply: {', '.join(PLANS)}.")
    ] = "pro",
    order: Annotated[str, typer.Option(help="List order: asc or desc by updated_at.")] = "asc",
    start: Annotated[
        str | None, typer.Option(help="Sandbox clock start, ISO date (default: today, 00:00 UTC).")
    ] = None,
    no_limits: Annotated[
        bool, typer.Option("--no-limits", help="Answer every request: no rate or daily limits.")
    ] = False,
    workspaces: Annotated[
        int,
        typer.Option(
            min=1, max=20, help="Workspaces served, each with its own key and data; ids collide."
        ),
    ] = 1,
    new_personal_fields: Annotated[
        bool,
        typer.Option(
            "--new-personal-fields",
            help="Send fields the reference does not list: a contact's address and former "
            "e-mails, a recipient's mobile number, an audit actor's device and location.",
        ),
    ] = False,
    new_values_and_types: Annotated[
        bool,
        typer.Option(
            "--new-values-and-types",
            help="Send a recipient status the reference does not list (viewed) and view_count "
            "as text.",
        ),
    ] = False,
) -> None:
    """Serve the local sandbox of the signing API v1 until Ctrl-C."""
    from sandbox import PLAN_REQUESTS_PER_MINUTE, SandboxConfig

    if plan not in PLAN_REQUESTS_PER_MINUTE:
        raise typer.BadParameter(f"plan must be one of {', '.join(PLAN_REQUESTS_PER_MINUTE)}")
    if order not in ("asc", "desc"):
        raise typer.BadParameter("order must be asc or desc")
    config = SandboxConfig(
        seed=seed,
        shipments=shipments,
        plan=plan,
        order=order,  # type: ignore[arg-type]
        limits_enabled=not no_limits,
        new_personal_fields=new_personal_fields,
        new_values_and_types=new_values_and_types,
    )
    if start is not None:
        try:
            config.start_ms = int(parse_iso(start).timestamp() * 1000)  # naive means UTC
        except ValueError:
            raise typer.BadParameter("use an ISO 8601 date, e.g. 2026-01-01") from None
    try:
        serve(config, port, workspaces)
    except SigningEtlError as error:
        output.error(str(error))
        raise typer.Exit(1) from None


def serve(config: SandboxConfig, port: int, workspaces: int) -> None:
    """Serve `workspaces` workspaces of `config` on 127.0.0.1:`port` (0: a free one) until
    interrupted. Its activity deletes records now and then, as the demo's does.

    Raises:
        ConfigError: the port cannot be listened on (one line).
    """
    from sandbox import Store, bind, serve_forever

    try:
        sock = bind("127.0.0.1", port)
    except OSError as error:
        raise ConfigError(f"cannot listen on 127.0.0.1:{port}: {error.strerror}") from None
    port = sock.getsockname()[1]
    config = replace(config, delete_rate=DEMO_DELETE_RATE)
    output.info(f"Generating {config.shipments:,} shipments (seed {config.seed}) per workspace…")
    stores = [Store(c, position=n) for n, c in enumerate(config.workspaces(workspaces))]
    base_url = f"http://127.0.0.1:{port}/v1"
    print(f"Sandbox of the signing API v1 at {base_url}")
    _print_settings(base_url, stores)
    print(f"OpenAPI document: http://127.0.0.1:{port}/openapi.json; admin: /_sandbox/state")
    print(f"Move its clock a day ahead: signing-etl sandbox-advance --port {port} --days 1")
    print(
        f"Its activity (POST /_sandbox/advance) deletes {DEMO_DELETE_RATE:.1%} of each kind's "
        "records a simulated day (delete_rate; PATCH /_sandbox/config changes it)"
    )
    sys.stdout.flush()
    output.info("Ctrl-C stops it.")
    serve_forever(stores, sock)


def _print_settings(base_url: str, stores: list[Store]) -> None:
    """How to point the pipeline at the sandbox: variables for one key, or a secrets.toml."""
    if len(stores) == 1:
        key = stores[0].main_key.secret
        print(f"API key: {key}")
        print("Point the pipeline at it with:")
        print(f"  export SOURCES__SIGNING__BASE_URL={base_url}")
        print(f"  export SOURCES__SIGNING__API_KEY={key}")
        return
    print(f"{len(stores)} workspaces; load them all with this in .dlt/secrets.toml:")
    print(f'  [sources.signing]\n  base_url = "{base_url}"')
    for n, each in enumerate(stores, start=1):
        print(f"  [sources.signing.workspaces.w{n}]  # {each.workspace.id}")
        print(f'  api_key = "{each.main_key.secret}"')


def sandbox_advance_command(
    days: Annotated[float, typer.Option(min=0, help="Days to move the clock ahead.")] = 0,
    hours: Annotated[float, typer.Option(min=0, help="Hours to move the clock ahead.")] = 0,
    port: Annotated[int, typer.Option(help="Port of the running sandbox.")] = DEFAULT_PORT,
) -> None:
    """Move a running sandbox's clock ahead: its activity of that time happens at once (new
    shipments, opens, signatures, expiries), every workspace alike; the next load sees it."""
    if not days and not hours:
        raise typer.BadParameter("say how far: --days and/or --hours")
    root = f"http://127.0.0.1:{port}"
    try:
        answer = httpx.post(
            f"{root}/_sandbox/advance", json={"days": days, "hours": hours}, timeout=600
        )
        answer.raise_for_status()
        now = httpx.get(f"{root}/_sandbox/state", timeout=30).json()["now"]
    except (httpx.HTTPError, ValueError, KeyError) as error:
        output.error(
            f"no sandbox answered at {root} ({type(error).__name__}); start one with "
            f"`signing-etl sandbox --port {port}`"
        )
        raise typer.Exit(1) from None
    output.info(f"The sandbox's clock is now {now}")
