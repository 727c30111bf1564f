"""Two workspaces whose ids collide, loaded into one warehouse, and one workspace's marts apart.

Shared by the model and notebook tests that check that no number of one workspace reaches
another: `SandboxConfig.workspaces(2)` gives two workspaces with the same ids and different
data, each loaded with its own key into the same DuckDB file.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from pipelines.load.run import load_incremental
from pipelines.modeling.build import ModelsResult, build_models
from sandbox import RunningSandbox, SandboxConfig
from tests.support import MARTS, START_MS, fast


def colliding_workspaces(seed: int, shipments: int = 150) -> list[SandboxConfig]:
    """Two limit-free workspaces for one sandbox server, with colliding ids."""
    config = SandboxConfig(seed=seed, shipments=shipments, start_ms=START_MS, limits_enabled=False)
    return config.workspaces(2)


def load_every_workspace(running: RunningSandbox, warehouse: Path) -> ModelsResult:
    """Load each of the sandbox's workspaces with its own key into `warehouse`, one after the
    other, then build the models; every load must finish and every model and test pass."""
    for key in running.api_keys:
        loaded = load_incremental(warehouse, settings=fast(running, key))
        assert loaded.stopped is None, loaded.stopped
    result = build_models(warehouse)
    assert result.success, result.summary
    assert result.models_errored == 0
    assert result.tests_errored == 0
    return result


def workspace_marts(warehouse: Path, workspace_id: str, into: Path) -> Path:
    """A DuckDB file at `into` whose `marts` hold only one workspace's rows of the warehouse's
    (`where workspace_id = ...`), so that checks written for a one-workspace warehouse read
    that workspace alone."""
    into.unlink(missing_ok=True)
    with duckdb.connect(str(into)) as db:
        db.execute(f"attach '{warehouse}' as source (read_only)")
        db.execute("create schema marts")
        for mart in MARTS:
            db.execute(
                f"create table marts.{mart} as "
                f"select * from source.marts.{mart} where workspace_id = ?",
                [workspace_id],
            )
        db.execute("detach source")
    return into
