"""What each model build leaves where `status` reads it: one row per `dbt build` in
`raw._signing_model_builds` (when, whether it succeeded, the models and tests that failed and
the tests that warned, by name), written by `build.recorded_build`, the one place every build
goes through (`load`, `models`, `forget`, the demo, Dagster's model assets).

A failed build is also kept in a journal beside the warehouse (`model_builds.jsonl` in its
working folder): on the DuckDB default a failed run is not published, so its row in the
working file would stay out of the analysts' copy that `status` reads until the next success;
and a build that could not write the warehouse at all is still on record. `status` takes the
newest build of both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from pipelines.errors import WarehouseError
from pipelines.warehouse import SqlClient, Warehouse, ensure_table, insert_rows, transaction

BUILDS_TABLE = "_signing_model_builds"
BUILD_COLUMNS = {
    "build_id": "varchar",
    "started_at": "timestamp with time zone",
    "finished_at": "timestamp with time zone",
    "success": "boolean",
    "models_built": "bigint",
    "models_errored": "bigint",
    "tests_passed": "bigint",
    "tests_warned": "bigint",
    "tests_errored": "bigint",
    "errored": "varchar",
    "warned": "varchar",
    "first_error": "varchar",
}
BUILDS_JOURNAL = "model_builds.jsonl"
_LISTS = ("errored", "warned")
_TIMES = ("started_at", "finished_at")


def new_build_id() -> str:
    """A build's id, as a run's (`RunControl.run_id`): 12 hex digits."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class ModelBuild:
    """One `dbt build` as `status` shows it."""

    build_id: str
    started_at: datetime
    finished_at: datetime
    success: bool
    models_built: int = 0
    models_errored: int = 0
    tests_passed: int = 0
    tests_warned: int = 0
    tests_errored: int = 0
    errored: list[str] = field(default_factory=list)  # models and tests that failed, by name
    warned: list[str] = field(default_factory=list)  # tests that warned, by name
    first_error: str | None = None

    def to_row(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        for name in _LISTS:
            row[name] = orjson.dumps(row[name]).decode()
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ModelBuild:
        values = {k: v for k, v in row.items() if k in BUILD_COLUMNS}
        for name in _LISTS:
            values[name] = orjson.loads(values.get(name) or "[]")
        for name in _TIMES:
            if isinstance(values.get(name), str):
                values[name] = datetime.fromisoformat(values[name])
        return cls(**values)


def record_build(warehouse: Warehouse, build: ModelBuild, *, held: bool = True) -> None:
    """Keep `build` in the warehouse and, when it failed or the warehouse would not take it,
    in the journal (only there when the run does not hold the warehouse: `held` false, a
    build refused before it took it). Recording never fails the command: the build's own
    outcome is what it reports. A warehouse never loaded (a typo'd path) gets nothing: no
    file is made for it."""
    if not warehouse.loaded_before():
        return
    written = False
    with contextlib.suppress(Exception), _held_client(warehouse, held) as client:
        transaction(client, "recording the model build", lambda: _insert_build(client, build))
        written = True
    if not written or not build.success:
        warehouse.journal(BUILDS_JOURNAL, build.to_row())


# Why the marts are missing after a privacy change or an erasure dropped them, until a build.
MARTS_DROPPED = (
    "the marts were dropped with the rows they copied (a privacy policy change or an erasure); "
    "the next model build makes them again (signing-etl models)"
)


def record_marts_dropped(client: Any) -> None:
    """Record, in the transaction of `client` that dropped the marts, that they are gone: a
    build that did not succeed, so `status` and `--check` say the marts lag until a build
    makes them again, whichever path dropped them and whether or not it built after."""
    now = datetime.now(UTC)
    _insert_build(client, ModelBuild(new_build_id(), now, now, False, first_error=MARTS_DROPPED))


def _insert_build(client: Any, build: ModelBuild) -> None:
    """`build` as one row of the builds' table (made or widened first), in the caller's
    transaction."""
    table = ensure_table(client, BUILDS_TABLE, BUILD_COLUMNS)
    row = build.to_row()
    insert_rows(client, table.name, list(row), [list(row.values())])


@contextlib.contextmanager
def _held_client(warehouse: Warehouse, held: bool) -> Iterator[Any]:
    """dlt's SQL client of the warehouse the run holds; none (an error, so the record goes
    to the journal) when it does not hold it: a DuckDB file's working copy is the held run's."""
    if not held and warehouse.is_file:
        raise WarehouseError("the warehouse is not held by this build")
    with warehouse.sql_client() as client:
        yield client


def built_before(warehouse: Warehouse) -> bool:
    """Whether a model build ever succeeded on the warehouse (its marts exist), read from what
    readers read (a DuckDB file's published copy), so it needs no hold of the warehouse."""
    if not warehouse.loaded_before():
        return False
    with contextlib.suppress(Exception), warehouse.reader() as client:
        table = client.make_qualified_table_name(BUILDS_TABLE)
        return bool(client.execute_sql(f"select 1 from {table} where success limit 1"))
    return False


def last_build(
    client: SqlClient, columns: dict[str, set[str]], journaled: list[ModelBuild]
) -> ModelBuild | None:
    """The newest build recorded in the warehouse or in the journal (None: never built)."""
    builds = list(journaled)
    if BUILDS_TABLE in columns:
        names = sorted(columns[BUILDS_TABLE] & set(BUILD_COLUMNS))
        table = client.make_qualified_table_name(BUILDS_TABLE)
        rows = client.execute_sql(
            f"select {', '.join(names)} from {table} order by finished_at desc limit 1"
        )
        builds += [ModelBuild.from_row(dict(zip(names, row, strict=True))) for row in rows or []]
    return max(builds, key=lambda build: build.finished_at, default=None)


def journaled_builds(warehouse: Warehouse) -> list[ModelBuild]:
    """The builds in the journal beside the warehouse (a line that cannot be read is skipped)."""
    builds = []
    for row in warehouse.journaled(BUILDS_JOURNAL):
        with contextlib.suppress(orjson.JSONDecodeError, TypeError, ValueError):
            builds.append(ModelBuild.from_row(row))
    return builds
