"""The suite's CPU log (`tests/support/cpu_log.py`, summed up by `benchmarks.suite_cpu`): a
test's child process is counted with the test while it still runs, as the forked-CLI helper
does, a failed test is logged too, and a quick-tier test that took long is named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.suite_cpu import quick_but_long, read_log, summary
from tests.support.cpu_log import LOG_VARIABLE

# Run by an inner pytest: a test whose child burns CPU, says how much (its own measure), and
# is still alive when the test ends; a failing test; and a long test marked slow.
INNER_TESTS = '''
import subprocess, sys, time
from pathlib import Path

import pytest

BURN = """
import sys, time
end = time.process_time() + 0.4
while time.process_time() < end:
    pass
open(sys.argv[1], "w").write(str(time.process_time()))
sys.stdin.read()
"""
children = []

def test_a_child_that_outlives_its_test(tmp_path):
    said = tmp_path / "cpu"
    child = subprocess.Popen([sys.executable, "-c", BURN, str(said)], stdin=subprocess.PIPE)
    children.append(child)
    while not (said.is_file() and said.read_text()):
        time.sleep(0.01)
    # The child is left running; the next test reaps it.
    (Path(__file__).parent / "child_cpu").write_text(said.read_text())

def test_that_fails():
    for child in children:
        child.stdin.close()
        child.wait()
    assert False, "failing on purpose"

@pytest.mark.slow
def test_marked_slow():
    time.sleep(0.5)
'''


def test_a_live_childs_cpu_is_its_tests_and_a_failed_test_is_logged(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    log = tmp_path / "cpu.tsv"
    inner = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.support.cpu_log",
            str(tmp_path / "test_inner.py"),
        ],
        env={**_without_pytest_settings(), LOG_VARIABLE: str(log)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert inner.returncode == 1, inner.stdout + inner.stderr  # the failing test, only
    assert "1 failed, 2 passed" in inner.stdout

    child_said = float((tmp_path / "child_cpu").read_text())
    costs = read_log(log)
    names = {test.rsplit("::", 1)[-1]: cost for test, cost in costs.items()}
    assert set(names) == {
        "test_a_child_that_outlives_its_test",
        "test_that_fails",
        "test_marked_slow",
    }
    outlived = names["test_a_child_that_outlives_its_test"]
    # The child was alive when the test ended: only /proc can have counted it. The kernel
    # counts in ticks (10 ms), and the child's own clock may read a tick more.
    assert outlived.children >= child_said - 0.02
    assert len(log.read_text().splitlines()) == 9  # setup, call and teardown of each
    assert "3 tests:" in summary(log)
    # The burning test waited for 0.4 s of its child's CPU; the slow one slept 0.5 s.
    long_ones = quick_but_long(costs, seconds=0.3)
    assert "test_a_child_that_outlives_its_test" in long_ones
    assert "test_marked_slow" not in long_ones


def _without_pytest_settings() -> dict[str, str]:
    """This environment without what would change how the inner pytest runs."""
    return {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
