"""`hold_after`: a workspace's requests past a count wait unanswered until the hold is lifted,
and only that workspace's; what the tests that keep a run part-way through its reads rely on."""

from __future__ import annotations

import threading

import httpx

from sandbox import RunningSandbox, SandboxConfig
from tests.support import START_MS, admin, client_for
from tests.support.sandboxes import held_now, holding, new_key, wait_until_held


def test_requests_past_the_count_wait_until_released_and_other_workspaces_still_answer() -> None:
    config = SandboxConfig(seed=3, shipments=5, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(2)) as running:
        first, second = (store.workspace.id for store in running.stores)
        answers: list[httpx.Response] = []

        def ask_first() -> None:
            with client_for(running, running.api_keys[0]) as client:
                answers.append(client.get("/me"))

        with holding(running, first, after=2):
            with client_for(running, running.api_keys[0]) as client:
                assert [client.get("/me").status_code for _ in range(2)] == [200, 200]
            waiting = threading.Thread(target=ask_first)
            waiting.start()
            wait_until_held(running, first, waiting.is_alive)
            with client_for(running, running.api_keys[1]) as client:
                assert client.get("/me").json()["workspace"]["id"] == second
            assert held_now(running, second) == 0
            assert waiting.is_alive()
            assert answers == []  # still unanswered
        waiting.join(timeout=30)

        assert [a.status_code for a in answers] == [200]
        assert answers[0].json()["workspace"]["id"] == first
        assert held_now(running, first) == 0
        state = admin(running, "GET", f"/state?workspace={first}")
        assert state["requests_served"] == 3  # a held request counts once, when answered


def test_a_hold_on_one_key_holds_only_the_requests_that_carry_it() -> None:
    config = SandboxConfig(seed=3, shipments=5, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(config) as running:
        workspace_id = running.store.workspace.id
        other_key = new_key(running)
        answers: list[httpx.Response] = []

        def ask_with_the_main_key() -> None:
            with client_for(running) as client:
                answers.append(client.get("/me"))

        with holding(running, workspace_id, after=0, key=running.api_key):
            waiting = threading.Thread(target=ask_with_the_main_key)
            waiting.start()
            wait_until_held(running, workspace_id, waiting.is_alive)
            with client_for(running, other_key) as client:
                assert [client.get("/me").status_code for _ in range(3)] == [200, 200, 200]
            assert waiting.is_alive()
            assert answers == []
        waiting.join(timeout=30)

        assert [a.status_code for a in answers] == [200]
        assert held_now(running, workspace_id) == 0
