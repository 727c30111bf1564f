"""The installable package: the wheel `uv build` makes, installed into a fresh environment
(the locked versions, nothing of this checkout on its path), runs the demo outside a checkout:
sandbox, loads, the dbt models and the report notebook all come from the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import duckdb
import pytest

CHECKOUT = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=1_200, check=False
    )
    assert done.returncode == 0, f"{args[:3]} exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.slow
def test_the_installed_wheel_runs_the_demo_outside_a_checkout(tmp_path: Path) -> None:
    uv = os.environ.get("UV", "uv")
    _run([uv, "build", "--wheel", "-q", "-o", str(tmp_path / "dist")], CHECKOUT)
    [wheel] = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pipelines/_shipped/models/dbt_project.yml" in names
    assert "pipelines/_shipped/notebooks/signing_funnel.ipynb" in names
    assert not [name for name in names if "/target/" in name or name.endswith(".duckdb")]

    constraints = tmp_path / "constraints.txt"
    locked = [uv, "export", "--frozen", "--no-dev", "--no-hashes", "--no-emit-project"]
    _run([*locked, "-q", "-o", str(constraints)], CHECKOUT)
    venv = tmp_path / "venv"
    _run([uv, "venv", "-q", "--python", sys.executable, str(venv)], tmp_path)
    python = venv / "bin" / "python"
    _run(
        [uv, "pip", "install", "-q", "--python", str(python), "-c", str(constraints), str(wheel)],
        tmp_path,
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SOURCES__", "DESTINATION__", "DLT_", "VIRTUAL_ENV", "PYTHON"))
    }
    warehouse = elsewhere / "demo.duckdb"
    args = [str(venv / "bin" / "signing-etl"), "demo", "--duckdb", str(warehouse)]
    printed = _run([*args, "--shipments", "200", "--weeks", "1"], elsewhere, env)
    [report] = [line.split(":", 1)[1].strip() for line in printed.splitlines() if "Report:" in line]
    assert Path(report).is_file()
    assert Path(report).stat().st_size > 0

    imported = _run([str(python), "-c", "import pipelines; print(pipelines.__file__)"], elsewhere)
    assert str(venv) in imported
    assert str(CHECKOUT) not in imported
    with duckdb.connect(str(warehouse), read_only=True) as db:
        shipments = db.execute("select count(*) from marts.fct_shipments").fetchone()
    assert shipments is not None
    assert shipments[0] > 0

    # The semantic layer ships with the models: the installed command computes the metrics, and
    # they count what the marts hold.
    metrics = [str(venv / "bin" / "signing-etl"), "metrics", "--duckdb", str(warehouse)]
    csv = _run([*metrics, "--metrics", "sent", "--format", "csv"], elsewhere, env)
    with duckdb.connect(str(warehouse), read_only=True) as db:
        sent = db.execute("select count(*) from marts.fct_shipments where is_sent").fetchone()
    assert sent is not None
    assert csv.splitlines() == ["sent", str(sent[0])]
