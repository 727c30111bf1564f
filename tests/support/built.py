"""Warehouses made once per test session and copied to every module that asks for the same one:
a load and a dbt build cost tens of seconds, a file copy milliseconds.

The first module that asks makes it under a lock that every xdist worker of the session shares;
the others wait for it, then copy it. A module that only reads a warehouse, or changes its copy,
gets the same result as if it had made its own."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# What a maker returns, kept beside the warehouse for the modules that copy it (e.g. when the
# loads began and ended, which a copy cannot measure again).
Notes = dict[str, str]


def session_folder(factory: pytest.TempPathFactory) -> Path:
    """A folder of this test session that every xdist worker shares: the parent of the
    workers' own temporary folders, or the one temporary folder when there are no workers."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def copied_warehouse(folder: Path, into: Path) -> Path:
    """A folder a load filled (`signing.duckdb` and the working folders beside it: dlt's state,
    the working file) copied into `into`, the same files the load would have left there; the
    copy's warehouse. A test that changes its copy leaves the original to the others."""
    shutil.copytree(folder, into, dirs_exist_ok=True)
    return into / "signing.duckdb"


def _key(recipe: str) -> str:
    """A recipe's file name: its digest (a recipe may hold any text)."""
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def done_once(factory: pytest.TempPathFactory, recipe: str, do: Callable[[], None]) -> None:
    """Call `do` the first time this session asks for `recipe`, under the lock every xdist
    worker shares; a later ask waits until it is done and does nothing (two modules writing
    one file at once would each read the other's half-written one). A `do` that failed is
    tried again by the next ask."""
    folder = session_folder(factory) / "done-once"
    folder.mkdir(exist_ok=True)
    done = folder / _key(recipe)
    with _locked(folder / f"{done.name}.lock"):
        if not done.exists():
            do()
            done.touch()


def made_once(
    factory: pytest.TempPathFactory,
    recipe: str,
    make: Callable[[Path], Notes],
    into: Path,
) -> Notes:
    """Copy into the folder `into` the folder that `make(folder)` filled (a warehouse file
    and its working folders beside it), calling `make` only the first time this session asks
    for `recipe` (`done_once`); the notes it returned. `recipe` names everything `make`
    depends on: two calls with the same recipe must make the same warehouse."""
    cache = session_folder(factory) / "made-once"
    cache.mkdir(exist_ok=True)
    made, notes = cache / _key(recipe), cache / f"{_key(recipe)}.json"

    def make_it() -> None:
        shutil.rmtree(made, ignore_errors=True)  # what a maker that failed left
        made.mkdir()
        notes.write_text(json.dumps(make(made)))

    done_once(factory, f"made once: {recipe}", make_it)
    copied_warehouse(made, into)
    found: Notes = json.loads(notes.read_text())
    return found
