"""`signing-etl webhooks subscribe | list | unsubscribe` against the sandbox over real HTTP: what
the service holds afterwards (the sandbox's own store) is the truth; the secrets it showed once
are kept beside the warehouse, 0600, and nowhere in the output; a read-only key, a lost secret
and a rotation, with deliveries the receiver verifies before and after."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from sandbox import RunningSandbox
from tests.support import SandboxFactory, cli_env, error_lines, new_key, run_cli
from tests.support.webhooks import ServedReceiver, delivery, free_port

pytestmark = pytest.mark.slow  # CLI runs against the sandbox per case

EVENTS = {
    "shipment.sent",
    "shipment.opened",
    "shipment.signed",
    "shipment.completed",
    "shipment.expired",
    "shipment.delivery_failed",
    "contact.created",
}


@pytest.fixture
def running(make_sandbox: SandboxFactory) -> RunningSandbox:
    return make_sandbox(limits_enabled=False, shipments=50)


def webhooks(running: RunningSandbox, folder: Path, *args: str, key: str | None = None) -> Any:
    return run_cli(
        ["webhooks", *args, "--duckdb", str(folder / "signing.duckdb")],
        cwd=folder,
        env=cli_env(running, key=key),
    )


def secrets_file(folder: Path) -> Path:
    return folder / ".signing.webhooks" / "secrets.json"


def held(folder: Path) -> dict[str, dict[str, Any]]:
    """The subscriptions of `default` in the secrets file, by id."""
    document = json.loads(secrets_file(folder).read_text())
    return {s["id"]: s for s in document["workspaces"]["default"]["subscriptions"]}


def at_service(running: RunningSandbox) -> dict[str, tuple[str, str, str]]:
    """The sandbox's own subscriptions: id -> (event, target URL, secret)."""
    with running.store.lock:
        return {h.id: (h.event, h.target_url, h.secret) for h in running.store.webhooks.values()}


def test_subscribe_list_and_unsubscribe_keep_the_secrets_beside_the_warehouse_only(
    running: RunningSandbox, tmp_path: Path
) -> None:
    target = "https://hooks.example.com/signing"
    done = webhooks(running, tmp_path, "subscribe", "--target-url", target)
    assert done.returncode == 0, done.stderr
    service = at_service(running)
    assert {event for event, _, _ in service.values()} == EVENTS
    assert {url for _, url, _ in service.values()} == {f"{target}/default"}
    kept = held(tmp_path)
    assert {i: s["secret"] for i, s in kept.items()} == {i: h[2] for i, h in service.items()}
    assert all(s["retired_at"] is None for s in kept.values())
    assert stat.S_IMODE(secrets_file(tmp_path).stat().st_mode) == 0o600
    assert stat.S_IMODE(secrets_file(tmp_path).parent.stat().st_mode) == 0o700
    assert all(secret not in done.stdout + done.stderr for _, _, secret in service.values())
    assert done.stdout.count("subscribed") == len(EVENTS)

    listed = webhooks(running, tmp_path, "list")
    assert listed.returncode == 0, listed.stderr
    for hook_id in service:
        assert hook_id in listed.stdout
    assert "no (re-subscribe" not in listed.stdout

    again = webhooks(running, tmp_path, "subscribe", "--target-url", target)
    assert again.returncode == 0, again.stderr
    assert at_service(running) == service  # kept: the secrets are held
    assert again.stdout.count("kept") == len(EVENTS)

    gone = webhooks(running, tmp_path, "unsubscribe")
    assert gone.returncode == 0, gone.stderr
    assert at_service(running) == {}
    assert all(s["retired_at"] is not None for s in held(tmp_path).values())


def test_a_key_without_write_gets_one_line_and_changes_nothing(
    running: RunningSandbox, tmp_path: Path
) -> None:
    reader = new_key(running, scopes=["read"])
    done = webhooks(
        running, tmp_path, "subscribe", "--target-url", "https://h.example.com", key=reader
    )
    assert done.returncode == 1
    [line] = error_lines(done.stderr)
    assert "`write` scope" in line
    assert "403" in line
    assert "Traceback" not in done.stderr
    assert at_service(running) == {}
    assert not secrets_file(tmp_path).exists()


