"""The models on a real PostgreSQL server, built from the same source as on DuckDB.

One sandbox is loaded over real HTTP into a Postgres database and into a DuckDB file, by the
library (`load_incremental`, `build_models`), and the models are built on each. Then: the raw
tables on Postgres equal the sandbox (read there, through psycopg2), the marts equal the
numbers computed from the sandbox's records, and every mart's rows on Postgres equal those on
DuckDB. Again after the sandbox's clock has moved on and both have loaded incrementally.

The Postgres side is set up the way a real server is likely to be and the throwaway one is not:
a role of its own whose password must not reach dbt's files, credentials given to dlt field by
field rather than as one URL, and a session time zone far from UTC with daylight saving time
(weeks and durations must still be cut in UTC).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import pytest
from psycopg2 import sql

from pipelines.errors import ModelsError
from pipelines.load.run import LoadResult, load_incremental
from pipelines.modeling.build import ModelsResult, build_models, dbt_dir_for
from pipelines.report.notebook import snapshot_marts
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox, SandboxConfig
from tests.models.test_marts import assert_marts_match
from tests.support import MARTS, MODELS_BUILT, START_MS, admin, differences, fast
from tests.support.postgres import PostgresDatabase, PostgresServer
from tests.support.truth import postgres_differences

pytestmark = pytest.mark.slow  # dbt builds of the models on a PostgreSQL server

ROLE = "signing_loader"
PASSWORD = "Pg-s3cret/with@odd:chars"  # must never appear in dbt's logs or artifacts
SESSION_TIME_ZONE = "America/Los_Angeles"  # UTC-8, UTC-7 in summer

Rows = list[tuple[Any, ...]]


@dataclass
class Twins:
    """One sandbox loaded into a Postgres database and into a DuckDB file."""

    running: RunningSandbox
    database: PostgresDatabase
    postgres_warehouse: Path  # only dlt's and dbt's working folders live beside it
    duckdb_warehouse: Path
    timings: list[str] = field(default_factory=list)

    @property
    def postgres_place(self) -> Warehouse:
        return Warehouse.at(self.postgres_warehouse, "postgres")

    def load_and_build(self, label: str) -> None:
        """Load both sides (timed), then build the models on both; everything must pass."""
        for destination, warehouse in (
            ("postgres", self.postgres_warehouse),
            ("duckdb", self.duckdb_warehouse),
        ):
            began = time.monotonic()
            place = Warehouse.at(warehouse, destination)
            loaded = load_incremental(
                place,
                settings=fast(self.running),
            )
            seconds = time.monotonic() - began
            assert loaded.exit_code == 0, loaded.stopped
            built = build_models(place)
            assert built.success, built.summary
            assert built.models_passed == MODELS_BUILT, built.summary
            self.timings.append(_timing(label, destination, loaded, seconds, built))
        print("\n".join(self.timings[-2:]), flush=True)


def _timing(
    label: str, destination: str, loaded: LoadResult, seconds: float, built: ModelsResult
) -> str:
    steps = ", ".join(f"{step} {s:.1f} s" for step, s in loaded.step_seconds.items())
    return (
        f"{label} {destination:8}: load {seconds:5.1f} s ({steps}; "
        f"{sum(loaded.rows.values()):,} rows), dbt build {built.seconds:5.1f} s "
        f"({built.models_passed} models, {built.tests_passed} tests passed, "
        f"{built.tests_warned} warned)"
    )


@pytest.fixture(scope="module")
def twins(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Twins]:
    database = _own_database(postgres_server)
    folder = tmp_path_factory.mktemp("models_postgres")
    config = SandboxConfig(seed=23, shipments=200, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(config) as running, pytest.MonkeyPatch.context() as env:
        # dlt's documented credentials, one field at a time; the models take the same ones.
        for name, value in {
            "HOST": database.host,
            "PORT": str(database.port),
            "USERNAME": database.user,
            "PASSWORD": database.password,
            "DATABASE": database.name,
        }.items():
            env.setenv(f"DESTINATION__POSTGRES__CREDENTIALS__{name}", value)
        twins = Twins(
            running, database, folder / "postgres" / "signing.duckdb", folder / "signing.duckdb"
        )
        twins.load_and_build("first load")
        yield twins


def _own_database(server: PostgresServer) -> PostgresDatabase:
    """A new database owned by a role of its own, whose sessions run in a DST time zone."""
    database = server.create_database()
    with closing(server.database().connect()) as connection:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL("create role {} login password {}").format(
                    sql.Identifier(ROLE), sql.Literal(PASSWORD)
                )
            )
            for statement in (
                "alter database {} owner to {}",
                "alter database {} set timezone to " + f"'{SESSION_TIME_ZONE}'",
            ):
                cursor.execute(
                    sql.SQL(statement).format(sql.Identifier(database.name), sql.Identifier(ROLE))
                )
    return PostgresDatabase(database.name, database.host, database.port, ROLE, PASSWORD)


def _url(database: PostgresDatabase, query: str) -> str:
    """The database's connection string, password escaped, with `query` options."""
    password = quote(database.password, safe="")
    return (
        f"postgresql://{database.user}:{password}@{database.host}:{database.port}/"
        f"{database.name}?{query}"
    )


