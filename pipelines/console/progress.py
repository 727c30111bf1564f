"""What a run shows while it works: a live line on a terminal, one plain line every 15 s in a
log (cron, Airflow), with the run's counters."""

from __future__ import annotations

import threading
import time

from rich.progress import Progress as RichProgress
from rich.progress import ProgressColumn, SpinnerColumn, Task, TimeElapsedColumn
from rich.text import Text

from pipelines.console import output
from sources.signing import RunStats
from sources.signing.settings import PAGE_SIZE

LOG_EVERY_SECONDS = 15.0


class _StatsColumn(ProgressColumn):
    """The run's counters, read at each refresh."""

    def __init__(self, stats: RunStats) -> None:
        super().__init__()
        self._stats = stats

    def render(self, task: Task) -> Text:
        return Text(counts_line(self._stats, task.elapsed), overflow="ellipsis", no_wrap=True)


def counts_line(stats: RunStats, elapsed: float | None = None) -> str:
    """What a run has done so far: requests (with those that got no answer and the retries),
    429s, rows per table out of the changed records the lists announced, and the time left
    while fetching; then the step it is in (normalizing, loading)."""
    asked = f"{stats.requests:,} requests"
    if stats.failed_attempts or stats.retries:
        asked += f" ({stats.failed_attempts:,} got no answer, {stats.retries:,} retried)"
    rows = ", ".join(_of_total(stats, t, n) for t, n in sorted(stats.rows.items())) or "starting"
    line = f"{asked}, {stats.throttled:,} 429s | {rows}"
    if stats.phase != "fetching":
        return f"{line} | {stats.phase}"
    left = time_left(stats, elapsed)
    return f"{line} | about {left} left" if left else line


def _of_total(stats: RunStats, table: str, count: int) -> str:
    total = stats.list_totals.get(table)
    return f"{table} {count:,} of {total:,}" if total and count <= total else f"{table} {count:,}"


def time_left(stats: RunStats, elapsed: float | None) -> str | None:
    """The fetching time left, from the lists' totals and the pace so far: each changed
    shipment costs two child requests and each document one, plus the list pages."""
    totals = stats.list_totals
    if not elapsed or elapsed < 5 or not totals or not stats.requests:
        return None
    pages = sum(-(-total // PAGE_SIZE) for total in totals.values())
    expected = pages + 2 * totals.get("shipments", 0) + totals.get("documents", 0)
    remaining = expected - stats.requests
    if remaining <= 0:
        return None
    seconds = remaining * elapsed / stats.requests
    return f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.0f} min"


class Progress:
    """Counts while a run works: a live rich.progress line on a terminal; elsewhere (cron
    logs) one plain line every 15 s."""

    def __init__(self, stats: RunStats) -> None:
        self._stats = stats
        self._done = threading.Event()
        self._live: RichProgress | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        main = threading.current_thread() is threading.main_thread()
        console = output.stderr_console()
        if console.is_terminal and not output.is_json() and main:
            self._live = RichProgress(
                SpinnerColumn(),
                TimeElapsedColumn(),
                _StatsColumn(self._stats),
                console=console,
                transient=True,
            )
            self._live.add_task("load", total=None)
            self._live.start()
        else:
            run = output.current_run()  # the lines belong to this thread's run
            self._thread = threading.Thread(target=self._log_lines, args=(run,), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._live is not None:
            self._live.stop()
        if self._thread is not None:
            self._thread.join()

    def _log_lines(self, run: output.RunContext) -> None:
        output.set_run_id(*run)
        while not self._done.wait(LOG_EVERY_SECONDS):
            elapsed = time.monotonic() - self._started
            output.info(f"{elapsed:5.0f} s  {counts_line(self._stats, elapsed)}")
