"""`signing-etl` commands run in processes forked from one that has imported the CLI already:
each is its own process with its own exit code and streams, as a fresh interpreter gives,
without the seconds of CPU that importing the CLI (and dbt, for a command that builds the
models) costs every fresh interpreter.

The forking process imports the CLI, dbt's runner and what a load or a build would import or
build on first use anyway (`WARM_IMPORTS`, `DBT_SCHEMAS`), reads no configuration, and forks
one child per command. The child takes the command's working folder
and environment (the whole of `os.environ`, replaced), then runs the console script's own entry
point (`pipelines.cli:run`) and exits as a fresh process would: its threads waited for, exit
handlers run, streams flushed, a traceback and exit 1 for an uncaught exception. It then ends
without tearing the interpreter down, since freeing every object of dbt, dlt and the CLI it
inherited costs more than most commands (a forked `status`: 0.7 s of CPU with the teardown,
0.1 s without, on two cores). The forking process hands its imports to the garbage collector's
permanent generation (`gc.freeze`) before its first fork, so that no child's collections walk
them (a small load: 1.5 s of CPU without, 1.35 s with). What only a teardown does, a file or
connection left open closed by its finalizer, the product does not leave to it:
`tests/test_forked_cli.py` compares a forked load's files with a fresh one's.
`benchmarks.forked_cli_bench` measures what a forked load, `status` and build cost.

So a command run here sees what it would see as `python -m pipelines.cli`, minus the wait for
the import: the CLI, dlt and dbt read their settings from the environment when a command first
asks, never at import. What an interpreter reads as it starts (`PYTHON*`, the locale) cannot be
changed after it; `run_cli` runs a command whose environment differs there in a fresh process
(`starts_alike`)."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

# Imported by the forking process before its first fork: the CLI; dbt's runner, which a
# command that builds the models imports on its way (about 3 s of CPU of its own); and pandas
# and dlt's Arrow helpers, which dlt imports during a load's first extract and normalize (a
# forked first load on two cores: 1.4 s of CPU without them, 1.1 s with).
WARM_IMPORTS = (
    "pipelines.cli",
    "pipelines.modeling.build",
    "dbt.cli.main",
    "pandas",
    "dlt.common.libs.pyarrow",
)

# dbt checks its settings and results against JSON schemas it builds on first use and keeps
# for the process (`json_schema`, cached), each adapter's credentials among them: built once in
# the forking process, with the adapters' modules imported, not in each build's child (a
# forked `models` on two cores: 6.4 s of CPU without, 3.8 s with).
DBT_SCHEMAS = (
    ("dbt.contracts.project", "ProjectFlags"),
    ("dbt.contracts.project", "ProfileConfig"),
    ("dbt.contracts.project", "Project"),
    ("dbt.contracts.project", "PackageConfig"),
    ("dbt.contracts.project", "Configuration"),
    ("dbt.contracts.selection", "SelectorFile"),
    ("dbt.adapters.duckdb.credentials", "DuckDBCredentials"),
    ("dbt.adapters.postgres.connections", "PostgresCredentials"),
    ("dbt.task.test", "TestResultData"),
)

# The forking process: reads one request a line ({"args", "cwd", "env", "stdout", "stderr"}),
# answers each with the child's wait status. Single-threaded (checked), so forking it is safe.
# It, too, ends without a teardown once its input ends: its frozen heap would only be freed
# (and DuckDB's bindings would report what the freeze kept as leaks).
_FORKER = """
import atexit, gc, importlib, json, os, sys, threading, time
SCHEMAS = json.loads(sys.argv[1])
for module in sys.argv[2:]:
    importlib.import_module(module)
import pipelines.cli
for module, name in SCHEMAS:
    getattr(importlib.import_module(module), name).json_schema()
if threading.active_count() != 1:
    sys.exit("importing the CLI started threads: forking would not be safe")
