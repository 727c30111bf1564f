"""The run locks' side of `Warehouse`: a DuckDB file's lock file beside it (`_lock`), and per
workspace of a destination that takes concurrent writers, advisory locks in a PostgreSQL
database (`_advisory`) or, elsewhere, a lock file per workspace. `Warehouse` inherits it, so
every path that writes (a load, a drain, `forget`, Dagster's assets) takes them by
construction."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pipelines.errors import AlreadyRunning, WorkspaceBusy

from ._advisory import held_in_database, oldest_holder, workspace_key
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
