"""`signing-etl metrics` on two workspaces with colliding ids, loaded over real HTTP into a
DuckDB file and into a real PostgreSQL database, with the models built on each: the metrics
equal the sandbox's own records for every week and workspace on both engines, the two engines
give equal tables, the marts' hand-written figures equal the metrics, a dimension left empty
groups its shipments under null, and names the semantic layer does not define are refused in
one line (exit 2) before any SQL is written."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.load.run import load_incremental
from pipelines.metrics.semantic import MetricsRequest, MetricsTable, query_metrics
from pipelines.modeling.build import build_models
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox
from tests.models.workspaces import SHARED_SEED, colliding_workspaces, shared_workspaces
from tests.support import MODELS_BUILT, cli_env, describe, error_lines, fast, run_cli
from tests.support.funnel import first_sent, funnel_by_period
from tests.support.postgres import PostgresDatabase, PostgresServer

pytestmark = pytest.mark.slow  # dbt builds of the models, on DuckDB and PostgreSQL

ALL_METRICS = (
    "sent",
    "delivered",
    "opened",
    "signed",
    "completed",
    "expired",
    "revoked",
    "completion_rate",
    "median_hours_to_sign",
    "waiting_now",
    "signers_waiting_now",
)


@dataclass
class Loaded:
    """One sandbox of two workspaces loaded into a DuckDB file and a Postgres database."""

    running: RunningSandbox
    duckdb_file: Path
    postgres_file: Path  # only dlt's and dbt's working folders live beside it
    database: PostgresDatabase
    folder: Path

    def place(self, destination: str) -> Warehouse:
        path = self.duckdb_file if destination == "duckdb" else self.postgres_file
        return Warehouse.at(path, destination)

    def env(self) -> dict[str, str]:
        return {**cli_env(None), "DESTINATION__POSTGRES__CREDENTIALS": self.database.credentials}

    def cli(self, destination: str, *args: str) -> Any:
        path = self.duckdb_file if destination == "duckdb" else self.postgres_file
        where = ["--duckdb", str(path), "--destination", destination]
        return run_cli(["metrics", *args, *where], cwd=self.folder, env=self.env())


@pytest.fixture(scope="module")
def loaded(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Loaded]:
    database = postgres_server.create_database()
    folder = tmp_path_factory.mktemp("metrics")
    configs = colliding_workspaces(seed=SHARED_SEED)
    # The DuckDB file the model and report tests read too: loaded (`load_every_workspace`) and
    # built once a session, from a sandbox with the same data as `running` below.
    duckdb_file = shared_workspaces(tmp_path_factory, configs).warehouse
    with RunningSandbox(*configs) as running, pytest.MonkeyPatch.context() as env:
        env.setenv("DESTINATION__POSTGRES__CREDENTIALS", database.credentials)
        postgres = Warehouse.at(folder / "postgres" / "signing.duckdb", "postgres")
        for key in running.api_keys:
            result = load_incremental(postgres, settings=fast(running, key))
            assert result.exit_code == 0, result.stopped
        built = build_models(postgres)
        assert built.success, built.summary
        assert built.models_passed == MODELS_BUILT, built.summary
        yield Loaded(running, duckdb_file, postgres.path, database, folder)


def _metrics(loaded: Loaded, destination: str, request: MetricsRequest) -> MetricsTable:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DESTINATION__POSTGRES__CREDENTIALS", loaded.database.credentials)
        return query_metrics(loaded.place(destination), request)


@pytest.mark.parametrize("destination", ["duckdb", "postgres"])
def test_weekly_metrics_of_every_workspace_equal_the_sandbox(
    loaded: Loaded, destination: str
) -> None:
    result = loaded.cli(
        destination,
        "--metrics",
        "sent,completed,completion_rate",
        "--group-by",
        "metric_time__week,workspace",
        "--format",
        "json",
    )
    assert result.returncode == 0, describe(result)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    got = {(date.fromisoformat(row["metric_time__week"]), row["workspace"]): row for row in rows}
    want = funnel_by_period(loaded.running.stores)
    assert len({workspace for _, workspace in want}) == 2
    assert set(got) == set(want)
    for key, counts in want.items():
        row = got[key]
        assert (row["sent"], row["completed"]) == (counts["sent"], counts["completed"]), key
        assert row["completion_rate"] == pytest.approx(counts["completed"] / counts["sent"]), key


def test_csv_and_table_say_the_same_as_json(loaded: Loaded) -> None:
    asked = ["--metrics", "sent,completed", "--group-by", "workspace"]
    as_csv = loaded.cli("duckdb", *asked, "--format", "csv")
    as_table = loaded.cli("duckdb", *asked)
    assert as_csv.returncode == 0, describe(as_csv)
    assert as_table.returncode == 0, describe(as_table)
    header, *lines = as_csv.stdout.splitlines()
    assert header == "workspace,sent,completed"
    want = funnel_by_period(loaded.running.stores, period=lambda _: None)
    expected = {f"{ws},{c['sent']},{c['completed']}" for (_, ws), c in want.items()}
    assert set(lines) == expected
    for line in expected:
        assert all(cell in as_table.stdout for cell in line.split(","))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--metrics", "sent;drop table marts.fct_shipments"], "no metric"),
        (["--metrics", "sent", "--group-by", "workspace_id) from marts.x --"], "no group-by"),
        (["--metrics", "sent", "--group-by", "metric_time__decade"], "no group-by"),
        (["--metrics", "sent,sent"], "named twice"),
        (["--metrics", ""], "one metric"),
        (["--metrics", "sent", "--start", "yesterday"], "--start"),
        (["--metrics", "sent", "--format", "xml"], "--format"),
    ],
)
def test_names_the_semantic_layer_does_not_define_are_refused_in_one_line(
    loaded: Loaded, options: list[str], named: str
) -> None:
    result = loaded.cli("duckdb", *options)
    assert result.returncode == 2, describe(result)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    (line,) = error_lines(result.stderr)
    assert named in line
    with duckdb.connect(str(loaded.duckdb_file), read_only=True) as db:
        (count,) = db.execute("select count(*) from marts.fct_shipments").fetchone() or (0,)
    assert count > 0


def test_a_warehouse_without_a_semantic_layer_is_one_line(tmp_path: Path) -> None:
    warehouse = tmp_path / "unbuilt.duckdb"
    duckdb.connect(str(warehouse)).close()  # a file, but no model build has parsed it
    result = run_cli(
        ["metrics", "--metrics", "sent", "--duckdb", str(warehouse)],
        cwd=tmp_path,
        env=cli_env(None),
    )
    assert result.returncode == 1, describe(result)
    (line,) = error_lines(result.stderr)
    assert "signing-etl models" in line


def test_a_missing_warehouse_says_to_load_it_first(tmp_path: Path) -> None:
    """Not `models`, which would only say the same: the first step is a load."""
    missing = tmp_path / "none.duckdb"
    result = run_cli(
        ["metrics", "--metrics", "sent", "--duckdb", str(missing)],
        cwd=tmp_path,
        env=cli_env(None),
    )
    assert result.returncode == 1, describe(result)
    (line,) = error_lines(result.stderr)
    assert f"no warehouse at {missing}" in line
    assert "signing-etl load" in line
    assert not missing.exists()


def _comparable(table: MetricsTable) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in table.rows),
        key=repr,
    )


@pytest.mark.parametrize(
    "group_by",
    [
        ("metric_time__week", "workspace"),
        ("metric_time__month", "workspace__workspace_name", "shipment__signature_level"),
        ("workspace", "shipment__document_name"),
    ],
)
def test_duckdb_and_postgres_give_equal_metric_tables(
    loaded: Loaded, group_by: tuple[str, ...]
) -> None:
    request = MetricsRequest(ALL_METRICS, group_by)
    on_duckdb = _metrics(loaded, "duckdb", request)
    on_postgres = _metrics(loaded, "postgres", request)
    assert on_duckdb.names == on_postgres.names == [*group_by, *ALL_METRICS]
    assert len(on_duckdb.rows) > 2
    assert _comparable(on_duckdb) == _comparable(on_postgres)


def test_the_marts_hand_written_figures_equal_the_metrics(loaded: Loaded) -> None:
    by_week = _metrics(
        loaded,
        "duckdb",
        MetricsRequest(
            ("sent", "opened", "signed", "completed", "expired", "revoked"),
            ("metric_time__week", "workspace"),
        ),
    )
    totals = _metrics(
        loaded, "duckdb", MetricsRequest(("sent", "completed", "waiting_now"), ("workspace",))
    )
    with closing(duckdb.connect(str(loaded.duckdb_file), read_only=True)) as db:
        funnel = db.execute(
            """select sent_week, workspace_id, sum(count_shipments_sent),
                   sum(count_shipments_opened), sum(count_shipments_signed),
                   sum(count_shipments_completed), sum(count_shipments_expired),
                   sum(count_shipments_revoked)
               from marts.fct_signing_funnel group by all having sum(count_shipments_sent) > 0"""
        ).fetchall()
        workspaces = db.execute(
            """select workspace_id, count_shipments_sent, count_shipments_completed,
                   count_shipments_waiting
               from marts.dim_workspaces"""
        ).fetchall()
    assert sorted(tuple(int(v) if i > 1 else v for i, v in enumerate(r)) for r in funnel) == (
        sorted(by_week.rows)
    )
    assert sorted(tuple(r) for r in workspaces) == sorted(totals.rows)


def test_a_dimension_left_empty_is_a_group_of_its_own_and_no_shipment_is_dropped(
    loaded: Loaded, tmp_path: Path
) -> None:
    """A mart's dimension the service left empty (a signature level it stopped sending, say)
    groups its shipments under null, beside the others, in every format."""
    place = loaded.place("duckdb")
    copy = Warehouse.at(tmp_path / place.path.name)
    shutil.copyfile(place.path, copy.path)
    shutil.copytree(place.dbt_dir, copy.dbt_dir)
    sent = {  # (workspace id, shipment id) -> signature level, of every shipment sent
        (store.workspace.id, shipment.id): shipment.signature_level
        for store in loaded.running.stores
        for shipment in list(store.shipments.by_id.values())
        if first_sent(shipment)
    }
    emptied = sorted(sent)[:4]
    with closing(duckdb.connect(str(copy.path))) as db:
        for workspace_id, shipment_id in emptied:
            db.execute(
                "update marts.fct_shipments set signature_level = null "
                "where workspace_id = ? and shipment_id = ?",
                [workspace_id, shipment_id],
            )
    want = Counter(None if key in emptied else level for key, level in sent.items())
    got = query_metrics(copy, MetricsRequest(("sent",), ("shipment__signature_level",)))
    assert dict(got.rows) == dict(want)
    asked = ["--metrics", "sent", "--group-by", "shipment__signature_level", "--format", "json"]
    shown = run_cli(
        ["metrics", *asked, "--duckdb", str(copy.path)],
        cwd=tmp_path,
        env=cli_env(None),
    )
    assert shown.returncode == 0, describe(shown)
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert {"shipment__signature_level": None, "sent": len(emptied)} in rows
