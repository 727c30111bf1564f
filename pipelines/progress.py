"""What a run shows while it works: a live line on a terminal, one plain line every 15 s in a
log (cron, Airflow), with the run's counters."""

from __future__ import annotations

import threading
import time

from rich.progress import Progress as RichProgress
from rich.progress import ProgressColumn, SpinnerColumn, Task, TimeElapsedColumn
from rich.text import Text

from pipelines import output
from sources.signing import RunStats

LOG_EVERY_SECONDS = 15.0


class _StatsColumn(ProgressColumn):
    """The run's counters, read at each refresh."""

    def __init__(self, stats: RunStats) -> None:
        super().__init__()
        self._stats = stats

    def render(self, task: Task) -> Text:
        return Text(counts_line(self._stats), overflow="ellipsis", no_wrap=True)


def counts_line(stats: RunStats) -> str:
    rows = ", ".join(f"{t} {n:,}" for t, n in sorted(stats.rows.items())) or "starting"
    return f"{stats.requests:,} requests, {stats.throttled} 429s | {rows}"


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
            run_id = output.current_run_id()  # the lines belong to this thread's run
            self._thread = threading.Thread(target=self._log_lines, args=(run_id,), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._live is not None:
            self._live.stop()
        if self._thread is not None:
            self._thread.join()

    def _log_lines(self, run_id: str | None) -> None:
        output.set_run_id(run_id)
        while not self._done.wait(LOG_EVERY_SECONDS):
            elapsed = time.monotonic() - self._started
            output.info(f"{elapsed:5.0f} s  {counts_line(self._stats)}")
