"""Every path that writes rows into `raw` goes through one gate: only `LoadSteps`
(`pipelines/raw/steps.py`), which asks the privacy gate first, runs dlt's extract, normalize or
load steps. A new path that ran them itself would write under its own privacy settings; this
finds it in the code of the project (pipelines and orchestration) before it ships."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS = {"extract", "normalize", "load", "run"}
GATED = ROOT / "pipelines" / "raw" / "steps.py"


def steps_named_in(path: Path) -> list[str]:
    """Where a file names dlt's steps on a pipeline: `<...pipeline>.extract` (called or handed
    on), `.normalize`, `.load`, `.run`, also on `dlt.pipeline(...)` itself."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute) or node.attr not in STEPS:
            continue
        owner = node.value
        named = owner.func if isinstance(owner, ast.Call) else owner
        if ast.unparse(named).endswith("pipeline"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_load_steps_runs_dlts_steps() -> None:
    files = sorted([*(ROOT / "pipelines").rglob("*.py"), *(ROOT / "orchestration").rglob("*.py")])
    assert GATED in files
    assert steps_named_in(GATED)  # the check sees the calls where they are
    outside = [hit for path in files if path != GATED for hit in steps_named_in(path)]
    assert outside == []
