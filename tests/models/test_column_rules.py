"""The `column_rules` test (`models/tests/generic/column_rules.sql`), which checks every range,
order and accepted value of a mart in one scan: against a mart made by hand, whose broken rows
are known, it fails with exactly the rules those rows break and how many break each."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from dbt.artifacts.schemas.run import RunExecutionResult
from dbt.cli.main import dbtRunner

from pipelines.modeling.build import PROJECT_DIR

pytestmark = pytest.mark.slow  # dbt parses the whole project for one test: 7 to 13 s

# The columns fct_time_to_sign's rules read (models/models/marts/fct_time_to_sign.yml).
COLUMNS = {
    "time_grain": "varchar",
    "median_hours_to_sign": "double",
    "p90_hours_to_sign": "double",
    "count_shipments_completed": "integer",
    "count_shipments_sent": "integer",
    "median_hours_to_complete": "double",
    "p90_hours_to_complete": "double",
}
ROWS = [
    ("document", 1.0, 2.0, 3, 4, 5.0, 6.0),  # every rule holds
    ("week", 2.0, 2.0, 4, 4, None, None),  # equal is allowed; nulls are not compared
    ("month", 1.0, 2.0, 3, 4, 5.0, 6.0),  # a grain not listed
    ("month", 3.0, 2.0, 3, 4, 5.0, 6.0),  # that grain again, and a median above its p90
    ("week", 1.0, 2.0, 5, 4, 7.0, 6.0),  # more completed than sent, a median above its p90
]


def test_each_broken_rule_is_one_row_with_the_rows_that_break_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse = tmp_path / "signing.duckdb"
    with duckdb.connect(str(warehouse)) as db:
        db.execute("create schema marts")
        columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
        db.execute(f"create table marts.fct_time_to_sign ({columns})")
        values = ", ".join("?" * len(COLUMNS))
        db.executemany(f"insert into marts.fct_time_to_sign values ({values})", ROWS)
    expected = {
        "time_grain in (document, week)": sum(row[0] not in ("document", "week") for row in ROWS),
        "median_hours_to_sign <= p90_hours_to_sign": sum(row[1] > row[2] for row in ROWS),
        "count_shipments_completed <= count_shipments_sent": sum(row[3] > row[4] for row in ROWS),
        "median_hours_to_complete <= p90_hours_to_complete": sum(
            row[5] is not None and row[6] is not None and row[5] > row[6] for row in ROWS
        ),
    }
    assert all(expected.values())  # each rule is broken by some row

    monkeypatch.setenv("SIGNING_WAREHOUSE", str(warehouse))
    work = tmp_path / ".dbt"
    outcome = dbtRunner().invoke(
        [
            "test",
            *("--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR)),
            *("--target-path", str(work / "target"), "--log-path", str(work / "logs")),
            *("--select", "column_rules_fct_time_to_sign", "--store-failures"),
            *("--log-level", "none", "--no-send-anonymous-usage-stats"),
        ]
    )

    assert outcome.success is False
    assert isinstance(outcome.result, RunExecutionResult)
    [result] = outcome.result.results
    assert (result.node.name, str(result.status), result.failures) == (
        "column_rules_fct_time_to_sign",
        "fail",
        len(expected),
    )
    with duckdb.connect(str(warehouse)) as db:  # as dbt's adapter, which keeps it open
        stored = db.execute(
            "select broken_rule, broken_rows from dbt_test__audit.column_rules_fct_time_to_sign"
        ).fetchall()
    assert dict(stored) == expected
