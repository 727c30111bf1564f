"""What the command line says, in the shape its reader needs: rich and coloured on a terminal;
one line per message with a UTC timestamp, a level and the run id in a log (cron, Airflow); or
one JSON object per line (`--log-format json`) for log collectors.

Messages and tables carry values from the service and from users (names, error messages, query
results), so nothing printed is ever read as markup (rich's `[...]`, `:emoji:`) and control
characters are shown escaped: a value can neither forge a log line, nor move or clear the
terminal, nor hide a link.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

LogFormat = Literal["text", "json"]
LOGGER = logging.getLogger("signing_etl")
# A console that never wraps when its output is not a terminal: a log line stays one line.
_WIDE = 10_000


# What could change how a line reads on a terminal or in a log: C0 and C1 control characters
# and DEL (tabs are kept), the Unicode line and paragraph separators, and the invisible
# formatting characters (bidirectional overrides, zero widths, the byte order mark).
# (Unicode's format characters, category Cf, as of Unicode 15: the soft hyphen, the Arabic
# and Syriac marks, the Mongolian vowel separator, interlinear annotations, the tag characters
# that can spell hidden text, among them.)
_INVISIBLE = (
    r"\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    r"\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    r"\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    r"\U000e0020-\U000e007f"
)
_CONTROL = re.compile(rf"[\x00-\x08\x0a-\x1f\x7f-\x9f{_INVISIBLE}]")
# The same but the line breaks a multi-line message printed on a terminal is made of.
_TERMINAL_CONTROL = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")


def _escaped(found: re.Match[str]) -> str:
    return found[0].encode("unicode_escape").decode()


def printable(text: str) -> str:
    """`text` with every control character written as its escape (`\\n`, `\\x1b`, ...)."""
    return _CONTROL.sub(_escaped, text)


class _PlainConsole(Console):
    """A console that writes the control characters of any text it is given (a workspace's
    name, a path, a reason the service gave) as escapes, so that no value can move the cursor,
    recolour the terminal or forge a line; renderables such as `PlainTable` escape their own.
    Line breaks are kept only where a caller prints a text of several lines on purpose."""

    def __init__(self, *, lines: bool, **options: Any) -> None:
        super().__init__(**options)
        self._control = _TERMINAL_CONTROL if lines else _CONTROL

    def print(self, *objects: Any, **options: Any) -> None:
        super().print(*map(self._plain_text, objects), **options)

    def _plain_text(self, value: Any) -> Any:
        if isinstance(value, str | Path):
            return self._control.sub(_escaped, str(value))
        return value


def _console(stderr: bool, lines: bool = True) -> Console:
    """A console that reads no markup or emoji codes, highlights nothing and escapes control
    characters in what it prints (`lines`: but line breaks): every value comes out as it is."""
    terminal = (sys.stderr if stderr else sys.stdout).isatty()
    return _PlainConsole(
        lines=lines,
        stderr=stderr,
        width=None if terminal else _WIDE,
        soft_wrap=not terminal,
        markup=False,
        emoji=False,
        highlight=False,
    )


class PlainTable(Table):
    """A rich table whose headers and cells, data among them, show control characters escaped
    (the consoles above read no markup in them)."""

    def __init__(self, *headers: str, title: str | None = None) -> None:
        super().__init__(*map(printable, headers), title=printable(title) if title else None)

    def add_row(self, *cells: Any, **options: Any) -> None:
        super().add_row(*(printable("" if c is None else str(c)) for c in cells), **options)


def stdout_console(*, lines: bool = True) -> Console:
    """The console of stdout; `lines=False` for a view whose every print is one line (a value
    with a line break, a workspace's name, cannot start a line of its own)."""
    return _console(stderr=False, lines=lines)


def stderr_console() -> Console:
    return _console(stderr=True)


class _TextFormatter(logging.Formatter):
    """`error: message` on a terminal; `2026-11-22T02:15:00Z ERROR run=ab12 message` in a log."""

    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def format(self, record: logging.LogRecord) -> str:
        message = printable(record.getMessage())
        if self.terminal:
            return (
                message
                if record.levelno == logging.INFO
                else f"{record.levelname.lower()}: {message}"
            )
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        run = getattr(record, "run_id", None)
        where = f" run={run}" if run else ""
        workspace = getattr(record, "workspace", None)
        if workspace:
            name = printable(workspace)
            where += (
                f" workspace={json.dumps(name) if not name.isprintable() or ' ' in name else name}"
            )
        return f"{stamp} {record.levelname}{where} {message}"


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, run_id, message, and any structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "run_id": getattr(record, "run_id", None),
            "workspace": getattr(record, "workspace", None),
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}) or {})
        # JSON escapes C0 itself; what a terminal or a log viewer would still act on, it is
        # told to escape too, so the line decodes to the same values.
        line = json.dumps(entry, default=str, ensure_ascii=False)
        return _CONTROL.sub(lambda found: f"\\u{ord(found[0]):04x}", line)


RunContext = tuple[str | None, str | None]  # a run's id, and its workspace's configured name


class _RunId(logging.Filter):
    """Tags records with the run id and workspace of their thread (workspaces loading side by
    side each have a run of their own), else the ones the main thread set."""

    def __init__(self) -> None:
        super().__init__()
        self.run: RunContext = (None, None)
        self.local = threading.local()

    def current(self) -> RunContext:
        found: RunContext = getattr(self.local, "run", self.run)
        return found

    def filter(self, record: logging.LogRecord) -> bool:
        run_id, workspace = self.current()
        if not hasattr(record, "run_id"):
            record.run_id = run_id
        if not hasattr(record, "workspace"):
            record.workspace = workspace
        return True


_run_id = _RunId()


def configure(log_format: LogFormat) -> None:
    """Send the CLI's messages to stderr in `log_format` (text adapts to a terminal)."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter(sys.stderr.isatty()))
    handler.addFilter(_run_id)
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def set_run_id(run_id: str | None, workspace: str | None = None) -> None:
    """Tag every message of this thread from now on with this run's id (it is in the run
    record too) and its workspace's configured name; set in the main thread, they are also
    every other thread's default."""
    _run_id.local.run = (run_id, workspace)
    if threading.current_thread() is threading.main_thread():
        _run_id.run = (run_id, workspace)


def current_run() -> RunContext:
    """The run id and workspace this thread's messages carry."""
    return _run_id.current()


def is_json() -> bool:
    return any(isinstance(h.formatter, _JsonFormatter) for h in LOGGER.handlers)


def info(message: str, **fields: Any) -> None:
    LOGGER.info(message, extra={"fields": fields})


def warning(message: str, **fields: Any) -> None:
    LOGGER.warning(message, extra={"fields": fields})


def error(message: str, **fields: Any) -> None:
    LOGGER.error(message, extra={"fields": fields})
