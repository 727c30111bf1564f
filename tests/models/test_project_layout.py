"""The dbt project's house rules, read from its files: every model has a YAML beside it that
states its grain, no YAML is over 300 lines, every mart's grain is in `models/README.md`'s
table (the one other place that says it), and a description shared by several models is a
`{% docs %}` block, not a copy."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[2] / "models"
MODELS = PROJECT / "models"


def _yaml_models() -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = {}
    for path in MODELS.rglob("*.yml"):
        for model in (yaml.safe_load(path.read_text()) or {}).get("models") or []:
            found[model["name"]] = model
    return found


def test_every_model_has_its_yaml_beside_it_stating_the_grain() -> None:
    described = _yaml_models()
    for sql in MODELS.rglob("*.sql"):
        assert sql.with_suffix(".yml").is_file(), f"{sql.name} has no YAML beside it"
        model = described.get(sql.stem)
        assert model is not None, f"{sql.stem} is described by no YAML"
        assert "Grain:" in str(model.get("description", "")), f"{sql.stem} states no grain"


def test_no_yaml_file_is_over_300_lines() -> None:
    for path in PROJECT.rglob("*.yml"):
        if "target" in path.parts or "dbt_packages" in path.parts:
            continue
        lines = len(path.read_text().splitlines())
        assert lines <= 300, f"{path.relative_to(PROJECT)} has {lines} lines"


def test_every_mart_is_in_the_readme_grain_table() -> None:
    readme = (PROJECT / "README.md").read_text()
    first_cells = re.findall(r"^\| (`[^|]*`) \|", readme, flags=re.MULTILINE)
    listed = {name for cell in first_cells for name in re.findall(r"(?:fct|dim)_\w+", cell)}
    marts = {sql.stem for sql in (MODELS / "marts").rglob("*.sql")}
    assert marts == listed


def test_no_column_description_is_written_out_in_several_models() -> None:
    texts: Counter[str] = Counter()
    for model in _yaml_models().values():
        for column in model.get("columns") or []:  # type: ignore[attr-defined]
            text = " ".join(str(column.get("description", "")).split())
            if text and "doc(" not in text:
                texts[text] += 1
    repeated = [text for text, count in texts.items() if count > 2]
    assert repeated == [], repeated
