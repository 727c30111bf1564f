"""The tests that check a whole mart in one scan (`models/tests/generic/`): `column_rules` (every
range, order and accepted value) and `keys_and_not_nulls` (every key unique, the never-null
columns without nulls). Against a mart made by hand, whose broken rows are known, each fails with
exactly what those rows break: a rule or a column with how many rows, a repeated key with its
value and how many rows share it. A key that is not a list of columns stops dbt's parse with one
line that says so."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml
from dbt.artifacts.schemas.run import RunExecutionResult
from dbt.cli.main import dbtRunner, dbtRunnerResult

from pipelines.modeling.build import PROJECT_DIR

pytestmark = pytest.mark.slow  # dbt parses the whole project for the module: 7 to 13 s

MART = "fct_time_to_sign"
RULES = f"column_rules_{MART}"
KEYS = f"keys_and_not_nulls_{MART}"

# The columns of fct_time_to_sign that its two tests read (its YAML, beside its SQL).
COLUMNS = {
    "time_to_sign_id": "varchar",
    "time_grain": "varchar",
    "workspace_id": "varchar",
    "document_id": "varchar",
    "sent_week": "date",
    "median_hours_to_sign": "double",
    "p90_hours_to_sign": "double",
    "count_shipments_completed": "integer",
    "count_shipments_sent": "integer",
    "median_hours_to_complete": "double",
    "p90_hours_to_complete": "double",
}
WEEK = date(2026, 1, 5)
ROWS = [
    # every rule holds, every key is its own
    ("t1", "document", "w1", "d1", None, 1.0, 2.0, 3, 4, 5.0, 6.0),
    # equal is allowed; nulls are not compared
    ("t2", "week", "w1", None, WEEK, 2.0, 2.0, 4, 4, None, None),
    # a grain not listed
    ("t3", "month", "w1", None, None, 1.0, 2.0, 3, 4, 5.0, 6.0),
    # that grain again, a median above its p90, and both keys of the row before (nulls too)
    ("t3", "month", "w1", None, None, 3.0, 2.0, 3, 4, 5.0, 6.0),
    # more completed than sent, a median above its p90; no id, the week of the second row
    (None, "week", "w1", None, WEEK, 1.0, 2.0, 5, 4, 7.0, 6.0),
    # a second workspace's document with the first one's id: ids repeat across workspaces
    ("t4", "document", "w2", "d1", None, 1.0, 2.0, 3, 4, 5.0, 6.0),
    # a second row without an id (nulls repeat a key too), and without a workspace
    (None, "document", None, "d2", None, 1.0, 2.0, 3, 4, 5.0, 6.0),
]

RECORDS: list[dict[str, Any]] = [dict(zip(COLUMNS, row, strict=True)) for row in ROWS]


@pytest.fixture(scope="module")
def tested(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The hand-made mart's warehouse, and each test's result by name (one dbt run for both)."""
    folder = tmp_path_factory.mktemp("rules")
    warehouse = folder / "signing.duckdb"
    with duckdb.connect(str(warehouse)) as db:
        db.execute("create schema marts")
        columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
        db.execute(f"create table marts.{MART} ({columns})")
        values = ", ".join("?" * len(COLUMNS))
        db.executemany(f"insert into marts.{MART} values ({values})", ROWS)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("SIGNING_WAREHOUSE", str(warehouse))
        work = folder / ".dbt"
        outcome = _dbt(
            PROJECT_DIR,
            "test",
            *("--target-path", str(work / "target"), "--log-path", str(work / "logs")),
            *("--select", f"{RULES} {KEYS}", "--store-failures"),
        )
    assert outcome.success is False
    assert isinstance(outcome.result, RunExecutionResult)
    return warehouse, {result.node.name: result for result in outcome.result.results}


def _dbt(project: Path, *args: str) -> dbtRunnerResult:
    """dbt's `args` on `project` (its own profile), in this process and silent."""
    return dbtRunner().invoke(
        [
            *args,
            *("--project-dir", str(project), "--profiles-dir", str(project)),
            *("--log-level", "none", "--no-send-anonymous-usage-stats"),
        ]
    )


