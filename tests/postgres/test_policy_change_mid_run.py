"""A privacy policy changed on a PostgreSQL warehouse by one host's load while another host's
run of another workspace reads the service. That run passed the privacy gate under the old
policy, and the load's rewrite brought every workspace's rows, its own included, under the new
one. Before, the run then wrote what it had read as the old policy left it: plaintext addresses
in a warehouse recorded as `minimal`. Now it asks the gate again inside its load step (which a
rewrite waits for), writes nothing and exits 75, and its next run reads it all again; a
webhook drain, the other path rows take, stops alike and leaves its deliveries waiting. The
truth is the sandbox's store and the documented keyed hash."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipelines.configuration import WorkspaceEntry
from pipelines.warehouse import Warehouse
from pipelines.webhooks.drain import DrainResult, drain
from pipelines.webhooks.inbox import Delivery, Inbox
from sandbox import RunningSandbox, SandboxConfig, Store
from tests.support import (
    POSTGRES_LOAD,
    START_MS,
    admin,
    describe,
    finish,
    problem_lines,
    run_cli,
    start_cli,
    workspaces_env,
)
from tests.support.postgres import PostgresDatabase, PostgresServer
from tests.support.privacy import (
    KEEP_WITH_KEY,
    MINIMAL,
    keyed_email,
    personal_data,
    postgres_contents,
    scan_tables,
)
from tests.support.sandboxes import holding, wait_until_held

pytestmark = pytest.mark.slow  # PostgreSQL, several loads

# The second workspace's run (or drain) passes the gate, and the sandbox then holds its next
# request unanswered (`holding`) until the first workspace's load has changed the policy.
POSTGRES = "postgres"


@dataclass
class TwoWorkspaces:
    """A sandbox of two workspaces (`first`, `second`), loaded under `keep` into a database of
    its own, and the environment a host's commands run with."""

    running: RunningSandbox
    database: PostgresDatabase
    keys: dict[str, str]
    env: dict[str, str]
    folder: Path

    @property
    def second(self) -> Store:
        return self.running.stores[1]

    def switch_first_to_minimal(self) -> None:
        """Another host's load of the first workspace, under `minimal`: it rewrites both."""
        switched = run_cli(
            [*POSTGRES_LOAD, "--workspace", "first"], cwd=self.folder, env={**self.env, **MINIMAL}
        )
        assert switched.returncode == 0, describe(switched)

    def plaintext_of_second(self) -> dict[str, set[str]]:
        """Per table, the second workspace's people's addresses found in plaintext."""
        people = personal_data(self.second)
        with closing(self.database.connect()) as connection:
            return scan_tables(postgres_contents(connection), people.emails)


@contextmanager
def two_workspaces_kept(server: PostgresServer, folder: Path, seed: int) -> Iterator[TwoWorkspaces]:
    config = SandboxConfig(seed=seed, shipments=12, start_ms=START_MS, limits_enabled=False)
    database = server.create_database()
    with RunningSandbox(*config.workspaces(2)) as running:
        keys = {"first": running.api_keys[0], "second": running.api_keys[1]}
        env = {
            **workspaces_env(running, keys),
            "DESTINATION__POSTGRES__CREDENTIALS": database.credentials,
        }
        kept = run_cli(POSTGRES_LOAD, cwd=folder, env={**env, **KEEP_WITH_KEY})
        assert kept.returncode == 0, describe(kept)
        yield TwoWorkspaces(running, database, keys, env, folder)


