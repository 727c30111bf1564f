"""A privacy policy changed on a PostgreSQL warehouse by loads running side by side: each load
plans the rewrite of every workspace's rows, and only one may carry it out. Before, each did,
and a hashed address was hashed again, once per load: `forget` could then find no one by their
address. The truth is the sandbox's store and the documented keyed hash."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from sandbox import RunningSandbox, SandboxConfig
from tests.support import POSTGRES_LOAD, START_MS, describe, run_cli, workspaces_env
from tests.support.postgres import PostgresServer
from tests.support.privacy import KEEP_WITH_KEY, MINIMAL, keyed_email

pytestmark = pytest.mark.slow  # three workspaces loaded twice into PostgreSQL

WORKSPACES = 3


def test_loads_side_by_side_that_change_the_policy_hash_each_address_once(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    config = SandboxConfig(seed=47, shipments=15, start_ms=START_MS, limits_enabled=False)
    database = postgres_server.create_database()
    with RunningSandbox(*config.workspaces(WORKSPACES)) as running:
        keys = {f"w{n}": key for n, key in enumerate(running.api_keys)}
        env = {
            **workspaces_env(running, keys),
            "DESTINATION__POSTGRES__CREDENTIALS": database.credentials,
        }
        kept = run_cli(POSTGRES_LOAD, cwd=tmp_path, env={**env, **KEEP_WITH_KEY})
        assert kept.returncode == 0, describe(kept)
        parallel = [*POSTGRES_LOAD, "--parallel", str(WORKSPACES)]
        switched = run_cli(parallel, cwd=tmp_path, env={**env, **MINIMAL})
        assert switched.returncode == 0, describe(switched)
        expected = {
            (store.workspace.id, contact.id): keyed_email(contact.email)
            for store in running.stores
            for contact in store.contacts.by_id.values()
        }

    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("select workspace_id, id, email from raw.contacts")
        stored = {(workspace, contact): email for workspace, contact, email in cursor.fetchall()}
    assert stored == expected
