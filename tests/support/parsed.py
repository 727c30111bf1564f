"""One warehouse path that several tests of a module build at, one after the other, so that
dbt parses the project once for them instead of once each.

dbt keeps its parse of the project (`target/partial_parse.msgpack`) and reuses it only when the
profile it connects with is unchanged, and a DuckDB profile names the warehouse's path: a build
at a new path parses ~330 nodes afresh, about half of a build's CPU. `fresh_place` and
`fresh_copy` give a folder holding nothing but that saved parse (and the copy), as if the folder
were new: nothing else of the tests before (working files, dbt's logs and artifacts, run
records, journals) is left."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipelines.modeling.build import dbt_dir_for

# What dbt reads back to skip parsing the project again (dbt's own name, in its target folder).
SAVED_PARSE = Path("target") / "partial_parse.msgpack"


def fresh_place(folder: Path) -> Path:
    """`folder/signing.duckdb`, not there yet, in a folder emptied of everything but dbt's saved
    parse from a build at this same path before (if any)."""
    warehouse = folder / "signing.duckdb"
    saved_at = dbt_dir_for(warehouse) / SAVED_PARSE
    saved = saved_at.read_bytes() if saved_at.is_file() else None
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if saved is not None:
        saved_at.parent.mkdir(parents=True)
        saved_at.write_bytes(saved)
    return warehouse


def fresh_copy(source: Path, folder: Path) -> Path:
    """`fresh_place(folder)`, a copy of the DuckDB file `source`."""
    warehouse = fresh_place(folder)
    shutil.copy(source, warehouse)
    return warehouse
