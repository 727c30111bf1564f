"""`signing-etl` commands run in processes forked from one that has imported the CLI already:
each is its own process with its own exit code and streams, as `run_cli` gives, without the
seconds of CPU that importing the CLI costs every fresh interpreter.

The forking process starts with the working folder and environment every command of it gets,
imports `pipelines.cli` and nothing else, and forks one child per command; the child runs the
console script's own entry point (`pipelines.cli:run`) and exits as a fresh process would (exit
handlers, flushed streams, a traceback and exit 1 for an uncaught exception). So a command run
here sees what it would see as `python -m pipelines.cli`, minus the wait for the import. Use it
where a test runs many short commands with one folder and one environment."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# The forking process: reads one request a line ({"args", "cwd", "stdout", "stderr"}), answers each
# with the child's wait status. Single-threaded (checked), so forking it is safe.
_FORKER = """
import json, os, sys, threading
import pipelines.cli
if threading.active_count() != 1:
    sys.exit("importing pipelines.cli started threads: forking would not be safe")
replies = sys.stdout
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(request["cwd"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        sys.stdin = open(0, closefd=False)
        sys.argv = [pipelines.cli.__file__, *request["args"]]
        pipelines.cli.run()
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    replies.write(f"{status}\\n")
    replies.flush()
"""


class ForkedCli:
    """One forking process (see the module) for commands in `cwd` with the environment `env`."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="forked-cli-"))
        self._cwd = cwd
        self._forker = subprocess.Popen(
            [sys.executable, "-c", _FORKER],
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

    def run(
        self, args: Sequence[str], *, cwd: Path | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """`signing-etl ARGS` to the end, as `run_cli` runs it with this environment, in this
        folder or `cwd` (the import reads no working folder: dlt finds its own when a command
        first asks for its configuration). A command that outlives `timeout` is ended with the
        forking process and reported as `run_cli` reports it (`subprocess.TimeoutExpired`)."""
        assert self._forker.stdin is not None
        assert self._forker.stdout is not None
        self._count += 1
        out, err = (self._folder / f"{self._count}.{name}" for name in ("stdout", "stderr"))
        where = str(cwd or self._cwd)
        request = {"args": list(args), "cwd": where, "stdout": str(out), "stderr": str(err)}
        self._forker.stdin.write(json.dumps(request) + "\n")
        self._forker.stdin.flush()
        with selectors.DefaultSelector() as waiting:
            waiting.register(self._forker.stdout, selectors.EVENT_READ)
            if not waiting.select(timeout):
                os.killpg(self.process_group, signal.SIGKILL)
                self._forker.wait()
                raise subprocess.TimeoutExpired(["signing-etl", *args], timeout)
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
