"""On PostgreSQL a model build never reads `raw` while one of dlt's load steps writes it. dlt merges
each table in a transaction of its own and records the load after the last one, and the staging
views show only recorded loads: a build in between saw the merged shipments' old rows gone and
their new ones not yet there, its marts lacked them, and dbt's snapshots closed their versions as
if the service had deleted them, for ever. Here a load is held inside its step, after its tables
are merged and before it is recorded (the window every load has, widened), while a build starts
on another thread: the build waits for the step (the models' lock) and sees the load whole.

The truth is the sandbox's store: every shipment it holds has one open version and one row in
the marts."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from dlt.load.load import Load

from pipelines.load.run import LoadResult, load_incremental
from pipelines.modeling.build import ModelsResult, build_models
from pipelines.warehouse import DATASET, _advisory
from tests.support import SandboxFactory, admin, fast
from tests.support.destinations import WarehouseUnderTest
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.slow  # loads and builds on PostgreSQL, one held part-way

PATIENCE_SECONDS = 300  # for a thread to reach a point; never reached when things work


def test_a_build_waits_for_a_load_step_and_its_history_invents_no_deletion(
    make_sandbox: SandboxFactory,
    postgres_server: PostgresServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running = make_sandbox(shipments=60, limits_enabled=False)
    place = WarehouseUnderTest(tmp_path / "signing.duckdb", postgres_server.create_database())
    with place.configured() as warehouse:
        assert load_incremental(warehouse, settings=fast(running)).exit_code == 0
        assert build_models(warehouse).success
    admin(running, "POST", "/advance", {"days": 20})  # most shipments change

    merged, recorded = threading.Event(), threading.Event()
    complete = Load.complete_package

    def held_before_recording(self: Load, *args: Any, **kwargs: Any) -> Any:
        merged.set()  # every table merged; the load not yet recorded
        recorded.wait(PATIENCE_SECONDS)
        return complete(self, *args, **kwargs)

    refused = threading.Event()  # the build asked for the models' lock and did not get it
    take = _advisory._take_queued

    def observed(session: Any, key: int) -> bool:
        taken = take(session, key)
        if not taken and key == _advisory.models_key(DATASET):
            refused.set()
        return taken

    monkeypatch.setattr(Load, "complete_package", held_before_recording)
    monkeypatch.setattr(_advisory, "_take_queued", observed)
    loads: list[LoadResult] = []
    builds: list[ModelsResult] = []
    with place.configured() as warehouse:
        loading = threading.Thread(
            target=lambda: loads.append(load_incremental(warehouse, settings=fast(running)))
        )
        loading.start()
        assert merged.wait(PATIENCE_SECONDS), "the load never reached its load step"
        building = threading.Thread(target=lambda: builds.append(build_models(warehouse)))
        building.start()
        waited = time.monotonic() + PATIENCE_SECONDS
        while building.is_alive() and not refused.is_set() and time.monotonic() < waited:
            time.sleep(0.1)
        recorded.set()
        loading.join(PATIENCE_SECONDS)
        building.join(PATIENCE_SECONDS)

    (loaded,) = loads
    (built,) = builds
    assert loaded.exit_code == 0, loaded.stopped
    assert built.success, built.summary
    store = running.store
    with store.lock:
        live = set(store.live_ids("shipments"))
    workspace = store.workspace.id
    open_versions = place.query(
        "select shipment_id from snapshots.snp_signing__shipments "
        "where workspace_id = ? and dbt_valid_to is null",
        workspace,
    )
    assert sorted(row[0] for row in open_versions) == sorted(live)
    in_marts = place.query(
        "select shipment_id from marts.fct_shipments where workspace_id = ?", workspace
    )
    assert {row[0] for row in in_marts} == live
