"""What the `webhooks` commands print: subscriptions changed and listed, the receiver's URLs,
and the inbox's state, as tables on stdout (or JSON lines), never reading markup from data."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime

from pipelines.console import output
from pipelines.console.output import PlainTable, printable
from pipelines.webhooks.inbox import InboxStatus
from pipelines.webhooks.secrets_file import now_utc
from pipelines.webhooks.subscriptions import Change, Listed

out = output.stdout_console(lines=False)  # one line per print


def webhooks_line(missed: int, brought: int | None) -> str:
    """What a load found of the webhooks' work: the changes they missed, which it loaded."""
    return (
        f"webhooks: {missed:,} changed shipments and contacts had been missed by them (loaded "
        f"now), {brought or 0:,} had come by webhook"
    )


def print_changes(changes: Sequence[Change]) -> None:
    table = PlainTable("workspace", "event", "subscription", "done", "target URL")
    for change in changes:
        table.add_row(
            change.workspace, change.event, change.subscription_id, change.action, change.target_url
        )
    out.print(table)


def print_listed(listed: Sequence[Listed]) -> None:
    table = PlainTable(
        "workspace",
        "subscription",
        "event",
        "target URL",
        "active",
        "delivered",
        "failed",
        "last error",
        "secret held",
    )
    for item in listed:
        hook = item.subscription
        table.add_row(
            item.workspace,
            hook.get("id"),
            hook.get("event"),
            hook.get("target_url"),
            "yes" if hook.get("is_active") else "no",
            hook.get("delivery_count"),
            hook.get("failure_count"),
            hook.get("last_error") or "",
            "yes" if item.secret_held else "no (re-subscribe to replace it)",
        )
    out.print(table)


def print_urls(urls: Sequence[tuple[str, str, bool]]) -> None:
    """One line per workspace: the local URL of its path (what the proxy, or `subscribe
    --target-url` plus the workspace's name, must reach)."""
    for name, url, subscribed in urls:
        note = "" if subscribed else " (not subscribed: signing-etl webhooks subscribe)"
        out.print(f"workspace {printable(name)}: {url}{note}", highlight=False, soft_wrap=True)
    sys.stdout.flush()


def print_inbox(found: dict[str, InboxStatus], as_json: bool) -> None:
    """Per workspace: deliveries accepted, duplicated, refused (by reason), waiting (since
    when), loaded and set aside (with a reason), and the last drain."""
    if as_json:
        for status in found.values():
            record = asdict(status)
            record["rejected_total"] = status.rejected_total
            sys.stdout.write(json.dumps(record, default=str) + "\n")
        return
    table = PlainTable(
        "workspace",
        "accepted",
        "duplicates",
        "refused",
        "waiting",
        "oldest waiting since",
        "loaded",
        "set aside",
        "last drain",
        title="Webhook inbox",
    )
    for status in found.values():
        drained = status.last_drain
        table.add_row(
            status.workspace,
            f"{status.accepted:,}",
            f"{status.duplicated:,}",
            f"{status.rejected_total:,}",
            f"{status.waiting:,}",
            _since(status.oldest_waiting) if status.oldest_waiting else "",
            f"{status.loaded:,}",
            f"{status.set_aside:,}",
            f"{drained.finished_at[:19]}Z, {drained.outcome}" if drained else "none",
        )
    out.print(table)
    for status in found.values():
        if status.rejected:
            reasons = ", ".join(f"{reason} {n:,}" for reason, n in sorted(status.rejected.items()))
            out.print(printable(f"{status.workspace}: refused: {reasons}"), highlight=False)
        if status.set_aside:
            said = (
                f"{status.workspace}: {status.set_aside:,} set aside for the next load (the "
                f"service would not serve their record: {status.set_aside_reason})"
            )
            out.print(printable(said), highlight=False)
        drained = status.last_drain
        if drained and drained.reason:
            said = f"{status.workspace}: last drain: {drained.reason}"
            out.print(printable(said), highlight=False)


def _since(moment: str) -> str:
    """`2026-11-22 09:05:01Z (12 s ago)`."""
    age = (now_utc() - datetime.fromisoformat(moment)).total_seconds()
    return f"{moment[:10]} {moment[11:19]}Z ({age:,.0f} s ago)"
