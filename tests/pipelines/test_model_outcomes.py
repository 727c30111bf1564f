"""A model build's outcome is on record where `status` reads it: a failed build (its failing
and warning tests by name) in the table, the JSON and the check's exit code, though the failed
run's working file was not published; a later good build replaces it. A part of the models
(`--select`) builds on a warehouse where the rest was never built.

The failure is made the way a service's bad day makes one: a shipment listed twice in `raw`
(the staging model's key test errors) and a document the shipments point to gone from `raw`
(a relationships test warns). The test names come from the models' YAML.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from pipelines.modeling.build import PROJECT_DIR
from pipelines.modeling.refresh import refresh_marts
from tests.support import SandboxFactory, mart_tables
from tests.support.cli import (
    cli_env,
    describe,
    error_lines,
    load_args,
    run_cli,
    status_document,
)

pytestmark = pytest.mark.slow  # dbt builds of changed models

MODEL = "stg_signing__shipments"
ERRORS = "keys_and_not_nulls"  # the model's keys and nulls test (models' YAML)
WARNS = "relationships_within_workspace"  # its document_id test, severity warn


def test_a_failed_model_build_is_in_status_and_fails_the_check_until_a_good_build(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=20, limits_enabled=False)
    env = cli_env(running)
    warehouse = tmp_path / "signing.duckdb"
    loaded = run_cli(["load", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)
    assert loaded.returncode == 0, describe(loaded)  # with its models: the marts exist
    with duckdb.connect(str(warehouse)) as db:
        db.execute("insert into raw.shipments select * from raw.shipments limit 1")
        row = db.execute("select document_id from raw.shipments limit 1").fetchone()
        assert row is not None
        document = row[0]
        db.execute("delete from raw.documents where id = ?", [document])

    # The shipments' staging view and the one its warned test refers to.
    build = ["models", "--duckdb", str(warehouse), "--select", f"{MODEL} stg_signing__documents"]
    failed = run_cli(build, cwd=tmp_path, env=env)
    assert failed.returncode == 1, describe(failed)

    document_json = status_document(warehouse, cwd=tmp_path, env=env)
    models = document_json["models"]
    assert models["success"] is False
    assert any(ERRORS in name and MODEL in name for name in models["errored"]), models
    assert any(WARNS in name and MODEL in name for name in models["warned"]), models
    (workspace,) = document_json["workspaces"]
    assert (workspace["health"], workspace["ok"]) == ("failed", False)
    assert workspace["why"].startswith("the last model build failed: ")
    table = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)
    assert "Models: the last build failed" in table.stdout, describe(table)
    check = run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=env)
    assert check.returncode == 1, describe(check)
    (line,) = error_lines(check.stderr)
    assert "workspace default: the last model build failed: " in line

    # A webhook drain's refresh of the marts (`dbt run` here: the failed build compiled no
    # mart) tests nothing: the failed build stays what status says.
    refreshed = refresh_marts(warehouse, brief="webhook drain")
    assert refreshed is not None
    assert refreshed.success, refreshed.summary
    assert status_document(warehouse, cwd=tmp_path, env=env)["models"] == models
    check = run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=env)
    assert check.returncode == 1, describe(check)

    with duckdb.connect(str(warehouse)) as db:  # the duplicate gone; the document stays gone
        db.execute("create table keep as select distinct * from raw.shipments")
        db.execute("delete from raw.shipments")
        db.execute("insert into raw.shipments select * from keep")
    good = run_cli(["models", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)
    assert good.returncode == 0, describe(good)
    assert WARNS in good.stderr  # the summary names the warned test

    models = status_document(warehouse, cwd=tmp_path, env=env)["models"]
    assert models["success"] is True
    assert models["errored"] == []
    assert [name for name in models["warned"] if WARNS in name], models
    check = run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=env)
    assert check.returncode == 0, describe(check)


def test_a_build_refused_before_dbt_ran_is_in_status_and_fails_the_check(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """dbt's folder beside the warehouse cannot be made (a file has its name): the build is
    refused in one line before dbt starts, and on record as a failed build all the same."""
    running = make_sandbox(shipments=5, limits_enabled=False)
    env = cli_env(running)
    warehouse = tmp_path / "signing.duckdb"
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0
    dbt_folder = tmp_path / ".signing.dbt"
    dbt_folder.write_text("not a folder")

    refused = run_cli(["models", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)
    assert refused.returncode == 1, describe(refused)
    (line,) = error_lines(refused.stderr)
    reason = line.partition(" ERROR models: ")[2]
    assert reason.startswith("cannot write in "), line

    models = status_document(warehouse, cwd=tmp_path, env=env)["models"]
    assert models["success"] is False, models
    assert models["first_error"] == reason, models
    check = run_cli(["status", "--duckdb", str(warehouse), "--check"], cwd=tmp_path, env=env)
    assert check.returncode == 1, describe(check)
    (line,) = error_lines(check.stderr)
    assert "workspace default: the last model build failed: cannot write in " in line


def _models_upstream_of(model: str) -> set[str]:
    """`model` and every model it reads, from the `ref()`s written in the models' SQL."""
    refs = {
        path.stem: set(re.findall(r"ref\(\s*['\"](\w+)['\"]\s*\)", path.read_text()))
        for path in (PROJECT_DIR / "models").rglob("*.sql")
    }
    found, pending = set(), [model]
    while pending:
        name = pending.pop()
        if name not in found:
            found.add(name)
            pending.extend(refs.get(name, ()))
    return found


def test_a_selection_builds_and_tests_its_part_of_a_warehouse_never_built(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """The tests a selection runs are those whose models it builds: one that also reads a
    model outside it (dbt's default, `eager`) would fail on a table never built."""
    running = make_sandbox(shipments=20, limits_enabled=False)
    env = cli_env(running)
    warehouse = tmp_path / "signing.duckdb"
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0
    part = run_cli(
        ["models", "--duckdb", str(warehouse), "--select", "+fct_shipments"], cwd=tmp_path, env=env
    )
    assert part.returncode == 0, describe(part)
    upstream = _models_upstream_of("fct_shipments")
    assert mart_tables(warehouse) == {
        name for name in upstream if name.startswith(("fct_", "dim_"))
    }
    # A view outside the selection whose test refers to one inside: dbt's default (`eager`)
    # would run that test, on a view never built.
    assert "stg_signing__contacts" in upstream
    assert "stg_signing__contact_custom_properties" not in upstream
    models = status_document(warehouse, cwd=tmp_path, env=env)["models"]
    assert (models["success"], models["errored"]) == (True, []), models
    assert models["tests_passed"] > 0, models
