"""A model build's request for the models' lock on a real PostgreSQL server waits in the server's
queue, so load steps that overlap one another (each worker's step shares the lock, and one
starts before the last ends) cannot keep the build out for ever: a step that comes after the
build's request waits behind it. Asking with `pg_try_advisory_lock`, which never queues, the
build was kept out until its patience ran out (exit 75), however short each step was.

The steps here are two sessions taking turns, as workers' load steps do: each takes the lock
shared while the other holds it, or while the other waits for it, and only then lets go."""

from __future__ import annotations

import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pipelines.environment import environment_set
from pipelines.warehouse import DATASET, Warehouse
from pipelines.warehouse._advisory import models_key
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.slow  # a PostgreSQL server

PATIENCE_SECONDS = 120  # for a thread to reach a point; never reached when things work


def test_load_steps_taking_turns_do_not_keep_a_build_out(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    database = postgres_server.create_database()
    key = models_key(DATASET)
    built = threading.Event()
    holding: set[int] = set()  # the steps holding the lock now
    pids: dict[int, int] = {}
    turns: list[str] = []  # who took the lock, in order
    took_first = threading.Event()

    def steps_of_one_worker(number: int) -> None:
        """One worker's load steps, one after another, each overlapping the other worker's."""
        other = 1 - number
        with closing(database.connect()) as session, closing(database.connect()) as watcher:
            session.autocommit = watcher.autocommit = True
            cursor, watch = session.cursor(), watcher.cursor()
            pids[number] = session.get_backend_pid()
            while not built.is_set():
                cursor.execute("select pg_advisory_lock_shared(%s)", (key,))
                holding.add(number)
                turns.append(f"step {number}")
                took_first.set()
                # Let go only once the other worker's step holds the lock or waits for it: the
                # lock is never free in between, as with busy workers.
                while not built.is_set() and other not in holding:
                    if other in pids and _waits(watch, pids[other]):
                        break
                    time.sleep(0.01)
                holding.discard(number)
                cursor.execute("select pg_advisory_unlock_shared(%s)", (key,))

    workers = [
        threading.Thread(target=steps_of_one_worker, args=(number,), daemon=True)
        for number in (0, 1)
    ]
    workers[0].start()
    assert took_first.wait(PATIENCE_SECONDS), "the first step never took the lock"
    workers[1].start()
    failed: list[BaseException] = []
    warehouse = Warehouse.at(tmp_path / "signing.duckdb", "postgres")
    credentials = {"DESTINATION__POSTGRES__CREDENTIALS": database.credentials}
    # A build waits up to 10 s for load steps here (10 minutes by default).
    with environment_set({**credentials, "SIGNING_ETL_LOCK_WAIT_SECONDS": "10"}):
        try:
            with warehouse.models_hold():
                turns.append("build")
        except Exception as error:
            failed.append(error)
        finally:
            built.set()
    for worker in workers:
        worker.join(PATIENCE_SECONDS)
    assert failed == []  # not kept out until its patience ran out (exit 75)
    assert "build" in turns
    assert {"step 0", "step 1"} <= set(turns)  # the steps did overlap


def _waits(watch: Any, pid: int) -> bool:
    """Whether the session `pid` waits for an advisory lock."""
    watch.execute(
        "select count(*) from pg_locks where locktype = 'advisory' and not granted and pid = %s",
        (pid,),
    )
    row: Any = watch.fetchone()
    return bool(row[0])