def _mart_yaml(project: Path) -> Path:
    """The YAML beside the mart's SQL in `project`."""
    [path] = (project / "models").rglob(f"{MART}.yml")
    return path


def _stored(warehouse: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows dbt stored for a failed test (a fresh connection: dbt's adapter keeps its own)."""
    with duckdb.connect(str(warehouse)) as db:
        return db.execute(sql).fetchall()


def test_each_broken_rule_is_one_row_with_the_rows_that_break_it(
    tested: tuple[Path, dict[str, Any]],
) -> None:
    warehouse, results = tested
    expected = {
        "time_grain in (document, week)": sum(
            each["time_grain"] not in ("document", "week") for each in RECORDS
        ),
        "median_hours_to_sign <= p90_hours_to_sign": sum(
            each["median_hours_to_sign"] > each["p90_hours_to_sign"] for each in RECORDS
        ),
        "count_shipments_completed <= count_shipments_sent": sum(
            each["count_shipments_completed"] > each["count_shipments_sent"] for each in RECORDS
        ),
        "median_hours_to_complete <= p90_hours_to_complete": sum(
            each["median_hours_to_complete"] is not None
            and each["median_hours_to_complete"] > each["p90_hours_to_complete"]
            for each in RECORDS
        ),
    }
    assert all(expected.values())  # each rule is broken by some row

    result = results[RULES]
    assert (str(result.status), result.failures) == ("fail", len(expected))
    stored = _stored(warehouse, f"select broken_rule, broken_rows from dbt_test__audit.{RULES}")
    assert dict(stored) == expected


def test_each_column_with_nulls_and_each_repeated_key_is_one_row(
    tested: tuple[Path, dict[str, Any]],
) -> None:
    warehouse, results = tested
    arguments = _keys_test_arguments()
    expected: set[tuple[str, str | None, int]] = set()
    for column in arguments["not_null"]:
        nulls = sum(each[column] is None for each in RECORDS)
        if nulls:
            expected.add((f"not null: {column}", None, nulls))
    for key in arguments["keys"]:
        values = Counter(tuple(each[column] for column in key) for each in RECORDS)
        for value, rows in values.items():
            if rows > 1:
                text = ", ".join("null" if part is None else str(part) for part in value)
                expected.add((f"unique: {', '.join(key)}", text, rows))
    # The rows break two never-null columns and both keys (a composite one through its nulls).
    checks = {check for check, _, _ in expected}
    assert len({check for check in checks if check.startswith("not null")}) == 2
    assert len({check for check in checks if check.startswith("unique")}) == 2

    result = results[KEYS]
    assert (str(result.status), result.failures) == ("fail", len(expected))
    stored = _stored(
        warehouse, f"select broken_check, key_value, count_rows from dbt_test__audit.{KEYS}"
    )
    assert set(stored) == expected
    assert len(stored) == len(expected)


def _keys_test_arguments() -> dict[str, Any]:
    """The mart's `keys_and_not_nulls` arguments, as its YAML gives them."""
    [model] = yaml.safe_load(_mart_yaml(PROJECT_DIR).read_text())["models"]
    [test] = [each for each in model["data_tests"] if "keys_and_not_nulls" in each]
    arguments: dict[str, Any] = test["keys_and_not_nulls"]["arguments"]
    return arguments


@pytest.mark.parametrize(
    ("keys", "reason"),
    [
        ("[time_to_sign_id]", "each key is a list of columns: [[time_to_sign_id]], not"),
        ("[[]]", "a key without columns"),
    ],
)
def test_a_key_that_is_not_a_list_of_columns_stops_the_parse_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: str, reason: str
) -> None:
    project = tmp_path / "models"
    shutil.copytree(PROJECT_DIR, project, ignore=shutil.ignore_patterns("target", "logs"))
    path = _mart_yaml(project)
    declared = "keys: [[time_grain, workspace_id, document_id, sent_week], [time_to_sign_id]]"
    assert declared in path.read_text()
    path.write_text(path.read_text().replace(declared, f"keys: {keys}"))
    monkeypatch.setenv("SIGNING_WAREHOUSE", str(tmp_path / "signing.duckdb"))

    outcome = _dbt(project, "parse")

    assert outcome.success is False
    assert f"keys_and_not_nulls: {reason}" in str(outcome.exception)
