"""The published copy of a DuckDB warehouse: runs write a working file only the pipeline opens,
and each run that ends well replaces the file analysts open with a consistent copy of it.

DuckDB takes one writer per file and refuses it while any other process has the file open, a
read-only reader too. So the file at `--duckdb PATH` is never written in place: loads, drains
and models write `.<stem>.work/<name>` beside it (same file name, so DuckDB names the database
the same and dbt's views read the same in both), and at the end of a run the working file is
checkpointed, copied beside the published one and renamed onto it. A reader holding the old
file keeps reading it (its inode lives on until it lets go); the next open sees the new one.

The published file is also what the working file is made from: on the first run after an
upgrade (a warehouse written in place) and whenever it changed behind the pipeline's back (a
restored backup, a file copied in), the working file is seeded from it; when it was removed,
the working file goes too, as the warehouse itself did before."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb

from pipelines.errors import WarehouseError, WarehousePathError, first_line

from ._duckdb import has_duckdb_header

STAMP = "published"  # in the working folder: size and mtime of the copy last published
_held = threading.local()  # per thread: the published paths whose run it holds


def working_folder(published: Path) -> Path:
    """The pipeline's own folder beside the published file."""
    return published.parent / f".{published.stem}.work"


def check_own_folders(published: Path) -> None:
    """One line when another warehouse beside `published` has its stem (`x.db` beside
    `x.duckdb`, both loaded): the working and dlt folders are named after the stem, so their
    runs would write each other's state and working copy, and lose each other's rows. A copy
    no run has used (`x.bak`, a backup) is no warehouse, and is let be.

    Raises:
        WarehousePathError: such a file exists (a DuckDB database, not a text).
    """
    stem = published.stem
    for other in sorted(published.parent.glob(f"{glob.escape(stem)}*")):
        same_stem = other.name != published.name and other.stem == stem and other.is_file()
        # Only a warehouse runs have used (its lock beside it): a backup copy is no clash.
        used = (other.parent / f".{other.name}.lock").exists()
        if same_stem and used and has_duckdb_header(other):
            raise WarehousePathError(
                f"{other.name} beside {published} would share its working folders "
                f"(.{stem}.work, .{stem}.dlt): rename one of the two files"
            )


def working_file(published: Path) -> Path:
    """The file runs write: same name as the published one, in the working folder."""
    return working_folder(published) / published.name


@contextlib.contextmanager
def run_held(published: Path) -> Iterator[bool]:
    """Whether this thread holds the run of `published` already (True: a nested hold, which
    neither seeds nor publishes), marked held for the block."""
    holding: set[Path] = getattr(_held, "paths", set())
    _held.paths = holding
    if published in holding:
        yield True
        return
    holding.add(published)
    try:
        yield False
    finally:
        holding.discard(published)


def _identity(path: Path) -> str:
    found = path.stat()
    return f"{found.st_size} {found.st_mtime_ns}"


def seed(published: Path, dlt_folder: Path) -> None:
    """Make the working file what the published file says, when they may differ: the first
    run after an upgrade, a published file replaced (a backup restored, an analyst's write)
    or removed by hand, a run whose models failed and left its work unpublished. dlt's
    working folder goes too: its state (the cursors) would run ahead of the rows, and the
    next load would skip what the published file lacks; each workspace's load restores its
    state from the warehouse instead. Called under the run lock, before anything is written."""
    working, stamp = working_file(published), working_folder(published) / STAMP
    if not published.exists():
        if stamp.exists():  # published once, removed since: the warehouse starts afresh
            shutil.rmtree(working_folder(published), ignore_errors=True)
            shutil.rmtree(dlt_folder, ignore_errors=True)
        return
    if working.exists() and stamp.exists() and stamp.read_text() == _identity(published):
        return
    shutil.rmtree(dlt_folder, ignore_errors=True)
    try:
        working.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", ".wal"):  # a WAL an earlier version left is replayed on open
            source = Path(f"{published}{suffix}")
            target = Path(f"{working}{suffix}")
            target.unlink(missing_ok=True)
            if source.exists():
                shutil.copyfile(source, target)
        stamp.write_text(_identity(published))
    except OSError as error:
        raise WarehouseError(
            f"cannot copy {published} to the pipeline's working file ({error.strerror}); "
            "free some space or choose another --duckdb"
        ) from None


def publish(published: Path) -> None:
    """Replace the published file with a consistent copy of the working file: checkpointed
    (nothing left in its WAL), copied beside it, flushed, and renamed onto it in one step."""
    working = working_file(published)
    if not working.exists():
        return
    try:
        with duckdb.connect(str(working)) as connection:
            connection.execute("checkpoint")
    except duckdb.Error as error:
        raise WarehouseError(
            f"cannot publish {published} ({first_line(error)}); the run is kept in {working} "
            "and published by the next one"
        ) from None
    fresh = published.with_name(f".{published.name}.publishing")
    try:
        shutil.copyfile(working, fresh)
        with open(fresh, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(fresh, published)
        (working_folder(published) / STAMP).write_text(_identity(published))
    except OSError as error:
        fresh.unlink(missing_ok=True)
        raise WarehouseError(
            f"cannot publish {published} ({error.strerror}); the run is kept in "
            f"{working} and published by the next one"
        ) from None
