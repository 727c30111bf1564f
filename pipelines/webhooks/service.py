"""What `webhooks serve` runs for one warehouse: the inbox and the secrets beside it, the
receiver's app on its socket, and (unless deliveries are only to be kept) the trigger that
drains the inbox into the warehouse."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence

from pipelines.configuration import WorkspaceEntry
from pipelines.console import output
from pipelines.errors import first_line
from pipelines.warehouse import Warehouse
from pipelines.webhooks.drain import DrainResult, DrainSizes, drain
from pipelines.webhooks.inbox import Inbox
from pipelines.webhooks.receiver import (
    ReceiverSettings,
    SecretsView,
    Server,
    bind,
    local_url,
    receiver_app,
)
from pipelines.webhooks.secrets_file import SecretsFile
from pipelines.webhooks.trigger import DrainTrigger
from sources.signing import Pacing, RunControl


class WebhookReceiver:
    """What `webhooks serve` runs for one warehouse: its inbox and secrets, the app on its
    socket, and (with `load_after`) the trigger that drains the inbox into the warehouse and
    (with `marts`) refreshes the marts after each drain that loaded something."""

    def __init__(
        self,
        warehouse: Warehouse,
        entries: Sequence[WorkspaceEntry],
        settings: ReceiverSettings,
        *,
        load_after: float | None = None,
        load_within: float = 30.0,
        pacing: Pacing | None = None,
        marts: bool = True,
    ) -> None:
        self.entries = list(entries)
        self.settings = settings
        self.inbox = Inbox.open(warehouse.webhooks_dir)
        self.secrets = SecretsView(SecretsFile(warehouse.webhooks_dir))
        try:  # a shared database learns where this host keeps them, for loads from elsewhere
            warehouse.record_webhooks_dir()
        except Exception as error:  # the receiver runs all the same; loads use their folder
            output.warning(f"webhooks: the database did not take this folder: {first_line(error)}")
        self.trigger: DrainTrigger | None = None
        self.marts = marts and load_after is not None
        if load_after is not None:
            sizes = DrainSizes()  # what each workspace's drains take, learnt as they run

            def drain_now(controls: Callable[[], RunControl]) -> list[DrainResult]:
                return drain(
                    warehouse,
                    self.entries,
                    self.inbox,
                    controls=controls,
                    sizes=sizes,
                    pacing=pacing,
                    marts=marts,
                )

            self.trigger = DrainTrigger(drain_now, load_after, load_within, _say)
        app = receiver_app(
            [e.name for e in entries], self.inbox, self.secrets, settings, self._accepted
        )
        self.server = Server(app, bind(settings.host, settings.port), settings.limits)

    def urls(self) -> list[tuple[str, str, bool]]:
        """Per workspace: its name, the local URL of its path, and whether it is subscribed."""
        secrets = self.secrets.current()
        return [
            (
                e.name,
                local_url(self.settings.host, self.server.port, e.name),
                bool(secrets.get(e.name) and secrets[e.name].active()),
            )
            for e in self.entries
        ]

    def run(self) -> int | None:
        """Serve in the foreground until SIGINT or SIGTERM, then cut a running drain short
        (what it fetched is loaded; its deliveries wait for the next start) and return the
        signal's number. uvicorn stops on the signal and raises it again once it has: the
        handlers here take it then, so that the drain is stopped before the process ends."""
        caught: list[int] = []
        previous = {
            kind: signal.signal(kind, lambda number, _: caught.append(number))
            for kind in (signal.SIGINT, signal.SIGTERM)
        }
        self._start_trigger()
        try:
            self.server.serve()
        finally:
            for kind, handler in previous.items():
                signal.signal(kind, handler)
            self.close()
        return caught[0] if caught else None

    def start(self) -> None:
        """Serve in a background thread (the demo, benchmarks)."""
        self._start_trigger()
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
        self.close()

    def close(self) -> None:
        if self.trigger is not None:
            self.trigger.stop()
        self.inbox.close()

    def _start_trigger(self) -> None:
        if self.marts:
            # dbt takes seconds to import: not at the first drain's expense, nor the URLs'.
            threading.Thread(target=_import_dbt, name="import-dbt", daemon=True).start()
        if self.trigger is not None:
            self.trigger.start(waiting=bool(self.inbox.waiting_workspaces()))

    def _accepted(self) -> None:
        if self.trigger is not None:
            self.trigger.notify()


def _import_dbt() -> None:
    import pipelines.modeling.refresh  # noqa: F401 (imported for its side effect: loaded)


def _say(result: DrainResult) -> None:
    if result.outcome == "completed":
        output.info(f"webhooks: {result.line()}")
    else:
        output.warning(f"webhooks: {result.line()}")
    for warning in result.warnings:
        output.warning(f"webhooks: workspace {result.workspace}: {warning}")
