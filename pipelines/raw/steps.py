"""dlt's steps of one load, for every destination: the privacy policy the rows are written under
(`privacy_gate`), what an interrupted run left, then extract, the load files chosen by what was
fetched, normalize, and load under the destination's lock (the workspace's run lock asked
first: `confirm_run_locks`, and the gate again: `confirm_admitted`), and what the load changed
in the service's shape (`schema_changes`). Every path that writes rows into `raw` loads so: a
run of the incremental load (a full refresh included) and a webhook drain."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import dlt
from dlt.common.pipeline import ExtractInfo, LoadInfo

from pipelines.raw.privacy_gate import PrivacyChanged, admit, confirm_admitted
from pipelines.raw.schema_changes import SchemaChanges, catalog, find_changes
from pipelines.warehouse import (
    LoadFileFormat,
    confirm_run_locks,
    ensure_datasets,
    load_step,
    retried,
)
from sources.signing import RunStats, SyncContext


@dataclass
class LoadSteps:
    """`pipeline.run` as its steps, for every destination: the state from the destination, the
    privacy policy in force in the warehouse given to the source, what an interrupted run left,
    extract, the load files chosen by what was fetched (`LoadFileFormat`), normalize, and load
    under its destination's lock."""

    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    schema_changes: SchemaChanges = field(default_factory=SchemaChanges)

    def run(
        self, pipeline: dlt.Pipeline, connection: SyncContext, source: Any, stats: RunStats
    ) -> LoadInfo:
        """Load what `source` (bound to `connection`) yields into the pipeline's dataset, its
        rows under the policy the warehouse is under now, read while the caller holds it.

        Raises:
            PrivacyRefused: these settings cannot write under that policy; nothing is written.
        """
        ensure_datasets(pipeline)  # never by dlt's plain `create schema`: runs collide there
        pipeline.sync_destination()  # as `pipeline.run` does: the newer of the two states
        with pipeline.sql_client() as client:  # the gate: before anything is fetched or loaded
            connection.privacy = admit(client, connection.privacy, connection.workspace_id, stats)
            before = catalog(client)
        if pipeline.has_pending_data:
            # An earlier run stopped between fetching and loading (killed, the disk full):
            # what it fetched goes in first. `pipeline.run` would stop there; this run goes on.
            stats.warn("loaded what an interrupted run had fetched before this run's own")
            if pipeline.list_extracted_load_packages():
                pipeline.normalize()
            with load_step(pipeline.destination.destination_name, pipeline.dataset_name):
                confirm_run_locks()  # as before every write of a run
                pipeline.load()
        stats.enter("fetching")
        extracted = self._timed("extract", pipeline.extract, source)
        file_format = pipeline.destination.caps_params.get("loader_file_format_selector")
        if isinstance(file_format, LoadFileFormat):
            file_format.choose_for(_records_in(extracted))
        stats.enter("normalizing")
        normalized = self._timed("normalize", pipeline.normalize)
        self.rows = {
            table: n
            for table, n in (normalized.row_counts if normalized else {}).items()
            if not table.startswith("_dlt")
        }
        stats.enter("loading")
        with load_step(pipeline.destination.destination_name, pipeline.dataset_name):
            confirm_run_locks()  # the workspace's lock still held: nobody else writes it now
            _confirm_policy(pipeline, connection)  # and its privacy policy the one read at first
            # dlt's step makes the tables it lacks: another host's may make them at the same
            # moment, and the step, run again, finds them made (`retried`).
            info: LoadInfo = self._timed("load", retried, "the load step", pipeline.load)
            confirm_run_locks()  # and still after dlt's step, which is not asked inside
        stats.enter("recording")
        with pipeline.sql_client() as client:
            held = connection.privacy.held_back
            self.schema_changes = find_changes(client, before, connection.workspace_id, held)
        for line in self.schema_changes.lines():  # the summary's, the record's, the drain's log
            stats.warn(line)
        return info

    def _timed(self, step: str, call: Any, *args: Any) -> Any:
        began = time.monotonic()
        try:
            return call(*args)
        finally:
            self.seconds[step] = time.monotonic() - began


def _confirm_policy(pipeline: dlt.Pipeline, connection: SyncContext) -> None:
    """The gate asked again, inside the load step, which a new policy's rewrite waits for. If
    the policy changed since the run passed the gate (on PostgreSQL, another host's load), the
    run's working folder goes (what it fetched, and the state it moved on) before the stop:
    the next run starts from the state in the warehouse and reads it all again."""
    try:
        with pipeline.sql_client() as client:
            confirm_admitted(client, connection.privacy, connection.workspace_id)
    except PrivacyChanged:
        pipeline.drop()
        raise


def _records_in(extracted: ExtractInfo) -> int:
    """Records an extract wrote (nested ones still inside their parents), `_dlt` tables aside."""
    return sum(
        table_metrics.items_count
        for metrics in extracted.metrics.values()
        for step in metrics
        for table, table_metrics in step["table_metrics"].items()
        if not table.startswith("_dlt")
    )
