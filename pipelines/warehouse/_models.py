"""What the dbt models need of a warehouse: a check, before dbt starts, that they can run there,
and dbt's target with the environment its profile reads. `Warehouse` inherits it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from pipelines.environment import environment_set
from pipelines.errors import (
    AlreadyRunning,
    ModelsError,
    ModelsUnreachable,
    ModelsWarehouseMissing,
    WarehouseError,
)

from . import _duckdb
from ._postgres import dbt_environment

WAREHOUSE_VARIABLE = "SIGNING_WAREHOUSE"  # the DuckDB file models/profiles.yml opens


@dataclass(frozen=True)
class DbtTarget:
    """How dbt reaches a warehouse: the profiles.yml output (None: the default, DuckDB) and
    the environment variables that output reads."""

    name: str | None
    environment: dict[str, str]


class ModelsPlace:
    """The models' side of `Warehouse`, which provides the place it describes."""

    path: Path
    destination: str

    @property
    def is_file(self) -> bool:
        raise NotImplementedError

    @property
    def dbt_dir(self) -> Path:
        raise NotImplementedError

    @property
    def working_path(self) -> Path:
        raise NotImplementedError

    def publishing(self, *, brief: str | None = None) -> AbstractContextManager[None]:
        raise NotImplementedError

    def models_hold(self, *, brief: str | None = None) -> AbstractContextManager[None]:
        raise NotImplementedError

    def check_for_models(self) -> None:
        """Fail in one line, before dbt starts, when the models cannot run here; creates dbt's
        folder on the way.

        Raises:
            ModelsWarehouseMissing: no DuckDB file at `path`.
            ModelsError: a folder, a file DuckDB cannot open (not a database, another process
                holds it, no permission), or a folder that cannot be written in (DuckDB writes
                its `.wal` there, dbt its target and logs).
        """
        if not self.is_file:
            self.dbt_dir.mkdir(parents=True, exist_ok=True)
            return
        if not self.working_path.exists():
            raise ModelsWarehouseMissing(
                f"no warehouse at {self.path}: load it first (`signing-etl load`), or point "
                "--duckdb at an existing one"
            )
        problem = _duckdb.models_problem(self.working_path, self.dbt_dir, shown=self.path)
        if problem:
            raise ModelsError(problem)

    def dbt_target(self) -> DbtTarget:
        """dbt's target for this warehouse (profiles.yml), with the credentials the load uses.

        Raises:
            ModelsError: a destination the models do not build on, or its credentials
                missing or unusable (one line, never quoting them).
        """
        environment = {WAREHOUSE_VARIABLE: str(self.working_path)}
        if self.is_file:
            return DbtTarget(None, environment)
        return DbtTarget(self.destination, {**environment, **dbt_environment(self.destination)})

    @contextlib.contextmanager
    def for_dbt(self) -> Iterator[DbtTarget]:
        """dbt's target, its environment set while the block runs, within a run of the
        warehouse (`publishing`: dbt writes the working file, which is published after it
        unless an outer run holds it); dbt's own connections to a DuckDB file are released
        before that, so a load can open it again."""
        with contextlib.ExitStack() as run:
            try:
                run.enter_context(self.publishing())
            except AlreadyRunning:
                raise  # busy: the caller's exit 75, not a models error
            except WarehouseError as error:  # a folder, or nowhere to write: nothing was run
                if self.path.is_dir():
                    raise ModelsError(
                        f"{self.path} is a folder, not a warehouse: point --duckdb at the file"
                    ) from None
                raise ModelsError(str(error)) from None
            target = self.dbt_target()
            try:  # no load step writes while dbt reads
                run.enter_context(self.models_hold())
            except AlreadyRunning:
                raise  # busy: the caller's exit 75
            except WarehouseError as error:  # the server refused the lock's connection
                raise ModelsUnreachable(str(error)) from None
            try:
                with environment_set(target.environment):
                    yield target
            finally:
                self.release_dbt()

    def release_dbt(self) -> None:
        """Close dbt's in-process connections to a DuckDB file, so this process (a build's
        record, the next load) can open it again; nothing for other destinations."""
        if self.is_file:
            _duckdb.close_dbt_connections()
