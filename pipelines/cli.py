"""`signing-etl`: the command line. It parses options and calls scenario functions; the
work itself lives in `sandbox` and the pipeline modules."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated

import typer

from sandbox import PLAN_REQUESTS_PER_MINUTE, SandboxConfig, Store, bind, serve_forever

app = typer.Typer(
    help="Load an electronic signing service into an analytics warehouse.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """Load an electronic signing service into an analytics warehouse."""


def _parse_start(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter("use an ISO 8601 date, e.g. 2026-01-01") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@app.command()
def sandbox(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0 picks a free one).")] = 8787,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic data.")] = 42,
    shipments: Annotated[int, typer.Option(min=0, help="Shipments of history.")] = 5_000,
    plan: Annotated[
        str, typer.Option(help=f"Plan whose limits apply: {', '.join(PLAN_REQUESTS_PER_MINUTE)}.")
    ] = "pro",
    order: Annotated[str, typer.Option(help="List order: asc or desc by updated_at.")] = "asc",
    start: Annotated[
        str | None, typer.Option(help="Sandbox clock start, ISO date (default: today, 00:00 UTC).")
    ] = None,
) -> None:
    """Serve the local sandbox of the signing API v1 until Ctrl-C."""
    if plan not in PLAN_REQUESTS_PER_MINUTE:
        raise typer.BadParameter(f"plan must be one of {', '.join(PLAN_REQUESTS_PER_MINUTE)}")
    if order not in ("asc", "desc"):
        raise typer.BadParameter("order must be asc or desc")
    config = SandboxConfig(seed=seed, shipments=shipments, plan=plan, order=order)  # type: ignore[arg-type]
    start_ms = _parse_start(start)
    if start_ms is not None:
        config.start_ms = start_ms
    try:
        sock = bind("127.0.0.1", port)
    except OSError as error:
        typer.echo(f"error: cannot listen on 127.0.0.1:{port}: {error.strerror}", err=True)
        raise typer.Exit(1) from None
    port = sock.getsockname()[1]
    typer.echo(f"Generating {shipments:,} shipments (seed {seed})…", err=True)
    store = Store(config)
    base_url = f"http://127.0.0.1:{port}/v1"
    typer.echo(f"Sandbox of the signing API v1 at {base_url}")
    typer.echo(f"API key: {store.main_key.secret}")
    typer.echo("Point the pipeline at it with:")
    typer.echo(f"  export SOURCES__SIGNING__BASE_URL={base_url}")
    typer.echo(f"  export SOURCES__SIGNING__API_KEY={store.main_key.secret}")
    sys.stdout.flush()
    typer.echo(f"OpenAPI document: http://127.0.0.1:{port}/openapi.json; admin: /_sandbox/state")
    typer.echo("Ctrl-C stops it.", err=True)
    serve_forever(store, sock)


if __name__ == "__main__":
    app()
