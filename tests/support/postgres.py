"""Throwaway PostgreSQL clusters for tests: initdb in a temporary folder, a free loopback port."""

from __future__ import annotations

import itertools
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
from psycopg2 import sql
from psycopg2.extensions import connection

# The one line a run without a server says (skipped locally, failed in CI).
SERVER_MISSING = "PostgreSQL server not found: apt-get install postgresql (or put pg_ctl on PATH)"

USER = "postgres"
# Not a word that appears in messages ("the postgres destination"): the tests that check that
# no output quotes the password must fail only on the password.
PASSWORD = "suite-pw-Zq7x"
HOST = "127.0.0.1"

# A throwaway cluster keeps nothing through a crash, so it need not sync anything to disk.
_SETTINGS = {
    "listen_addresses": HOST,
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "50",
}


class PostgresNotFound(RuntimeError):
    """No PostgreSQL server binaries here, or no OS user to run them as."""


class PostgresStartError(RuntimeError):
    """initdb or the server failed; the message ends with the tail of its output."""


@dataclass(frozen=True)
class PostgresDatabase:
    """One database of a running test server."""

    name: str
    host: str
    port: int
    user: str
    password: str

    @property
    def credentials(self) -> str:
        """The connection string dlt's postgres destination takes as `credentials`."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.name}"

    def connect(self) -> connection:
        """A new psycopg2 connection (autocommit off; close it, or use it in `with closing()`)."""
        return psycopg2.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.name
        )


@dataclass
class PostgresServer:
    """A running throwaway cluster: superuser `postgres` with a password, TCP on 127.0.0.1."""

    host: str
    port: int
    user: str
    password: str
    version: str
    data_dir: Path
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def database(self, name: str = "postgres") -> PostgresDatabase:
        """An existing database by name (`postgres` is always there)."""
        return PostgresDatabase(name, self.host, self.port, self.user, self.password)

    def create_database(self, name: str | None = None) -> PostgresDatabase:
        """Create an empty database, named `name` or `test_<n>` (unique in the session)."""
        name = name or f"test_{next(self._numbers)}"
        admin = self.database().connect()
        try:
            admin.autocommit = True
            with admin.cursor() as cursor:
                cursor.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        finally:
            admin.close()
        return self.database(name)


def find_bin_dir() -> Path:
    """The folder of `initdb`, `pg_ctl` and `postgres`: pg_ctl's on PATH (symlinks followed),
    else Debian's newest /usr/lib/postgresql/<version>/bin.

    Raises:
        PostgresNotFound: with `SERVER_MISSING` when there is none.
    """
    candidates: list[Path] = []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: [int(part) for part in re.findall(r"\d+", path.parent.name)],
        reverse=True,
    )
    candidates.extend(debian)
    for folder in candidates:
        if all(os.access(folder / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    raise PostgresNotFound(SERVER_MISSING)


def missing_server() -> str | None:
    """The one-line reason no cluster can be started here, or None when one can."""
    try:
        find_bin_dir()
        _run_as()
    except PostgresNotFound as missing:
        return str(missing)
    return None


def in_ci() -> bool:
    """Whether this is a CI run (CI=true), where a missing server is a failure, not a skip."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _run_as() -> dict[str, Any]:
    """subprocess arguments that drop root to the `postgres` OS user (initdb refuses root)."""
    if os.geteuid() != 0:
        return {}
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresNotFound(
            "PostgreSQL refuses to run as root and there is no OS user 'postgres' to run it as: "
            "apt-get install postgresql creates one"
        ) from None
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _environment() -> dict[str, str]:
    """This process's environment without PG* variables, which would steer initdb and pg_ctl."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Start a new cluster in a temporary folder on a free port; stop it and remove the folder.

    Raises:
        PostgresNotFound: no server binaries, or running as root with no `postgres` OS user.
        PostgresStartError: initdb or the server failed.
    """
    bin_dir = find_bin_dir()
    as_user = _run_as()
    base = Path(tempfile.mkdtemp(prefix="signing-etl-pg-"))
    data_dir = base / "data"
    if as_user:
        os.chown(base, as_user["user"], as_user["group"])

    pg_ctl = bin_dir / "pg_ctl"

    def run(*args: str | Path) -> None:
        done = subprocess.run(
            [str(arg) for arg in args],
            cwd=base,
            env=_environment(),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            **as_user,
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip().splitlines()
            raise PostgresStartError(f"{Path(args[0]).name} failed: " + " | ".join(output[-5:]))

    started = False
    try:
        password_file = base / "password"
        password_file.write_text(PASSWORD + "\n")
        if as_user:
            os.chown(password_file, as_user["user"], as_user["group"])
        run(
            bin_dir / "initdb",
            "--pgdata",
            data_dir,
            "--username",
            USER,
            "--pwfile",
            password_file,
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        )
        password_file.unlink()
        version = (data_dir / "PG_VERSION").read_text().strip()
        log = base / "server.log"
        for attempt in range(3):
            port = _free_port()
            settings = {**_SETTINGS, "port": str(port), "unix_socket_directories": str(base)}
            options = " ".join(f"-c {name}={value}" for name, value in settings.items())
            try:
                log.unlink(missing_ok=True)
                run(pg_ctl, "start", "-w", "-t", "60", "-D", data_dir, "-l", log, "-o", options)
            except PostgresStartError as error:
                server_log = log.read_text().strip().splitlines() if log.exists() else []
                if attempt < 2 and any("could not bind" in line for line in server_log):
                    continue  # another process took the port between the probe and the start
                raise PostgresStartError(f"{error} | log: {' | '.join(server_log[-5:])}") from None
            started = True
            break
        yield PostgresServer(HOST, port, USER, PASSWORD, version, data_dir)
    finally:
        try:
            if started:
                run(pg_ctl, "stop", "--wait", "--mode=immediate", "-D", data_dir)
        finally:
            shutil.rmtree(base, ignore_errors=True)