# ---------------------------------------------------------------------- comparisons


def _plain(value: Any) -> Any:
    """One comparable form of a value read from either warehouse."""
    if isinstance(value, float | Decimal):
        return round(float(value), 6)
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return value


def _postgres_marts(database: PostgresDatabase) -> dict[str, tuple[list[str], Rows]]:
    found: dict[str, tuple[list[str], Rows]] = {}
    with closing(database.connect()) as connection, connection.cursor() as cursor:
        for mart in MARTS:
            cursor.execute(f"select * from marts.{mart}")
            names = [column[0] for column in cursor.description or []]
            found[mart] = (names, [tuple(row) for row in cursor.fetchall()])
    return found


def _duckdb_marts(warehouse: Path) -> dict[str, tuple[list[str], Rows]]:
    found: dict[str, tuple[list[str], Rows]] = {}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        for mart in MARTS:
            cursor = connection.execute(f"select * from marts.{mart}")
            names = [column[0] for column in cursor.description or []]
            found[mart] = (names, cursor.fetchall())
    return found


def _comparable(rows: Rows) -> list[tuple[Any, ...]]:
    return sorted((tuple(_plain(v) for v in row) for row in rows), key=repr)


def assert_same_marts(twins: Twins) -> None:
    """Every mart has the same columns and the same rows on both sides (floats to 6 places,
    timestamps as instants)."""
    on_postgres, on_duckdb = _postgres_marts(twins.database), _duckdb_marts(twins.duckdb_warehouse)
    for mart in MARTS:
        (pg_names, pg_rows), (dd_names, dd_rows) = on_postgres[mart], on_duckdb[mart]
        assert pg_names == dd_names, mart
        assert len(pg_rows) == len(dd_rows), mart
        pg, dd = _comparable(pg_rows), _comparable(dd_rows)
        differing = [(p, d) for p, d in zip(pg, dd, strict=True) if p != d]
        assert not differing, f"{mart}: {len(differing)} rows differ, e.g. {differing[:2]}"
    assert any(rows for _, rows in on_postgres.values())


def assert_postgres_equals_the_sandbox(twins: Twins, folder: Path) -> None:
    store = twins.running.store
    with closing(twins.database.connect()) as connection:
        assert postgres_differences(connection, store) == {}
    assert differences(twins.duckdb_warehouse, store) == {}
    snapshot = snapshot_marts(twins.postgres_place, folder / "postgres_marts.duckdb")
    try:
        assert_marts_match(snapshot, store)
    finally:
        snapshot.unlink()


