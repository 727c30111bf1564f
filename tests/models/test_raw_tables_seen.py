"""A build sees every raw table that exists, however its threads interleave.

The staging models ask whether a raw table exists, and which columns it has, while dbt's
threads compile them at once (four here, as on Postgres by default; `SIGNING_DBT_THREADS`).
dbt keeps no list of a source's schema up front: the first thread to ask lists the schema and
adds its tables to dbt's relation cache one at a time, and a thread that asks meanwhile takes
the half-filled list as the whole (dbt-adapters' `list_relations`).
A staging model that read that list selected no rows from a table that was there: once, in
a full run of the suite, a PostgreSQL build failed a relationships test that way, and before
the fix this test's DuckDB build passed with marts missing every document. Here each table's
arrival in that cache is slowed down, so the window is wide open.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from dbt.adapters.base.relation import BaseRelation
from dbt.adapters.cache import RelationsCache

from pipelines.load.run import load_incremental
from pipelines.modeling.build import build_models
from tests.models.test_marts import assert_marts_match
from tests.support import MODELS_BUILT, SandboxFactory, fast, pointed_at

pytestmark = pytest.mark.slow  # a load and a dbt build

RAW_SCHEMA = "raw"


def test_every_staging_model_reads_its_raw_table_while_dbts_cache_fills_slowly(
    make_sandbox: SandboxFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = make_sandbox(shipments=40, seed=31, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    with pointed_at(running):
        assert load_incremental(warehouse, settings=fast()).stopped is None

    # dbt's own method, untyped there
    add_to_cache: Callable[[RelationsCache, BaseRelation], None] = RelationsCache.add

    def add_slowly(cache: RelationsCache, relation: BaseRelation) -> None:
        add_to_cache(cache, relation)
        if relation.schema == RAW_SCHEMA:
            time.sleep(0.05)  # another thread may now read the raw schema half-listed

    monkeypatch.setattr(RelationsCache, "add", add_slowly)
    monkeypatch.setenv("SIGNING_DBT_THREADS", "4")  # DuckDB's default is one thread
    built = build_models(warehouse)

    assert built.success, built.summary
    assert built.log_file is not None
    assert "Concurrency: 4 threads" in built.log_file.read_text()  # the window was there
    assert built.models_passed == MODELS_BUILT
    assert_marts_match(warehouse, running.store)
