"""`signing-etl`: the console script. Each command lives with its concern (`load/cli.py`,
`status/cli.py`, ...) as a plain function; this module only registers them, in one style, and
turns usage errors into one line. It holds no logic of its own."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from pipelines.console import output
from pipelines.console.output import printable
from pipelines.demo import demo_command
from pipelines.load.cli import load_command
from pipelines.metrics.cli import metrics_command
from pipelines.modeling.cli import models_command
from pipelines.privacy.cli import forget_command
from pipelines.query import sql_command
from pipelines.report.cli import report_command
from pipelines.sandbox_cli import sandbox_advance_command, sandbox_command
from pipelines.status.cli import status_command
from pipelines.webhooks.cli import webhooks_app

# dbt (pipelines.modeling.build), the notebooks and the sandbox's server are imported where they
# are used: together they cost seconds of start-up that `load --no-models` and `status` don't need.

COMMANDS: dict[str, Callable[..., Any]] = {
    "load": load_command,
    "status": status_command,
    "models": models_command,
    "sql": sql_command,
    "metrics": metrics_command,
    "report": report_command,
    "forget": forget_command,
    "demo": demo_command,
    "sandbox": sandbox_command,
    "sandbox-advance": sandbox_advance_command,
}
GROUPS: dict[str, typer.Typer] = {"webhooks": webhooks_app}

app = typer.Typer(
    help="Load an electronic signing service into an analytics warehouse.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help shows `[sources.signing.workspaces.<name>]` as written
)
for name, command in COMMANDS.items():
    app.command(name)(command)
for name, group in GROUPS.items():
    app.add_typer(group, name=name)


@app.callback()
def main(
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            help="text (timestamped lines when not on a terminal) or json (one object a line).",
        ),
    ] = "text",
) -> None:
    """Load an electronic signing service into an analytics warehouse."""
    if log_format not in ("text", "json"):
        raise typer.BadParameter("--log-format must be text or json")
    output.configure("json" if log_format == "json" else "text")


def run() -> None:
    """The console script `signing-etl`: `app`, with usage errors (an unknown option, a value
    of the wrong kind) said in the log format asked for, one line each, like every other
    message: a JSON log stays JSON, a cron log stays stamped."""
    words, asked = log_format_first(sys.argv[1:])
    output.configure("json" if asked == "json" else "text")
    try:
        code = app(args=words or ["--help"], standalone_mode=False)
    except typer.Exit as stop:
        code = stop.exit_code
    except typer.TyperException as error:  # a usage error: click's own, one line
        output.error(f"{printable(error.format_message())} (see --help)")
        code = error.exit_code
    except typer.Abort:
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


def log_format_first(words: list[str]) -> tuple[list[str], str | None]:
    """The command line with `--log-format` moved before the command wherever it was given
    (`signing-etl load --log-format json` as `signing-etl --log-format json load`, as a cron
    line is naturally written), and the format asked for (the last one given)."""
    rest: list[str] = []
    asked: str | None = None
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":  # what follows is an argument, whatever it looks like
            rest.extend(words[index:])
            break
        if word == "--log-format" and index + 1 < len(words):
            asked, index = words[index + 1], index + 2
            continue
        if word.startswith("--log-format="):
            asked, index = word.split("=", 1)[1], index + 1
            continue
        rest.append(word)
        index += 1
    return ([] if asked is None else ["--log-format", asked]) + rest, asked


if __name__ == "__main__":
    run()
