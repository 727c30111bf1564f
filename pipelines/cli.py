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
    words = sys.argv[1:]
    asked = next((words[i + 1] for i, word in enumerate(words[:-1]) if word == "--log-format"), "")
    asked = next((w.split("=", 1)[1] for w in words if w.startswith("--log-format=")), asked)
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


if __name__ == "__main__":
    run()
