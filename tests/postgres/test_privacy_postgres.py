"""The privacy policy and erasure on a real PostgreSQL server, through the CLI, over real HTTP
against a sandbox: under `minimal` no personal value of the sandbox is in any table of the
database (dlt's staging and state included), dbt's folder, the logs or the report, and the marts
equal those under `keep`; switching a loaded database to `minimal` rewrites what is there;
`forget` clears one person and a full reload does not bring them back; dbt's snapshots follow
both."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from psycopg2 import sql

from pipelines.warehouse import Warehouse, staging_dataset
from sandbox import RunningSandbox, SandboxConfig
from tests.support import START_MS, cli_env, describe, run_cli
from tests.support.postgres import PostgresDatabase, PostgresServer
from tests.support.privacy import (
    COMPARED_MARTS,
    HASH_KEY,
    MINIMAL,
    PERSONAL_MART_COLUMNS,
    found_in,
    keyed_email,
    personal_data,
    postgres_contents,
    scan_files,
    scan_tables,
)

# About three minutes: a Postgres server, two policies loaded and modelled, a switch, forget.
pytestmark = pytest.mark.slow


@dataclass
class OnPostgres:
    running: RunningSandbox
    server: PostgresServer
    folder: Path
    keep: PostgresDatabase
    minimal: PostgresDatabase
    output: str

    def cli(self, database: PostgresDatabase, *args: str, **privacy: str) -> Any:
        env = {
            **cli_env(self.running),
            "DESTINATION__POSTGRES__CREDENTIALS": database.credentials,
            **privacy,
        }
        place = ["--destination", "postgres", "--duckdb", str(self.folder / "pg.duckdb")]
        return run_cli([*args, *place], cwd=self.folder, env=env, timeout=400)


@pytest.fixture(scope="module")
def on_postgres(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OnPostgres]:
    config = SandboxConfig(seed=43, shipments=60, start_ms=START_MS, limits_enabled=False)
    folder = tmp_path_factory.mktemp("privacy_postgres")
    with RunningSandbox(config) as running:
        world = OnPostgres(
            running,
            postgres_server,
            folder,
            postgres_server.create_database(),
            postgres_server.create_database(),
            "",
        )
        assert world.cli(world.keep, "load").returncode == 0
        outputs = []
        for args in (
            ("--log-format", "json", "load"),
            ("load", "--full-refresh"),
            ("status",),
            ("report", "--out", str(folder / "reports")),
        ):
            result = world.cli(world.minimal, *args, **MINIMAL)
            assert result.returncode == 0, describe(result)
            outputs.append(result.stdout + result.stderr)
        world.output = "\n".join(outputs)
        yield world


def copy_of(server: PostgresServer, database: PostgresDatabase) -> PostgresDatabase:
    """A new database that is `database` as it is now (PostgreSQL's own template copy): a
    loaded database for a test that changes it, without loading and modelling it again."""
    copy = server.database(f"{database.name}_copy")
    with closing(server.database().connect()) as admin:
        admin.autocommit = True
        with admin.cursor() as cursor:
            cursor.execute(
                sql.SQL("create database {} template {}").format(
                    sql.Identifier(copy.name), sql.Identifier(database.name)
                )
            )
    return copy


def contents(database: PostgresDatabase) -> dict[str, str]:
    with closing(database.connect()) as connection:
        return postgres_contents(connection)


def test_minimal_leaves_no_personal_value_in_postgres_dbt_logs_or_report(
    on_postgres: OnPostgres,
) -> None:
    personal = personal_data(on_postgres.running.store)
    needles = personal.all() | {HASH_KEY}
    assert scan_tables(contents(on_postgres.keep), personal.emails)  # the scan finds them
    found = contents(on_postgres.minimal)
    # The scan reaches the workspace's own staging dataset (dlt's copies of the last merge).
    staging = staging_dataset("raw", on_postgres.running.store.workspace.id)
    assert f"{staging}.contacts" in found
    assert "raw._dlt_pipeline_state" in found
    assert scan_tables(found, needles) == {}
    place = Warehouse.at(on_postgres.folder / "pg.duckdb", "postgres")
    assert (place.dbt_dir / "target").exists()
    assert scan_files(place.dbt_dir, needles) == {}
    assert list((on_postgres.folder / "reports").glob("*.html"))
    assert scan_files(on_postgres.folder / "reports", needles) == {}
    assert '"level"' in on_postgres.output
    assert found_in(on_postgres.output, needles) == set()
    assert "Privacy policy: minimal, hash key " in on_postgres.output


def _plain(value: Any) -> Any:
    if isinstance(value, float | Decimal):
        return round(float(value), 6)
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return value


def marts(database: PostgresDatabase) -> dict[str, list[tuple[Any, ...]]]:
    """Each mart's rows without its personal columns, comparable."""
    found = {}
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        for mart in COMPARED_MARTS:
            cursor.execute(f"select * from marts.{mart}")
            names = [column[0] for column in cursor.description or []]
            kept = [i for i, name in enumerate(names) if name not in PERSONAL_MART_COLUMNS]
            rows = [tuple(_plain(row[i]) for i in kept) for row in cursor.fetchall()]
            found[mart] = sorted(rows, key=repr)
    return found


def test_the_marts_under_minimal_equal_the_marts_under_keep_on_postgres(
    on_postgres: OnPostgres,
) -> None:
    under_keep, under_minimal = marts(on_postgres.keep), marts(on_postgres.minimal)
    for mart in COMPARED_MARTS:
        assert under_keep[mart], mart
        assert under_minimal[mart] == under_keep[mart], mart


def test_switching_to_minimal_then_forgetting_on_postgres(on_postgres: OnPostgres) -> None:
    # The database `keep` is, loaded (and modelled) under keep by the fixture, copied: the
    # same CLI run on the same sandbox, which nothing has changed since.
    database = copy_of(on_postgres.server, on_postgres.keep)
    store = on_postgres.running.store
    personal = personal_data(store)
    history = {t: text for t, text in contents(database).items() if t.startswith("snapshots.")}
    assert len(history) == 3
    assert set(scan_tables(history, personal.emails)) == set(history)  # plaintext under keep
    switched = on_postgres.cli(database, "load", **MINIMAL)
    assert switched.returncode == 0, describe(switched)  # dbt's tests: no duplicate version
    found = contents(database)
    assert history.keys() <= found.keys()
    assert scan_tables(found, personal.all()) == {}
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("select id, email from raw.contacts")
        stored = dict(cursor.fetchall())
    assert stored == {c.id: keyed_email(c.email) for c in store.contacts.by_id.values()}
    contact = sorted(store.contacts.by_id.values(), key=lambda c: c.id)[0]
    forgot = on_postgres.cli(database, "forget", "--email", contact.email, **MINIMAL)
    assert forgot.returncode == 0, describe(forgot)
    for step in ((), ("--full-refresh",)):
        again = on_postgres.cli(database, "load", *step, **MINIMAL)
        assert again.returncode == 0, describe(again)
        found = contents(database)
        record = found.pop("raw._signing_erasures")
        assert found_in(record, {keyed_email(contact.email)}) == {keyed_email(contact.email)}
        assert scan_tables(found, {keyed_email(contact.email)}) == {}
        with closing(database.connect()) as connection, connection.cursor() as cursor:
            cursor.execute("select count(*) from raw.contacts where id = %s", [contact.id])
            assert cursor.fetchone() == (0,)
            cursor.execute(
                "select count(*), count(contact_email), count(contact_name) "
                "from snapshots.snp_signing__contacts where contact_id = %s",
                [contact.id],
            )
            versions, emails, names = cursor.fetchone() or (0, 0, 0)
            assert versions >= 1  # the versions stay, the person goes
            assert (emails, names) == (0, 0)
