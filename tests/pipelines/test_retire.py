"""A workspace taken out of the configuration stops failing `status --check` once retired with
`status --retire NAME`; its rows stay, and a later run of it brings it back."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from sandbox import RunningSandbox, SandboxConfig
from tests.support import (
    START_MS,
    describe,
    error_lines,
    run_cli,
    status_document,
    workspaces_env,
)
from tests.support.cli import load_args

pytestmark = pytest.mark.slow  # several loads per test


def _names(warehouse: Path, folder: Path, env: dict[str, str]) -> list[str]:
    document = status_document(warehouse, cwd=folder, env=env)
    return sorted(w["workspace"] for w in document["workspaces"])


def test_a_retired_workspace_leaves_status_and_the_check_until_it_runs_again(
    tmp_path: Path,
) -> None:
    config = SandboxConfig(seed=61, shipments=10, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(2)) as running:
        both = _configured(running, "kept", "gone")
        only_kept = _configured(running, "kept")
        warehouse = tmp_path / "signing.duckdb"
        assert run_cli(load_args(warehouse), cwd=tmp_path, env=both).returncode == 0
        with duckdb.connect(str(warehouse)) as db:  # both loaded an hour ago
            db.execute(
                "update raw._signing_runs set started_at = started_at - interval 1 hour, "
                "finished_at = finished_at - interval 1 hour"
            )
        assert run_cli(load_args(warehouse), cwd=tmp_path, env=only_kept).returncode == 0
        status = ["status", "--duckdb", str(warehouse)]
        check = [*status, "--check", "--max-age-hours", "0.5"]

        stale = run_cli(check, cwd=tmp_path, env=only_kept)
        assert stale.returncode == 1, describe(stale)
        (line,) = error_lines(stale.stderr)
        assert line.split(" ERROR ")[-1].startswith("workspace gone: last loaded ")

        configured = run_cli([*status, "--retire", "kept"], cwd=tmp_path, env=only_kept)
        assert configured.returncode == 1, describe(configured)
        assert "still configured" in configured.stderr
        unknown = run_cli([*status, "--retire", "nowhere"], cwd=tmp_path, env=only_kept)
        assert unknown.returncode == 1, describe(unknown)
        retired = run_cli([*status, "--retire", "gone"], cwd=tmp_path, env=only_kept)
        assert retired.returncode == 0, describe(retired)

        calm = run_cli(check, cwd=tmp_path, env=only_kept)
        assert calm.returncode == 0, describe(calm)
        assert _names(warehouse, tmp_path, only_kept) == ["kept"]
        with duckdb.connect(str(warehouse), read_only=True) as db:
            kept_rows = db.execute("select count(distinct workspace_id) from raw.shipments")
            assert kept_rows.fetchone() == (2,)  # its rows stay

        back = run_cli([*load_args(warehouse), "--workspace", "gone"], cwd=tmp_path, env=both)
        assert back.returncode == 0, describe(back)
        assert _names(warehouse, tmp_path, both) == ["gone", "kept"]


def _configured(running: RunningSandbox, *names: str) -> dict[str, str]:
    """The workspaces `names`, the n-th with the sandbox's n-th key."""
    keys = dict(zip(("kept", "gone"), running.api_keys, strict=True))
    return workspaces_env(running, {name: keys[name] for name in names})
