"""The run locks' side of `Warehouse`: a DuckDB file's lock file beside it (`_lock`), and per
workspace of a destination that takes concurrent writers, advisory locks in a PostgreSQL
database (`_advisory`) or, elsewhere, a lock file per workspace. `Warehouse` inherits it, so
every path that writes (a load, a drain, `forget`, Dagster's assets) takes them by
construction."""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pipelines.errors import AlreadyRunning, WorkspaceBusy

from ._advisory import (
    PRIVACY_KEY,
    held_in_database,
    models_key,
    oldest_holder,
    shared_in_database,
    workspace_key,
)
from ._lock import held_lock, holder
from ._postgres import POSTGRES

DATASET = "raw"  # dlt's dataset: the raw tables, the state, the run records


class LockPlace:
    """The locks' side of `Warehouse`, which provides what it names here."""

    path: Path
    destination: str

    @property
    def is_file(self) -> bool:
        raise NotImplementedError

    @property
    def working_path(self) -> Path:
        raise NotImplementedError

    @property
    def pipelines_dir(self) -> Path:
        raise NotImplementedError

    def writer(self, *, brief: str | None = None) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def workspaces(self) -> Sequence[Any]:
        raise NotImplementedError

    @contextlib.contextmanager
    def exclusive(self, scope: str | None = None, *, brief: str | None = None) -> Iterator[None]:
        """Hold a run lock beside the warehouse (`.<file>.lock`, or `.<scope>.lock`), or fail
        at once if another run has it (a hold that says it is `brief`, such as a webhook
        drain's, is waited for first). A run that wrote nothing (a refused key, a wrong URL)
        takes its lock file and new folders away again."""
        lock_path = self.path.parent / f".{scope or self.path.name}.lock"

        def wrote_nothing() -> bool:
            return bool(scope) or not any(
                p.exists() for p in (self.path, self.working_path, self.pipelines_dir)
            )

        with held_lock(lock_path, scope or self.path, wrote_nothing, brief):
            yield

    def running(self) -> str | None:
        """Who holds the warehouse's run lock now (`pid N since T on HOST`), never waiting for
        it; on PostgreSQL, the longest-running holder of a workspace's lock; None when no run
        does (or it cannot be asked; other destinations' lock files are not)."""
        if self.is_file:
            return holder(self.path.parent / f".{self.path.name}.lock")
        if self.destination == POSTGRES:
            return oldest_holder()
        return None

    @contextlib.contextmanager
    def holding_every_workspace(self) -> Iterator[None]:
        """What a change to every workspace's rows (an erasure) holds: a DuckDB file's writer;
        elsewhere the lock of each workspace loaded so far, the one its loads take."""
        if self.is_file:
            with self.writer():
                yield
            return
        with self.workspace_locks([workspace.id for workspace in self.workspaces()]):
            yield

    @contextlib.contextmanager
    def workspace_session(self, workspace_id: str, *, brief: str | None = None) -> Iterator[Path]:
        """dlt's working folder for one workspace's run. A DuckDB file keeps it beside itself.
        Elsewhere loads of several workspaces or machines run at once: each holds only its
        workspace's lock (`workspace_locks`), and its state comes from the destination every
        time (the folder is temporary), so they never mix their state."""
        if self.is_file:
            yield self.pipelines_dir
            return
        with (
            self.workspace_locks([workspace_id], brief=brief),
            tempfile.TemporaryDirectory() as folder,
        ):
            yield Path(folder)

    @contextlib.contextmanager
    def models_hold(self, *, brief: str | None = None) -> Iterator[None]:
        """What a model build, or a refresh of the marts, holds while dbt reads `raw`: in a
        PostgreSQL database the models' lock alone, for which every host's load steps wait
        (`load_step`), as it waits for theirs. A table dlt merged before its load is recorded
        shows a staging view the old rows gone and the new ones not yet there, which dbt's
        snapshots would keep as deletions for ever. A DuckDB file's run lock keeps loads out
        already; other destinations build no models."""
        if self.destination != POSTGRES:
            yield
            return
        held_on = "the models of the postgres destination"
        with held_in_database([models_key(DATASET)], held_on, brief):
            yield

    @contextlib.contextmanager
    def workspace_locks(
        self, workspace_ids: Sequence[str], *, brief: str | None = None
    ) -> Iterator[None]:
        """The run locks of these workspaces of a destination that takes concurrent writers,
        the one place they are taken: in a PostgreSQL database, advisory locks held by a
        session of their own (`_advisory`: every host sees them, and they go with the
        session); for other destinations, a lock file per workspace beside `path`, which
        covers this host only."""
        with contextlib.ExitStack() as held:
            try:
                if self.destination == POSTGRES:
                    held_on = f"workspace {', '.join(workspace_ids)} of the postgres destination"
                    keys = [workspace_key(DATASET, workspace_id) for workspace_id in workspace_ids]
                    held.enter_context(held_in_database(keys, held_on, brief))
                else:
                    for workspace_id in workspace_ids:
                        scope = f"{self.destination}.{workspace_id}"
                        held.enter_context(self.exclusive(scope, brief=brief))
            except AlreadyRunning as busy:  # these workspaces' alone, not the warehouse's
                raise WorkspaceBusy(str(busy)) from None
            yield


# One lock per destination for the load step of workspaces loading side by side in this
# process: two first loads creating the same tables at once collide in the database's catalog
# (Postgres: duplicate key in pg_type). Fetching, the long part, stays side by side.
_LOAD_STEP_LOCKS: dict[str, threading.Lock] = defaultdict(threading.Lock)


@contextlib.contextmanager
def load_step(destination: str, dataset: str) -> Iterator[None]:
    """dlt's load step into `dataset` of `destination`, the one place every load and drain
    writes rows: one at a time per destination in this process, and in a PostgreSQL database
    never while a model build holds the models' lock (`LockPlace.models_hold`) or a new
    privacy policy's rewrite holds the privacy lock (`PRIVACY_KEY`); load steps of other
    hosts run beside it. (A DuckDB file has one writer: neither can run beside a load.)"""
    with _LOAD_STEP_LOCKS[destination]:
        if destination != POSTGRES:
            yield
            return
        with shared_in_database([models_key(dataset), PRIVACY_KEY], "load step"):
            yield
