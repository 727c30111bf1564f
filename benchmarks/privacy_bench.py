"""What the privacy policy costs a DuckDB warehouse: loads under `keep` and `minimal`, the load
that brings a loaded warehouse from `keep` to `minimal` (every personal column rewritten, the
file written afresh), and erasing one person.

One sandbox (limits off) is served by this process. Printed: the wall time of a first load
under each policy, of a load with nothing new under each (median of `--rounds`), of the
switching load (with the rows it rewrote), and of `forget_person` (without the models).

    uv run python -m benchmarks.privacy_bench                   # 2,000 shipments, 5 rounds
    uv run python -m benchmarks.privacy_bench --shipments 5000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from pipelines.environment import environment_set
from pipelines.load.run import LoadResult, load_incremental
from pipelines.privacy.erasure import forget_person
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox, SandboxConfig
from tests.support.loading import fast

START_MS = 1_767_225_600_000
KEY = {"SOURCES__SIGNING__PRIVACY__HASH_KEY": "benchmark-hash-key-0123456789"}
KEEP = {**KEY, "SOURCES__SIGNING__PRIVACY__PRESET": "keep"}
MINIMAL = {**KEY, "SOURCES__SIGNING__PRIVACY__PRESET": "minimal"}


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    began = time.monotonic()
    outcome = call()
    return time.monotonic() - began, outcome


def load(running: RunningSandbox, warehouse: Path, policy: dict[str, str]) -> LoadResult:
    with environment_set(policy):
        result = load_incremental(warehouse, settings=fast(running))
    assert result.exit_code == 0, result.stopped
    return result


def median_unchanged(
    running: RunningSandbox, warehouse: Path, policy: dict[str, str], rounds: int
) -> float:
    return statistics.median(
        timed(lambda: load(running, warehouse, policy))[0] for _ in range(rounds)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    config = SandboxConfig(
        seed=8, shipments=args.shipments, start_ms=START_MS, limits_enabled=False
    )
    workdir = Path(tempfile.mkdtemp(prefix="signing-privacy-"))
    try:
        with RunningSandbox(config) as running:
            for name, policy in (("keep", KEEP), ("minimal", MINIMAL)):
                warehouse = workdir / name / "signing.duckdb"
                first, result = timed(partial(load, running, warehouse, policy))
                rows = sum(result.rows.values())
                unchanged = median_unchanged(running, warehouse, policy, args.rounds)
                print(
                    f"{name:8}: first load {first:5.1f} s ({rows:,} rows); nothing new "
                    f"{unchanged:5.2f} s (median of {args.rounds})",
                    flush=True,
                )
            switched = workdir / "keep" / "signing.duckdb"
            seconds, result = timed(lambda: load(running, switched, MINIMAL))
            said = next((w for w in result.stats.warnings if "privacy policy" in w), "")
            print(f"keep to minimal: {seconds:5.1f} s ({said.count(' in ')} columns rewritten)")
            person = next(iter(running.store.contacts.by_id.values())).email
            with environment_set(MINIMAL):
                seconds, erased = timed(lambda: forget_person(Warehouse.at(switched), email=person))
            print(f"forget one person: {seconds:5.2f} s ({sum(erased.changed.values())} rows)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
