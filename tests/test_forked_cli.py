"""The tests' forked CLI (`tests/support/forked_cli.py`) answers as a fresh `signing-etl`
process does, and a command that hangs is ended at its timeout, its process with it, as
`run_cli` ends one."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support import (
    SandboxFactory,
    cli_env,
    describe,
    differences,
    finish,
    load_args,
    run_fresh_cli,
)
from tests.support.forked_cli import forked_cli
from tests.support.sandboxes import held_now, holding
from tests.support.waiting import wait_until
from tests.support.webhooks import free_port


def _running_in_group(group: int) -> list[int]:
    """The pids of the processes of process group `group` still running (from /proc; an
    ended one its parent has not reaped yet is a zombie, state Z)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, process_group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except OSError:  # the process ended while listed
            continue
        if int(process_group) == group and state != "Z":
            found.append(int(stat.parent.name))
    return found


def _without_times(stderr: str) -> list[str]:
    """stderr's lines without what two runs of one command differ in: the log's leading
    timestamp, the run's id, and how many attempts fit in the time allowed for failures."""
    lines = [line.split(" ", 1)[-1] for line in stderr.splitlines()]
    return [re.sub(r"\brun=\w+ |after \d+ attempts", "", line) for line in lines]


def test_a_forked_command_answers_as_a_fresh_process(tmp_path: Path) -> None:
    env = cli_env(None)
    args = ["sql", "--duckdb", str(tmp_path / "missing.duckdb"), "select 1"]
    fresh = run_fresh_cli(args, cwd=tmp_path, env=env)
    with forked_cli(tmp_path, env) as cli:
        forked = cli.run(args)
    assert fresh.returncode != 0, fresh.stdout
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout)
    assert _without_times(forked.stderr) == _without_times(fresh.stderr)


@pytest.mark.slow  # four loads (about 14 s on two cores), two in fresh interpreters
def test_a_forked_command_reads_its_own_environment(tmp_path: Path) -> None:
    """The forking process starts with no source configured; a command's environment replaces
    it whole, as a fresh process's is its own: one command finds the service it was given
    (and fails to reach it), the next finds none, each as a fresh process does."""
    unconfigured = cli_env(None)
    refused = {
        **unconfigured,
        "SOURCES__SIGNING__API_KEY": "a-key",
        "SOURCES__SIGNING__BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
        "SOURCES__SIGNING__GIVE_UP_AFTER_SECONDS": "1",
    }
    args = load_args(tmp_path / "signing.duckdb")
    with forked_cli(tmp_path, unconfigured) as cli:
        forked = [cli.run(args, env=env) for env in (refused, unconfigured)]
    fresh = [run_fresh_cli(args, cwd=tmp_path, env=env) for env in (refused, unconfigured)]
    assert "gave up on 127.0.0.1:" in forked[0].stderr, forked[0].stderr
    assert "missing configuration" in forked[1].stderr, forked[1].stderr
    for mine, truth in zip(forked, fresh, strict=True):
        assert (mine.returncode, mine.stdout) == (truth.returncode, truth.stdout)
        assert _without_times(mine.stderr) == _without_times(truth.stderr)


def test_a_command_that_outlives_its_timeout_is_ended_with_its_process(tmp_path: Path) -> None:
    with forked_cli(tmp_path, cli_env(None)) as cli:
        group = cli.process_group
        with pytest.raises(subprocess.TimeoutExpired):
            cli.run(["sandbox", "--port", "0", "--shipments", "5"], timeout=5)
        # SIGKILL is delivered at once, but a process takes a moment to end.
        wait_until(lambda: _running_in_group(group) == [], 30, "the hung command's process ended")


def _files_of(folder: Path) -> list[str]:
    """The files under `folder`, their numbers and hashes (load ids, job ids) left out."""
    names = (str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())
    return sorted(re.sub(r"[0-9a-f]{10}|\d+(\.\d+)?", "#", name) for name in names)


def test_a_forked_load_leaves_the_files_a_fresh_one_does(
    tmp_path: Path, make_sandbox: SandboxFactory
) -> None:
    """A forked command ends without the interpreter's teardown (`forked_cli`'s docstring):
    a connection or file the product left to a finalizer would show here, as a DuckDB
    write-ahead log or a missing file beside the forked load's warehouse."""
    env = cli_env(make_sandbox(seed=3, shipments=30, limits_enabled=False))
    folders = {kind: tmp_path / kind for kind in ("fresh", "forked")}
    args = {kind: load_args(folder / "signing.duckdb") for kind, folder in folders.items()}
    for folder in folders.values():
        folder.mkdir()
    fresh = run_fresh_cli(args["fresh"], cwd=folders["fresh"], env=env)
    with forked_cli(folders["forked"], env) as cli:
        forked = cli.run(args["forked"], env=env)
    assert (fresh.returncode, forked.returncode) == (0, 0), describe(fresh) + describe(forked)
    files = {kind: _files_of(folder) for kind, folder in folders.items()}
    assert "signing.duckdb" in files["forked"], files["forked"]
    assert not [name for name in files["forked"] if name.endswith(".wal")], files["forked"]
    assert files["forked"] == files["fresh"]


def test_commands_run_side_by_side_and_in_the_background(
    tmp_path: Path, make_sandbox: SandboxFactory
) -> None:
    """Two loads started in the background are children of the one forking process and run
    at once: the sandbox holds a request of each, part-way through, before either ends. Let
    go, each ends with its own exit code and output, read as `subprocess.Popen` gives them."""
    running = make_sandbox(seed=5, shipments=20, limits_enabled=False)
    workspace_id = running.store.workspace.id
    env = cli_env(running)
    with forked_cli(tmp_path, env) as cli:
        with holding(running, workspace_id, after=2):
            started = [cli.start(load_args(tmp_path / f"{name}.duckdb")) for name in ("one", "two")]
            for process in started:
                assert os.getpgid(process.pid) == cli.process_group
            wait_until(
                lambda: (
                    held_now(running, workspace_id) == 2 and all(p.poll() is None for p in started)
                ),
                60,
                "a request of each load to be held",
            )
        ended = [finish(process, 120) for process in started]
    for done, name in zip(ended, ("one", "two"), strict=True):
        assert done.returncode == 0, describe(done)
        assert differences(tmp_path / f"{name}.duckdb", running.store) == {}
