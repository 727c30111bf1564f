"""Two workspaces whose ids collide, loaded into one warehouse, and one workspace's marts apart.

Shared by the model and notebook tests that check that no number of one workspace reaches
another: `SandboxConfig.workspaces(2)` gives two workspaces with the same ids and different
data, each loaded with its own key into the same DuckDB file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from pipelines.load.run import load_incremental
from pipelines.modeling.build import build_models
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox, SandboxConfig
from tests.support import MARTS, MODELS_BUILT, START_MS, fast
from tests.support.built import made_once

# The two workspaces the model, analyst-mart and report tests read: one warehouse of them is
# loaded and built once per session and copied to each of those modules.
SHARED_SEED = 23


def colliding_workspaces(seed: int, shipments: int = 150) -> list[SandboxConfig]:
    """Two limit-free workspaces for one sandbox server, with colliding ids."""
    config = SandboxConfig(seed=seed, shipments=shipments, start_ms=START_MS, limits_enabled=False)
    return config.workspaces(2)


@dataclass(frozen=True)
class LoadedWorkspaces:
    """A warehouse with every workspace of a sandbox loaded and the models built; the loads
    (not the build) ran between `began` and `ended` by the wall clock."""

    warehouse: Path
    began: datetime
    ended: datetime


def load_every_workspace(
    running: RunningSandbox, warehouse: Warehouse | Path
) -> tuple[datetime, datetime]:
    """Load each of the sandbox's workspaces with its own key into `warehouse`, one after the
    other, then build the models; every load must finish and every model and test pass. When
    the loads began and when they ended (the build after them is not counted)."""
    began = datetime.now(UTC)
    for key in running.api_keys:
        loaded = load_incremental(warehouse, settings=fast(running, key))
        assert loaded.exit_code == 0, loaded.stopped
        assert loaded.stopped is None, loaded.stopped
    ended = datetime.now(UTC)
    result = build_models(warehouse)
    assert result.success, result.summary
    assert result.models_passed == MODELS_BUILT, result.summary
    assert result.models_errored == 0
    assert result.tests_errored == 0
    return began, ended


def shared_workspaces(
    factory: pytest.TempPathFactory, configs: list[SandboxConfig]
) -> LoadedWorkspaces:
    """A DuckDB warehouse of the calling module's own (a copy: it may change it) in which every
    workspace of `configs` is loaded by `load_every_workspace`. The sandbox data is the same
    whenever `configs` are, so the loads and the build run once per test session, in a sandbox
    of their own, and the module compares the copy with its own sandbox served with `configs`."""

    def make(folder: Path) -> dict[str, str]:
        with RunningSandbox(*configs) as running:
            began, ended = load_every_workspace(running, folder / "signing.duckdb")
        return {"began": began.isoformat(), "ended": ended.isoformat()}

    folder = factory.mktemp("workspaces")
    notes = made_once(factory, f"load_every_workspace {configs!r}", make, folder)
    return LoadedWorkspaces(
        folder / "signing.duckdb",
        datetime.fromisoformat(notes["began"]),
        datetime.fromisoformat(notes["ended"]),
    )


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
