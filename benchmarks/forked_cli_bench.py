"""What a `signing-etl` command costs when the test suite runs it: forked from the worker's
warm process (`tests/support/forked_cli.py`), as `run_cli` runs nearly every command.

A sandbox (`--shipments`, limits off) is served in this process, and one forking process runs
rounds of three commands: a first load without the models into a new file, `status` of that
file, and `models` on a fresh copy of a file loaded once beforehand. A command's CPU is what
its forked child used (user and system), read from the forking process's `/proc` entry as it
reaps each child (Linux only). A first round parses the dbt project and keeps the parse, as a
worker's first build does; the medians printed are those of the `--rounds` rounds after it.

    uv run python -m benchmarks.forked_cli_bench                 # 300 shipments, 3 rounds
    uv run python -m benchmarks.forked_cli_bench --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from sandbox import RunningSandbox, SandboxConfig
from tests.support import START_MS, cli_env, describe
from tests.support.cpu_log import reaped_children_seconds
from tests.support.forked_cli import ForkedCli


def timed(cli: ForkedCli, args: list[str], env: dict[str, str]) -> float:
    """One forked command, which must succeed: its child's CPU seconds."""
    before = reaped_children_seconds(cli.process_group)
    result = cli.run(args, env=env)
    assert result.returncode == 0, describe(result)
    return reaped_children_seconds(cli.process_group) - before


def one_round(cli: ForkedCli, env: dict[str, str], loaded: Path, folder: Path) -> dict[str, float]:
    """A first load into a new file, `status` of it, and `models` on a copy of `loaded`."""
    new = folder / "signing.duckdb"
    copy = folder / "built.duckdb"
    spent = {"load": timed(cli, ["load", "--duckdb", str(new), "--no-models"], env)}
    spent["status"] = timed(cli, ["status", "--duckdb", str(new)], env)
    shutil.copyfile(loaded, copy)
    spent["models"] = timed(cli, ["models", "--duckdb", str(copy)], env)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    config = SandboxConfig(
        seed=3, shipments=options.shipments, start_ms=START_MS, limits_enabled=False
    )
    work = Path(tempfile.mkdtemp(prefix="forked-cli-bench-"))
    seconds: dict[str, list[float]] = {"load": [], "status": [], "models": []}
    try:
        with RunningSandbox(config) as running:
            # dbt's parse kept apart from the user's, and made by a first build before the rounds.
            env = {**cli_env(running), "SIGNING_DBT_PARSE_CACHE": str(work / "parse-cache")}
            cli = ForkedCli(work, cli_env(None))
            try:
                loaded = work / "loaded.duckdb"
                timed(cli, ["load", "--duckdb", str(loaded), "--no-models"], env)
                one_round(cli, env, loaded, work / "first")
                for number in range(options.rounds):
                    for name, spent in one_round(cli, env, loaded, work / str(number)).items():
                        seconds[name].append(spent)
            finally:
                cli.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, values in seconds.items():
        rounded = ", ".join(f"{value:.2f}" for value in values)
        print(f"{name:7s} median {statistics.median(values):.2f} s of CPU ({rounded})")


if __name__ == "__main__":
    main()
