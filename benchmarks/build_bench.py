"""What one build of the models costs: `signing-etl models` as a scheduler or a test starts it.

A sandbox (`--shipments`, limits off) is loaded once without the models; then `--builds`
builds run one after another, each `signing-etl models` in a process of its own on a fresh copy
of that loaded file (so every build does the same work: models, snapshots' first versions,
data tests). The first build parses the project (dbt's parse is then kept in the parse cache,
`SIGNING_DBT_PARSE_CACHE`, a temporary folder here); the others reuse it, as every later
command does. It prints each build's wall and CPU seconds (the child's, start-up included) and
its nodes, then the medians of the builds after the first.

    uv run python -m benchmarks.build_bench                   # 200 shipments, 4 builds
    uv run python -m benchmarks.build_bench --shipments 1000 --builds 6
    uv run python -m benchmarks.build_bench --threads 4       # dbt's threads (SIGNING_DBT_THREADS)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks.child import cli_environment, timed_cli, timed_cli_load
from benchmarks.load_bench import START_MS
from sandbox import RunningSandbox, SandboxConfig


def one_build(loaded: Path, workdir: Path, env: dict[str, str], number: int) -> tuple[float, float]:
    """`signing-etl models` on a fresh copy of the loaded file: its wall and CPU seconds."""
    folder = workdir / f"build-{number}"
    folder.mkdir()
    warehouse = folder / "signing.duckdb"
    shutil.copyfile(loaded, warehouse)
    wall, cpu, said = timed_cli(["models", "--duckdb", str(warehouse)], env)
    summary = said.strip().splitlines()[-1].split("INFO ", 1)[-1]
    print(f"build {number}: {wall:.1f} s wall, {cpu:.1f} s CPU; {summary}", flush=True)
    shutil.rmtree(folder)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=200)
    parser.add_argument("--builds", type=int, default=4)
    parser.add_argument("--threads", type=int, help="dbt's threads; default: the profile's")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="signing-build-"))
    config = SandboxConfig(
        seed=5, shipments=args.shipments, start_ms=START_MS, limits_enabled=False
    )
    try:
        with RunningSandbox(config) as running:
            env = cli_environment(running.base_url, running.api_key)
            env["SIGNING_DBT_PARSE_CACHE"] = str(workdir / "parse-cache")
            if args.threads:
                env["SIGNING_DBT_THREADS"] = str(args.threads)
            loaded = workdir / "loaded.duckdb"
            seconds = timed_cli_load(loaded, env, "--no-models")
            print(f"load without models: {seconds:.1f} s", flush=True)
            builds = [one_build(loaded, workdir, env, n) for n in range(1, args.builds + 1)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    later = builds[1:] or builds
    wall = statistics.median(wall for wall, _ in later)
    cpu = statistics.median(cpu for _, cpu in later)
    print(f"median of the builds after the first: {wall:.1f} s wall, {cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
