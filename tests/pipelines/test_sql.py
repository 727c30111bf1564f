"""`signing-etl sql`: machine-readable results, and a result cut at its limit says so."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import SandboxFactory, cli_env, describe, load_args, message_lines, run_cli

pytestmark = pytest.mark.slow  # a load and a build before the queries


def test_sql_writes_csv_and_json_and_says_when_a_result_is_cut(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=30, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    env = cli_env(running)
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0
    truth = sorted((s.id, s.status) for s in running.store.shipments.by_id.values())
    query = "select id, status from raw.shipments order by id"

    as_csv = run_cli(
        ["sql", "--duckdb", str(warehouse), "--format", "csv", query], cwd=tmp_path, env=env
    )
    assert as_csv.returncode == 0, describe(as_csv)
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert rows[0] == ["id", "status"]
    assert [tuple(r) for r in rows[1:]] == truth
    assert message_lines(as_csv.stderr) == [], describe(as_csv)

    cut = run_cli(
        ["sql", "--duckdb", str(warehouse), "--format", "json", "--limit", "5", query],
        cwd=tmp_path,
        env=env,
    )
    assert cut.returncode == 0, describe(cut)
    objects = [json.loads(line) for line in cut.stdout.splitlines()]
    assert [(o["id"], o["status"]) for o in objects] == truth[:5]
    warnings = message_lines(cut.stderr)
    assert len(warnings) == 1, describe(cut)
    assert "more than 5 rows" in warnings[0], describe(cut)


def test_sql_rounds_fractions_in_a_table_and_keeps_them_whole_in_csv_and_json(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=10, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    env = cli_env(running)
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0
    # a fraction the sandbox knows: the hours from a shipment's creation to its expiry, / 7.3
    shipment = min(running.store.shipments.by_id.values(), key=lambda s: s.id)
    hours = (shipment.expires_at - shipment.created_at) / 3_600_000 / 7.3
    query = (
        "select id, epoch_ms(expires_at - created_at) / 3600000 / 7.3 as hours, 3 as whole, "
        f"cast(0.000123456 as double) as small from raw.shipments where id = '{shipment.id}'"
    )

    def run(output_format: str) -> str:
        done = run_cli(
            ["sql", "--duckdb", str(warehouse), "--format", output_format, query],
            cwd=tmp_path,
            env={**env, "COLUMNS": "200"},
        )
        assert done.returncode == 0, describe(done)
        return done.stdout

    table = run("table")
    assert f" {hours:.2f} " in table
    assert " 0.0001235 " in table
    assert " 3 " in table
    assert str(hours)[:10] not in table
    (row,) = list(csv.DictReader(io.StringIO(run("csv"))))
    assert float(row["hours"]) == hours
    (document,) = [json.loads(line) for line in run("json").splitlines()]
    assert document["hours"] == hours
    assert document["small"] == 0.000123456


# A workspace's name, set by any admin of it: a screen clear, a window title, a bell, a
# right-to-left override.
HOSTILE_NAME = "Acme\x1b[2J\x1b]0;pwned\x07 Ltd\u202e"


def on_a_terminal(args: list[str], *, cwd: Path, env: dict[str, str]) -> str:
    """What `signing-etl ARGS` writes to stdout when stdout is a terminal (a pseudo-terminal),
    with the terminal's line ends read back as `\\n`."""
    controller, terminal = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=subprocess.PIPE,
    ) as command:
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the command ended and closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        _, errors = command.communicate(timeout=120)
    os.close(controller)
    assert command.returncode == 0, errors.decode()
    return shown.decode().replace("\r\n", "\n")


def test_csv_on_a_terminal_shows_control_characters_as_escapes_and_keeps_them_for_programs(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=5, limits_enabled=False)
    running.store.workspace = dataclasses.replace(running.store.workspace, name=HOSTILE_NAME)
    warehouse = tmp_path / "signing.duckdb"
    env = cli_env(running)
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0
    args = ["sql", "--duckdb", str(warehouse), "--format", "csv", "select name from raw.workspaces"]

    shown = on_a_terminal(args, cwd=tmp_path, env=env)
    assert "\x1b" not in shown
    assert "\x07" not in shown
    assert "\u202e" not in shown
    assert shown.splitlines() == ["name", r"Acme\x1b[2J\x1b]0;pwned\x07 Ltd\u202e"]

    piped = run_cli(args, cwd=tmp_path, env=env)  # a program reads the value as it is
    assert piped.returncode == 0, describe(piped)
    assert list(csv.reader(io.StringIO(piped.stdout))) == [["name"], [HOSTILE_NAME]]
