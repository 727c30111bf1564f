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

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
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

# The forking process: reads one request a line ({"id", "args", "cwd", "env", "stdout",
# "stderr"}), forks a child for it and answers at once `started ID PID`, then `ended ID STATUS`
# (the wait status) when that child ends; children run side by side, each watched through a
# pidfd. Replies name the request, not the pid: pids come round again within a run of the
# suite (`pid_max` is 32768 here), and an old child's status must never answer for a new one.
# Single-threaded (checked), so forking it is safe. It, too, ends without a teardown once its
# input ends: its frozen heap would only be freed (and DuckDB's bindings would report what the
# freeze kept as leaks).
_FORKER = """
import atexit, gc, importlib, json, os, selectors, sys, threading, time
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

def child(request, watching, children):
    watching.close()
    for watched in children:
        os.close(watched)
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

def reply(line):
    os.write(1, (line + "\\n").encode())

watching = selectors.DefaultSelector()
watching.register(0, selectors.EVENT_READ)
children = {}  # pidfd: (pid, request id)
pending = b""
while True:
    for key, _ in watching.select():
        if key.fd != 0:
            pid, number = children.pop(key.fd)
            watching.unregister(key.fd)
            os.close(key.fd)
            _, status = os.waitpid(pid, 0)
            reply(f"ended {number} {status}")
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            os._exit(0)
        pending += chunk
        while b"\\n" in pending:
            line, pending = pending.split(b"\\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                child(request, watching, children)
            watched = os.pidfd_open(pid)
            children[watched] = (pid, request["id"])
            watching.register(watched, selectors.EVENT_READ)
            reply(f"started {request['id']} {pid}")
"""


def _read_at_start(name: str) -> bool:
    """Whether the interpreter reads variable `name` as it starts (so a forked child cannot
    take a new value of it): Python's own settings and the locale."""
    return name.startswith(("PYTHON", "LC_")) or name in ("LANG", "LANGUAGE")


def starts_alike(env: Mapping[str, str], other: Mapping[str, str]) -> bool:
    """Whether two environments start an interpreter alike (`_read_at_start`)."""
    names = {name for name in (*env, *other) if _read_at_start(name)}
    return all(env.get(name) == other.get(name) for name in names)


class ForkedProcess:
    """A command forked in the background (`ForkedCli.start`), used as `subprocess.Popen` is:
    its pid to signal, `poll`, `wait`, and `communicate` for both streams once it ended."""

    def __init__(
        self, cli: ForkedCli, number: int, pid: int, args: Sequence[str], out: Path, err: Path
    ) -> None:
        self.args = [sys.executable, "-m", "pipelines.cli", *args]
        self.pid = pid
        self._number = number  # the request's: a pid may belong to another child later
        self._cli = cli
        self._out, self._err = out, err

    @property
    def stdout_path(self) -> Path:
        """Where its stdout goes, written as it runs."""
        return self._out

    @property
    def stderr_path(self) -> Path:
        """Where its stderr goes, written as it runs."""
        return self._err

    @property
    def returncode(self) -> int | None:
        """The exit code as `subprocess` reports it (-N for signal N), None while it runs."""
        return self._cli.exit_code(self._number)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._cli.wait_for(self._number, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def communicate(
        self, input: str | None = None, timeout: float | None = None
    ) -> tuple[str, str]:
        assert input is None, "a forked command reads no input"
        self.wait(timeout)
        return self._out.read_text(encoding="utf-8"), self._err.read_text(encoding="utf-8")

    def send_signal(self, sent: int) -> None:
        """Signal it, unless it ended: as `Popen` does, an end not heard of yet (the forking
        process reaped it a moment ago) is no error."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sent)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkedCli:
    """One forking process (see the module) for commands in `cwd` with the environment `env`
    (a command may bring its own folder and environment). Commands may run side by side, from
    any thread: each is a child of the forking process, and a thread here reads its replies."""

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
        self._sending = threading.Lock()
        self._replied = threading.Condition()
        self._started: dict[int, int] = {}  # request: its child's pid
        self._ended: dict[int, int] = {}  # request: its child's wait status
        self._reading = threading.Thread(target=self._read_replies, daemon=True)
        self._reading.start()

    def _read_replies(self) -> None:
        assert self._forker.stdout is not None
        for line in self._forker.stdout:
            kind, key, value = line.split()
            with self._replied:
                (self._started if kind == "started" else self._ended)[int(key)] = int(value)
                self._replied.notify_all()
        with self._replied:
            self._replied.notify_all()  # the forking process ended: nothing more will come

    @property
    def process_group(self) -> int:
        """The process group of the forking process and of every command it forks."""
        return self._forker.pid

    @property
    def alive(self) -> bool:
        """Whether the forking process still takes commands (a timeout ends it)."""
        return self._forker.poll() is None

    def exit_code(self, number: int) -> int | None:
        """The exit code of request `number`'s child, as `subprocess` reports it; None while
        it runs."""
        with self._replied:
            status = self._ended.get(number)
        return None if status is None else os.waitstatus_to_exitcode(status)

    def wait_for(self, number: int, timeout: float | None) -> int | None:
        """The exit code of request `number`'s child once it ended; None if `timeout` passed
        first."""
        with self._replied:
            self._replied.wait_for(lambda: number in self._ended or not self.alive, timeout)
            assert number in self._ended or self.alive, (
                f"the forking process ended (exit {self._forker.poll()})"
            )
        return self.exit_code(number)

    def start(
        self,
        args: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ForkedProcess:
        """`signing-etl ARGS` in the background, as `run` runs it; its streams go to files
        that `communicate` reads once it ended."""
        assert self._forker.stdin is not None
        if env is not None and not starts_alike(env, self.env):
            raise ValueError("env differs from the forking process's in what starts Python")
        with self._sending:
            self._count += 1
            number = self._count
            out, err = (self._folder / f"{number}.{name}" for name in ("stdout", "stderr"))
            request = {
                "id": number,
                "args": list(args),
                "cwd": str(cwd or self._cwd),
                "env": None if env is None else dict(env),
                "stdout": str(out),
                "stderr": str(err),
            }
            self._forker.stdin.write(json.dumps(request) + "\n")
            self._forker.stdin.flush()
        with self._replied:
            self._replied.wait_for(lambda: number in self._started or not self.alive, 60)
            pid = self._started.get(number)
        assert pid is not None, f"the forking process did not start {args} (alive: {self.alive})"
        return ForkedProcess(self, number, pid, args, out, err)

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
        caller is interrupted while it runs, is ended with the forking process (and any other
        command it runs); a timeout is reported as `run_fresh_cli` reports it
        (`subprocess.TimeoutExpired`)."""
        process = self.start(args, cwd=cwd, env=env)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:  # a timeout, or the test's own (pytest-timeout, ^C)
            os.killpg(self.process_group, signal.SIGKILL)
            self._forker.wait()
            raise
        assert process.returncode is not None
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def close(self) -> None:
        """End the forking process (it exits when its input ends)."""
        if self._forker.stdin is not None:
            self._forker.stdin.close()
        if self.alive:
            self._forker.wait(timeout=30)
        self._reading.join(timeout=30)
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
