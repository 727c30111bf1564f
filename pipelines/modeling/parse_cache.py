"""dbt's parse of the shipped project, kept once per user: a build in a folder dbt has not built
in before reuses it instead of parsing ~330 nodes again (about half of a first build's CPU).

dbt keeps its own partial parse (`target/partial_parse.msgpack`) beside each warehouse, but throws
it away whenever the profile's connection changes, and a DuckDB file's path is part of that: every
new warehouse, every test folder and every fresh container parsed the whole project again. The
parse depends only on what the key below covers, so one copy per key serves them all; dbt still
compiles and runs every node, and writes `manifest.json` and `semantic_manifest.json` as always.

The cache lives in `$XDG_CACHE_HOME/signing-etl/dbt-parse` (`~/.cache/...`), or in the folder
`SIGNING_DBT_PARSE_CACHE` names; `SIGNING_DBT_PARSE_CACHE=off` keeps none. A key is a digest: no
path, host or name is readable from it, and a password is never part of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path

from dbt.contracts.graph.manifest import Manifest

CACHE_VARIABLE = "SIGNING_DBT_PARSE_CACHE"
PARTIAL_PARSE_FILE = "partial_parse.msgpack"
# Folders of the project that dbt writes or installs, not part of what it parses.
_NOT_PARSED = frozenset({"target", "logs", "dbt_packages", "__pycache__"})
# Secrets never reach the key (dbt keeps `DBT_ENV_SECRET_*` out of its artifacts too).
_SECRET_PREFIX = "DBT_ENV_SECRET_"


def cache_folder() -> Path | None:
    """Where parses are kept, or None when the user turned the cache off."""
    chosen = os.environ.get(CACHE_VARIABLE, "")
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "signing-etl" / "dbt-parse"


def parse_key(project_dir: Path, target_name: str | None, environment: Mapping[str, str]) -> str:
    """A digest of everything the parse depends on: dbt's packages, where the project is and
    every file of it, the profile's output, and the non-secret values its connection reads,
    with a DuckDB file's path cut to its name (dbt names the database after the file)."""
    digest = hashlib.sha256()
    for part in (*_dbt_versions(), str(project_dir.resolve()), target_name or "default"):
        digest.update(part.encode() + b"\0")
    for name in sorted(environment):
        if name.startswith(_SECRET_PREFIX):
            continue
        value = environment[name]
        if target_name is None:  # DuckDB: only the file's name reaches the parse
            value = Path(value).name
        digest.update(f"{name}={value}".encode() + b"\0")
    for path in sorted(_project_files(project_dir)):
        digest.update(str(path.relative_to(project_dir)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@cache
def _dbt_versions() -> tuple[str, ...]:
    """dbt's packages and their versions: the adapters' macros are part of the parse too."""
    found = {
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in metadata.distributions()
        if (dist.metadata["Name"] or "").lower().startswith("dbt")
    }
    return tuple(sorted(found))


def _project_files(project_dir: Path) -> list[Path]:
    return [
        path
        for path in project_dir.rglob("*")
        if path.is_file()
        and not _NOT_PARSED.intersection(path.relative_to(project_dir).parts)
        and not path.name.startswith(".")
    ]


def cached_parse(key: str) -> Manifest | None:
    """The parse kept under `key`, ready for dbt; None when there is none or it cannot be read
    (another dbt version's, a truncated file): dbt then parses as usual."""
    folder = cache_folder()
    if folder is None:
        return None
    try:
        manifest = Manifest.from_msgpack((folder / f"{key}.msgpack").read_bytes())
        manifest.build_flat_graph()  # type: ignore[no-untyped-call]
    except Exception:  # any unreadable copy is only a cache miss
        return None
    return manifest


def keep_parse(key: str, target_dir: Path) -> None:
    """Keep the parse dbt just wrote in `target_dir` under `key`, written whole or not at all
    (two builds may keep one key at once); a cache that cannot be written is no failure."""
    folder = cache_folder()
    parsed = target_dir / PARTIAL_PARSE_FILE
    if folder is None or not parsed.is_file():
        return
    temporary = folder / f".{key}.{os.getpid()}.{threading.get_ident()}.keeping"
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(parsed, temporary)
            os.replace(temporary, folder / f"{key}.msgpack")
        finally:
            temporary.unlink(missing_ok=True)
