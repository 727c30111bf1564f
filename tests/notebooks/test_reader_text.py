"""The notebooks' text speaks to their readers: the prose the report shows (and an analyst reads
in the notebook) names no file of the project, no module and no notebook cell, only what the
reader sees and the tables they query."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
# What a developer's note looks like: a path of the project, a YAML file, a cell or a module.
DEVELOPER_NOTES = re.compile(
    r"models/|pipelines/|notebooks/|\.ya?ml\b|\bthis cell\b|\bcells?\b|report_assets|\.py\b",
    re.IGNORECASE,
)


def prose(notebook: Path) -> list[str]:
    """The markdown cells' text, and the sentences the code says to the reader (`say(...)`)."""
    cells = json.loads(notebook.read_text())["cells"]
    texts = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    for cell in cells:
        if cell["cell_type"] == "code":
            texts += re.findall(r'say\(\s*f?"([^"]*)"', "".join(cell["source"]))
    return texts


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_the_notebooks_prose_names_no_file_module_or_cell(notebook: Path) -> None:
    texts = prose(notebook)
    assert texts, f"{notebook.name} has no prose to check"
    notes = [m.group(0) for text in texts for m in DEVELOPER_NOTES.finditer(text)]
    assert notes == [], f"{notebook.name}: {notes}"
