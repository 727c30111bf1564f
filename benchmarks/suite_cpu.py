"""Where the test suite's CPU goes: per folder, per module and per test, with the CPU of the
processes the tests start (the `signing-etl` commands, Dagster's and Celery's workers, the
wheel's demo) counted with the test that started them.

It runs `pytest` (any arguments after `--` go to it) with `SIGNING_TEST_CPU_LOG` set, so that
`tests/support/cpu_log.py` logs every test phase, then sums the log up. Both cores stay busy
through a whole run, so the suite's time follows its CPU: this is what to read before deciding
what a tier holds (docs/development.md).

    uv run python -m benchmarks.suite_cpu                          # the whole suite
    uv run python -m benchmarks.suite_cpu -- -m "not slow"         # the quick tier
    uv run python -m benchmarks.suite_cpu --log cpu.tsv --only-sum  # sum up an earlier log
    uv run python -m benchmarks.suite_cpu --save-module-seconds tests/module_seconds.json

The last writes each module's wall seconds, the order the suite starts its modules in
(`tests/support/ordering.py`); write it from a whole run, after adding or changing a costly
module.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.cpu_log import LOG_VARIABLE

SHOWN = 15  # rows per table
# A test stays in the quick tier while its setup and call take under about this many seconds
# on two cores (docs/development.md, the tiers).
QUICK_TIER_SECONDS = 8.0


@dataclass
class Cost:
    """Seconds summed over test phases: wall, the test process's CPU, its children's CPU."""

    wall: float = 0.0
    own: float = 0.0
    children: float = 0.0
    tests: set[str] = field(default_factory=set)
    quick: bool = False  # in the quick tier (not marked slow)
    setup_and_call: float = 0.0  # wall seconds: what `--durations` shows a test cost

    @property
    def cpu(self) -> float:
        return self.own + self.children

    def add(self, test: str, wall: float, own: float, children: float) -> None:
        self.wall += wall
        self.own += own
        self.children += children
        self.tests.add(test)


def read_log(path: Path) -> dict[str, Cost]:
    """Each test's cost, from the plugin's lines (`tests/support/cpu_log.py`). A log written
    before the lines named the tier has no quick tier to report.

    Raises:
        ValueError: a line that is not the plugin's (one line naming it).
    """
    costs: dict[str, Cost] = collections.defaultdict(Cost)
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            test, phase, wall, own, children, _pid, _started, *tier = line.split("\t")
            cost = costs[test]
            cost.add(test, float(wall), float(own), float(children))
        except ValueError:
            raise ValueError(f"{path}:{number} is not a line of the suite's CPU log") from None
        cost.quick = tier == ["quick"]
        if phase != "teardown":
            cost.setup_and_call += float(wall)
    return costs


def quick_but_long(costs: dict[str, Cost], seconds: float = QUICK_TIER_SECONDS) -> str:
    """The quick tier's tests whose setup and call took longer than `seconds` (wall): each
    belongs among the slow ones, or its module's shared fixture does."""
    over = sorted(
        ((cost.setup_and_call, test) for test, cost in costs.items() if cost.quick),
        reverse=True,
    )
    over = [(took, test) for took, test in over if took > seconds]
    if not over:
        return f"\nno quick-tier test took over {seconds:.0f} s (setup and call)"
    lines = [f"\nquick-tier tests over {seconds:.0f} s (setup and call): mark them slow"]
    lines += [f"{took:8.1f} s  {test}" for took, test in over]
    return "\n".join(lines)


def grouped(costs: dict[str, Cost], *, by_module: bool) -> dict[str, Cost]:
    """Costs summed per module, or per folder (`tests/<folder>`)."""
    groups: dict[str, Cost] = collections.defaultdict(Cost)
    for test, cost in costs.items():
        module = test.split("::", 1)[0]
        name = module if by_module else str(Path(module).parent)
        groups[name].add(test, cost.wall, cost.own, cost.children)
    return groups


def table(title: str, costs: dict[str, Cost], total_cpu: float, shown: int = SHOWN) -> str:
    """The `shown` costliest rows, CPU first, with their share of the whole."""
    rows = [
        f"\n{title}",
        f"{'CPU s':>8} {'share':>6} {'in tests':>9} {'children':>9} {'tests':>6}  name",
    ]
    for name, cost in sorted(costs.items(), key=lambda item: -item[1].cpu)[:shown]:
        share = cost.cpu / total_cpu if total_cpu else 0.0
        rows.append(
            f"{cost.cpu:8.1f} {share:6.1%} {cost.own:9.1f} {cost.children:9.1f} "
            f"{len(cost.tests):6d}  {name}"
        )
    return "\n".join(rows)


def summary(path: Path, shown: int = SHOWN) -> str:
    """The log summed up: totals, then per folder, per module and per test."""
    costs = read_log(path)
    own = sum(cost.own for cost in costs.values())
    children = sum(cost.children for cost in costs.values())
    total = own + children
    head = (
        f"{len(costs)} tests: {total:.0f} s of CPU in their phases ({own:.0f} s in the test "
        f"processes, {children:.0f} s in processes they started)"
    )
    return "\n".join(
        [
            head,
            table("per folder", grouped(costs, by_module=False), total, shown),
            table("per module", grouped(costs, by_module=True), total, shown),
            table("per test", costs, total, shown),
            quick_but_long(costs),
        ]
    )


def save_module_seconds(log: Path, path: Path) -> None:
    """Each module's wall seconds (its tests' phases summed) in `log`, as JSON in `path`."""
    modules = grouped(read_log(log), by_module=True)
    seconds = {name: round(cost.wall, 1) for name, cost in sorted(modules.items())}
    path.write_text(json.dumps(seconds, indent=1) + "\n", encoding="utf-8")
    print(f"{len(seconds)} modules' wall seconds written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, help="the log file (a temporary one by default)")
    parser.add_argument("--only-sum", action="store_true", help="sum up --log; run nothing")
    parser.add_argument("--rows", type=int, default=SHOWN, help="rows per table")
    parser.add_argument(
        "--save-module-seconds", type=Path, help="write each module's wall seconds here (JSON)"
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args()
    if args.only_sum:
        if args.log is None or not args.log.is_file():
            parser.error("--only-sum needs --log naming an existing file")
        try:
            print(summary(args.log, args.rows))
            if args.save_module_seconds:
                save_module_seconds(args.log, args.save_module_seconds)
        except ValueError as error:
            parser.error(str(error))
        return
    log = args.log or Path(tempfile.mkdtemp(prefix="signing-suite-cpu-")) / "cpu.tsv"
    log.unlink(missing_ok=True)
    started = time.monotonic()
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args.pytest_args],
        env={**os.environ, LOG_VARIABLE: str(log)},
        check=False,
    )
    print(f"\npytest exited {ran.returncode} after {time.monotonic() - started:.0f} s; log: {log}")
    if log.is_file():
        print(summary(log, args.rows))
        if args.save_module_seconds and ran.returncode == 0:  # a whole run's, not a failed one's
            save_module_seconds(log, args.save_module_seconds)
    sys.exit(ran.returncode)


if __name__ == "__main__":
    main()
