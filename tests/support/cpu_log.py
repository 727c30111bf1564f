"""Where the suite's CPU goes, per test phase: a pytest plugin, on only when
`SIGNING_TEST_CPU_LOG` names a file (`benchmarks.suite_cpu` sets it and sums the file up).

Each setup, call and teardown appends one line: the test, the phase, its wall seconds, the CPU
seconds of the test process, the CPU seconds of its child processes, the process id, the
phase's start (Unix time) and the test's tier (`slow` or `quick`). A child's CPU is counted
while it lives, not only once it is waited for: the forked-CLI helper
(`tests/support/forked_cli.py`) lives as long as its worker, and `getrusage(RUSAGE_CHILDREN)`
alone would count its commands' CPU at the worker's exit, in whichever test ran last. So the
children's figure is the reaped children's (`getrusage`) plus each live child's own and reaped
CPU, read from `/proc` (Linux; elsewhere reaped ones only).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Generator
from pathlib import Path

import pytest

LOG_VARIABLE = "SIGNING_TEST_CPU_LOG"
_PROC = Path("/proc")
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# /proc/<pid>/stat after the command's closing parenthesis: state is field 0, ppid 1, and
# utime, stime, cutime, cstime are fields 11 to 14 (the last two: its reaped children's).
_PPID, _CPU_FIELDS, _REAPED_FIELDS = 1, slice(11, 15), slice(13, 15)


def _stat_fields(process: Path) -> list[str] | None:
    """The fields of a `/proc/<pid>` entry's `stat` (see above); None once it has ended."""
    try:
        return (process / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def reaped_children_seconds(pid: int) -> float:
    """CPU seconds of the children process `pid` has waited for so far (Linux only): what a
    process that forks commands, such as the forked CLI's, spent in them."""
    fields = _stat_fields(_PROC / str(pid))
    if fields is None:
        raise ProcessLookupError(f"no process {pid}")
    return sum(int(value) for value in fields[_REAPED_FIELDS]) / _TICKS_PER_SECOND


def _live_children_seconds() -> float:
    """CPU of this process's live children, with what their own reaped children used."""
    if not _PROC.is_dir():
        return 0.0
    me = str(os.getpid())
    ticks = 0
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is not None and fields[_PPID] == me:  # None: ended while we looked
            ticks += sum(int(value) for value in fields[_CPU_FIELDS])
    return ticks / _TICKS_PER_SECOND


def _cpu_seconds() -> tuple[float, float]:
    """(this process, its children) CPU seconds so far, user and system."""
    mine = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    children = reaped.ru_utime + reaped.ru_stime + _live_children_seconds()
    return mine.ru_utime + mine.ru_stime, children


def _tier(item: pytest.Item) -> str:
    """`slow` for a test marked so (itself or its module), else `quick`."""
    return "slow" if item.get_closest_marker("slow") is not None else "quick"


class CpuLog:
    """The plugin: registered by `tests/conftest.py` when `SIGNING_TEST_CPU_LOG` is set."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _measured(self, item: pytest.Item, phase: str) -> Generator[None, None, None]:
        """Wraps one phase: its line is written also when the phase raised (a failed test)."""
        started = time.time()
        wall = time.monotonic()
        own, children = _cpu_seconds()
        try:
            return (yield)
        finally:
            own_after, children_after = _cpu_seconds()
            line = (
                f"{item.nodeid}\t{phase}\t{time.monotonic() - wall:.2f}\t{own_after - own:.2f}\t"
                f"{children_after - children:.2f}\t{os.getpid()}\t{started:.1f}\t{_tier(item)}\n"
            )
            with self.path.open("a") as log:  # one short append a line: workers never interleave
                log.write(line)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._measured(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._measured(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._measured(item, "teardown"))


PLUGIN_NAME = "signing-cpu-log"


def register(config: pytest.Config) -> None:
    """Log every test phase's CPU to `SIGNING_TEST_CPU_LOG`, when it is set (once, whether
    `tests/conftest.py` or `-p tests.support.cpu_log` asked)."""
    path = os.environ.get(LOG_VARIABLE)
    if path and not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(CpuLog(Path(path)), PLUGIN_NAME)


def pytest_configure(config: pytest.Config) -> None:
    """As a plugin of its own (`pytest -p tests.support.cpu_log`), outside this suite."""
    register(config)