def test_a_run_that_read_under_the_old_policy_writes_nothing_and_its_next_run_reads_it_again(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    with two_workspaces_kept(postgres_server, tmp_path, seed=53) as world:
        running, database, env, second = world.running, world.database, world.env, world.second
        for entity in ("shipments", "contacts"):  # changed since: the next run reads them
            admin(
                running,
                "POST",
                f"/touch?workspace={second.workspace.id}",
                {"entity": entity, "count": 12},
            )

        # `/me`, then the lists: past the gate; its next request waits until the policy changed.
        with holding(running, second.workspace.id, after=3):
            reading = start_cli(
                [*POSTGRES_LOAD, "--workspace", "second"],
                cwd=tmp_path,
                env={**env, **KEEP_WITH_KEY},
            )
            wait_until_held(running, second.workspace.id, lambda: reading.poll() is None)
            world.switch_first_to_minimal()
            assert reading.poll() is None, "the run ended before the policy changed: nothing tested"
        stopped = finish(reading, timeout=300)

        assert world.plaintext_of_second() == {}  # neither raw nor dlt's staging took it
        assert stopped.returncode == 75, describe(stopped)
        (line,) = problem_lines(stopped.stderr)  # a stop, tried again later: one warning
        assert "stopped early" in line
        assert "privacy policy changed while this run read the service" in line

        again = run_cli(
            [*POSTGRES_LOAD, "--workspace", "second"], cwd=tmp_path, env={**env, **MINIMAL}
        )
        assert again.returncode == 0, describe(again)
        with second.lock:
            contacts = {c.id: keyed_email(c.email) for c in second.contacts.by_id.values()}
            shipments = set(second.shipments.by_id)
        plaintext = world.plaintext_of_second()

    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute(
            "select id, email from raw.contacts where workspace_id = %s",
            (second.workspace.id,),
        )
        stored_contacts = dict(cursor.fetchall())
        cursor.execute(
            "select id from raw.shipments where workspace_id = %s and _deleted_at is null",
            (second.workspace.id,),
        )
        stored_shipments = {row[0] for row in cursor.fetchall()}
    assert plaintext == {}
    assert stored_contacts == contacts  # each read again, and hashed once
    assert stored_shipments == shipments  # nothing the stopped run read is missing


def test_a_drain_that_read_under_the_old_policy_writes_nothing_and_its_deliveries_wait(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race on the receiver's path: a drain of one workspace reads the shipments its
    deliveries name while another host's load changes the policy. Rows a drain reads again
    replace the rewritten ones, so before, the hashed addresses went back to plaintext."""
    with two_workspaces_kept(postgres_server, tmp_path, seed=59) as world:
        running, database, env, second = world.running, world.database, world.env, world.second
        keys = world.keys
        # The receiver's process: the database, and its own settings from before the change.
        for name, value in {**KEEP_WITH_KEY, **env}.items():
            if name.startswith(("DESTINATION__", "SOURCES__SIGNING__PRIVACY__")):
                monkeypatch.setenv(name, value)
        warehouse = Warehouse.at(tmp_path / "warehouse" / "signing.duckdb", POSTGRES)
        inbox = Inbox.open(warehouse.webhooks_dir)
        with second.lock:
            named = sorted(second.shipments.by_id)[:8]
        for n, shipment_id in enumerate(named):
            sent = ("shipment.sent", "shipments", shipment_id)
            inbox.accept(Delivery("second", f"dlv_{n}", second.workspace.id, *sent))
        entry = WorkspaceEntry("second", running.base_url, keys["second"])
        drains: list[DrainResult] = []

        def drain_all() -> None:  # /me, then each shipment with its trail and fields
            drains.extend(drain(warehouse, [entry], inbox, hold_seconds=120))

        reading = threading.Thread(target=drain_all)
        try:
            # `/me`, then the shipments: past the gate; the next waits until the policy changed.
            with holding(running, second.workspace.id, after=3):
                reading.start()
                wait_until_held(running, second.workspace.id, reading.is_alive)
                world.switch_first_to_minimal()
                assert reading.is_alive(), (
                    "the drain ended before the policy changed: nothing tested"
                )
        finally:
            reading.join(timeout=300)

        assert world.plaintext_of_second() == {}
        (stopped,) = drains
        assert stopped.outcome == "stopped", stopped.line()
        assert "privacy policy changed while this run read the service" in str(stopped.reason)
        assert len(inbox.waiting("second", 100)) == len(named)  # each waits for the next drain

        (again,) = drain(warehouse, [entry], inbox)
        assert again.outcome == "completed", again.line()
        assert inbox.waiting("second", 100) == []
        with second.lock:
            recipients = {
                (shipment_id, keyed_email(recipient.email))
                for shipment_id in named
                for recipient in second.shipments.by_id[shipment_id].recipients
            }
        inbox.close()
        plaintext = world.plaintext_of_second()

    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute(
            "select s.id, r.email from raw.shipments s join raw.shipments__recipients r "
            "on r._dlt_parent_id = s._dlt_id where s.workspace_id = %s and s.id = any(%s)",
            (second.workspace.id, named),
        )
        stored = set(cursor.fetchall())
    assert plaintext == {}
    assert stored == recipients  # read again by the next drain, and hashed once
