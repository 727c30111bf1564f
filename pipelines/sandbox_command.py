"""`signing-etl sandbox`: the local API served in the foreground, with the settings that point
the pipeline at it printed first (the single key's variables, or a `secrets.toml` of several
workspaces)."""

from __future__ import annotations

import sys
from dataclasses import replace

from pipelines import output
from pipelines.demo import DEMO_DELETE_RATE
from pipelines.errors import ConfigError
from sandbox import SandboxConfig, Store, bind, serve_forever


def serve(config: SandboxConfig, port: int, workspaces: int) -> None:
    """Serve `workspaces` workspaces of `config` on 127.0.0.1:`port` (0: a free one) until
    interrupted. Its activity deletes records now and then, as the demo's does.

    Raises:
        ConfigError: the port cannot be listened on (one line).
    """
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
