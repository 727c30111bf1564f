"""The order the suite's modules start in: the longest first, from the wall seconds each took
in a whole run (`tests/module_seconds.json`, written by `benchmarks.suite_cpu
--save-module-seconds`). Each module runs on one xdist worker (`--dist loadscope`); started
longest first, the last minutes hold short modules only, and a module that mostly waits (for a
rate window, a server, a held request) starts while others still have CPU work to fill its
waits. xdist's own order, most tests first, left single-test modules of half a minute of waiting
to the end, when two cores sat half idle.

A module the file does not name (a new one) counts as the median. The order is a hint: a stale
file makes a run slower, never different."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Protocol, TypeVar

MODULE_SECONDS = Path(__file__).resolve().parents[1] / "module_seconds.json"


def read_module_seconds(path: Path = MODULE_SECONDS) -> dict[str, float]:
    """Each module's wall seconds in the run the file was written from; none without a file."""
    if not path.is_file():
        return {}
    seconds: dict[str, float] = json.loads(path.read_text(encoding="utf-8"))
    return seconds


class Collected(Protocol):
    """What the order reads of a collected test: its node id (`tests/x.py::test_y[z]`)."""

    @property
    def nodeid(self) -> str: ...


Test = TypeVar("Test", bound=Collected)


def longest_first(items: list[Test], seconds: dict[str, float]) -> list[Test]:
    """`items` with whole modules reordered by `seconds` (longest first; ties and unknown
    modules as collected), each module's tests in their own order."""
    modules: dict[str, list[Test]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    typical = statistics.median(seconds.values()) if seconds else 0.0
    ordered = sorted(modules, key=lambda module: -seconds.get(module, typical))
    return [item for module in ordered for item in modules[module]]