gc.collect()
gc.freeze()
replies = sys.stdout
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(request["cwd"])
        if request["env"] is not None:
            os.environ.clear()
            os.environ.update(request["env"])
            time.tzset()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        sys.stdin = open(0, closefd=False)
        sys.argv = [pipelines.cli.__file__, *request["args"]]
        try:
            pipelines.cli.run()
            code = 0
        except SystemExit as stop:
            code = stop.code
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code & 0xFF)
    _, status = os.waitpid(pid, 0)
    replies.write(f"{status}\\n")
    replies.flush()
os._exit(0)
"""


def _read_at_start(name: str) -> bool:
    """Whether the interpreter reads variable `name` as it starts (so a forked child cannot
    take a new value of it): Python's own settings and the locale."""
    return name.startswith(("PYTHON", "LC_")) or name in ("LANG", "LANGUAGE")


def starts_alike(env: Mapping[str, str], other: Mapping[str, str]) -> bool:
    """Whether two environments start an interpreter alike (`_read_at_start`)."""
    names = {name for name in (*env, *other) if _read_at_start(name)}
    return all(env.get(name) == other.get(name) for name in names)


class ForkedCli:
    """One forking process (see the module) for commands in `cwd` with the environment `env`
    (a command may bring its own folder and environment)."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="forked-cli-"))
        self._cwd = cwd
        self.env = dict(env)
        self._forker = subprocess.Popen(
            [sys.executable, "-c", _FORKER, json.dumps(DBT_SCHEMAS), *WARM_IMPORTS],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its children are its group: a hung one is ended with it
        )
        self._count = 0

    @property
    def process_group(self) -> int:
        """The process group of the forking process and of every command it forks."""
        return self._forker.pid

    @property
    def alive(self) -> bool:
        """Whether the forking process still takes commands (a timeout ends it)."""
        return self._forker.poll() is None

    def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """`signing-etl ARGS` to the end, as `run_fresh_cli` runs it, in this folder or `cwd`,
        with this environment or `env` (the import reads neither: dlt finds its folder and
        settings when a command first asks). A command that outlives `timeout`, or whose
        caller is interrupted while it runs, is ended with the forking process; a timeout is
        reported as `run_fresh_cli` reports it (`subprocess.TimeoutExpired`)."""
        assert self._forker.stdin is not None
        assert self._forker.stdout is not None
        if env is not None and not starts_alike(env, self.env):
            raise ValueError("env differs from the forking process's in what starts Python")
        self._count += 1
        out, err = (self._folder / f"{self._count}.{name}" for name in ("stdout", "stderr"))
        request = {
            "args": list(args),
            "cwd": str(cwd or self._cwd),
            "env": None if env is None else dict(env),
            "stdout": str(out),
            "stderr": str(err),
        }
        self._forker.stdin.write(json.dumps(request) + "\n")
        self._forker.stdin.flush()
        try:
            with selectors.DefaultSelector() as waiting:
                waiting.register(self._forker.stdout, selectors.EVENT_READ)
                if not waiting.select(timeout):
                    raise subprocess.TimeoutExpired(["signing-etl", *args], timeout)
        except BaseException:  # a timeout, or the test's own (pytest-timeout, ^C): no reply left
            os.killpg(self.process_group, signal.SIGKILL)
            self._forker.wait()
            raise
        reply = self._forker.stdout.readline()
        assert reply, f"the forking process ended (exit {self._forker.wait()})"
        code = os.waitstatus_to_exitcode(int(reply))  # as subprocess reports it
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "pipelines.cli", *args],
            code,
            out.read_text(encoding="utf-8"),
            err.read_text(encoding="utf-8"),
        )

    def close(self) -> None:
        """End the forking process (it exits when its input ends)."""
        if self._forker.stdin is not None:
            self._forker.stdin.close()
        if self.alive:
            self._forker.wait(timeout=30)
        if self._forker.stdout is not None:
            self._forker.stdout.close()
        shutil.rmtree(self._folder, ignore_errors=True)


@contextmanager
def forked_cli(cwd: Path, env: dict[str, str]) -> Iterator[ForkedCli]:
    """A `ForkedCli` for commands in `cwd` with `env`, ended on leaving."""
    cli = ForkedCli(cwd, env)
    try:
        yield cli
    finally:
        cli.close()