# ---------------------------------------------------------------------- tests


def test_postgres_raw_tables_and_marts_equal_the_sandbox(twins: Twins, tmp_path: Path) -> None:
    assert_postgres_equals_the_sandbox(twins, tmp_path)


def test_marts_on_postgres_equal_the_marts_on_duckdb(twins: Twins) -> None:
    assert_same_marts(twins)
    # Weeks are UTC Mondays whatever the session's time zone.
    with closing(twins.database.connect()) as connection, connection.cursor() as cursor:
        cursor.execute("show timezone")
        assert cursor.fetchone() == (SESSION_TIME_ZONE,)
        cursor.execute("select distinct sent_week from marts.fct_signing_funnel")
        weeks = [week for (week,) in cursor.fetchall()]
    assert weeks
    assert all(isinstance(week, date) and week.weekday() == 0 for week in weeks)


def test_after_the_clock_advances_an_incremental_load_makes_them_equal_again(
    twins: Twins, tmp_path: Path
) -> None:
    before = len(twins.running.store.shipments.by_id)
    admin(twins.running, "POST", "/advance", {"hours": 12})
    assert len(twins.running.store.shipments.by_id) > before
    twins.load_and_build("after 12 h")
    assert_postgres_equals_the_sandbox(twins, tmp_path)
    assert_same_marts(twins)


def test_models_on_postgres_without_credentials_fail_in_one_line(
    twins: Twins, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HOST", "PORT", "USERNAME", "PASSWORD", "DATABASE"):
        monkeypatch.delenv(f"DESTINATION__POSTGRES__CREDENTIALS__{name}")
    with pytest.raises(ModelsError, match="DESTINATION__POSTGRES__CREDENTIALS") as refused:
        build_models(twins.postgres_place)
    assert "\n" not in str(refused.value)
    monkeypatch.setenv("DESTINATION__POSTGRES__CREDENTIALS", "not a connection string")
    with pytest.raises(ModelsError, match="postgresql://") as refused:
        build_models(twins.postgres_place)
    assert "\n" not in str(refused.value)
    with pytest.raises(ModelsError, match="bigquery"):
        build_models(Warehouse.at(twins.postgres_warehouse, "bigquery"))


def test_the_connection_string_options_reach_dbt(
    twins: Twins, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The test server speaks no TLS: `sslmode=require` fails only if dbt's connection got it.
    monkeypatch.setenv(
        "DESTINATION__POSTGRES__CREDENTIALS", _url(twins.database, "sslmode=require")
    )
    for name in ("HOST", "PORT", "USERNAME", "PASSWORD", "DATABASE"):
        monkeypatch.delenv(f"DESTINATION__POSTGRES__CREDENTIALS__{name}")
    refused = build_models(twins.postgres_place, select="stg_signing__workspaces")
    assert not refused.success
    assert "SSL" in (refused.first_error or ""), refused.summary
    monkeypatch.setenv(
        "DESTINATION__POSTGRES__CREDENTIALS", _url(twins.database, "sslmode=disable")
    )
    built = build_models(twins.postgres_place, select="stg_signing__workspaces")
    assert built.success, built.summary
    assert PASSWORD not in built.summary
    monkeypatch.setenv("DESTINATION__POSTGRES__CREDENTIALS", _url(twins.database, "fancy=1"))
    with pytest.raises(ModelsError, match="'fancy' is not passed on to dbt"):
        build_models(twins.postgres_place)


def test_the_password_reaches_no_file_of_dbt(twins: Twins) -> None:
    # Last in the module: every build above, failed ones included, wrote into this folder.
    written = [
        path
        for path in dbt_dir_for(twins.postgres_warehouse).rglob("*")
        if path.is_file() and PASSWORD.encode() in path.read_bytes()
    ]
    assert written == []
    assert (dbt_dir_for(twins.postgres_warehouse) / "logs" / "dbt.log").stat().st_size > 0