def test_a_lost_secret_is_replaced_by_a_new_subscription(
    running: RunningSandbox, tmp_path: Path
) -> None:
    target = "https://hooks.example.com/signing"
    assert webhooks(running, tmp_path, "subscribe", "--target-url", target).returncode == 0
    before = at_service(running)
    secrets_file(tmp_path).unlink()  # a new machine, a lost file
    listed = webhooks(running, tmp_path, "list")
    assert listed.stdout.count("no (re-subscribe") == len(EVENTS)
    done = webhooks(running, tmp_path, "subscribe", "--target-url", target)
    assert done.returncode == 0, done.stderr
    after = at_service(running)
    assert len(after) == len(EVENTS)
    assert not set(after) & set(before)  # every one replaced, none left without its secret
    assert {i: s["secret"] for i, s in held(tmp_path).items()} == {
        i: h[2] for i, h in after.items()
    }
    assert done.stdout.count("replaced (secret lost)") == len(EVENTS)


def test_a_rotation_verifies_the_old_secret_a_while_and_then_only_the_new(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=50, webhook_retry_base_s=0.05)
    port = free_port()
    target = f"http://127.0.0.1:{port}"
    args = ["subscribe", "--target-url", target, "--event", "contact.created"]
    assert webhooks(running, tmp_path, *args).returncode == 0
    [(old_id, (_, url, old_secret))] = at_service(running).items()
    receiver = ServedReceiver(
        tmp_path, tmp_path / "signing.duckdb", cli_env(running), "--port", str(port), "--no-loads"
    )
    assert receiver.start() == [f"workspace default: {url}"]
    try:
        rotated = webhooks(running, tmp_path, *args, "--rotate")
        assert rotated.returncode == 0, rotated.stderr
        [(new_id, (_, _, new_secret))] = at_service(running).items()
        assert new_id != old_id
        assert new_secret != old_secret
        assert held(tmp_path)[old_id]["retired_at"] is not None
        assert held(tmp_path)[new_id]["retired_at"] is None
        payload: dict[str, Any] = {
            "event": "contact.created",
            "workspace_id": running.store.workspace.id,
            "contact": {"id": "ct_rotated"},
        }
        # Both secrets verify while deliveries signed with the old one may still come.
        for number, secret in enumerate((old_secret, new_secret)):
            answer = delivery(url, secret, payload, delivery_id=f"dlv_rotation_{number}")
            assert answer.status_code == 200, answer.text
        # Once the grace period is over, only the new one does.
        _retired_long_ago(secrets_file(tmp_path), old_id)
        late = delivery(url, old_secret, payload, delivery_id="dlv_rotation_late")
        assert late.status_code == 401
        assert delivery(url, new_secret, payload, delivery_id="dlv_new").status_code == 200
    finally:
        receiver.stop()
    assert old_secret not in receiver.log()
    assert new_secret not in receiver.log()


def _retired_long_ago(path: Path, subscription_id: str) -> None:
    """Move a retired secret's retirement an hour back (as if the grace period had passed)."""
    document = json.loads(path.read_text())
    for subscription in document["workspaces"]["default"]["subscriptions"]:
        if subscription["id"] == subscription_id:
            subscription["retired_at"] = "2000-01-01T00:00:00.000000+00:00"
    replacement = path.with_suffix(".new")
    replacement.write_text(json.dumps(document))
    replacement.chmod(0o600)
    replacement.replace(path)


def test_a_target_url_with_credentials_or_a_query_is_refused_before_any_request(
    running: RunningSandbox, tmp_path: Path
) -> None:
    for target in ("https://user:pw@hooks.example.com/x", "https://hooks.example.com/x?token=1"):
        done = webhooks(running, tmp_path, "subscribe", "--target-url", target)
        assert done.returncode == 1
        [line] = error_lines(done.stderr)
        assert "pw@" not in line
        assert "token=1" not in line
    assert at_service(running) == {}
