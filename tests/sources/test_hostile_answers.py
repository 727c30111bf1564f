"""Answers the service should never give end a run in one line, within the settings: a gzip
bomb, an answer dripped a byte at a time, a `/me` that only fails, a 200 without `data`, error
messages that forge log lines; and a base URL that carries secrets is refused before any request.

Every case is a stand-in server over loopback HTTP; the source is built as a user's run builds
it (`connect()` with its settings from dlt config, here environment variables) or run
through the pipeline or the CLI. Time bounds are generous (a setting plus one attempt plus
slack); the request counts are exact where the logic makes them so.
"""

from __future__ import annotations

import asyncio
import os
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pipelines.load.run import LoadOptions, load_incremental
from sources.signing import (
    KeyRefused,
    ResponseTooLarge,
    ServiceUnreachable,
    SigningAPIError,
    configured_source,
    connect,
)
from sources.signing.client import SigningClient, item_path
from sources.signing.errors import NotFound
from tests.support import (
    FakeAPI,
    FakeWorkspace,
    StandIn,
    cli_env,
    describe,
    fast,
    load_args,
    message_lines,
    run_cli,
    source_env,
)

KEY = "sk_test_hostile_0123456789"
MIB = 1024 * 1024
SLACK = 3.0  # seconds a loaded machine may add to any bound below

CONTACTS_ONLY = LoadOptions(resources=("contacts",))


Handler = Callable[[Request], Awaitable[Response]]


def answering(handler: Handler) -> Starlette:
    """An app that answers every path with `handler`."""
    return Starlette(routes=[Route("/{path:path}", handler)])


# ---------------------------------------------------------------------- size of an answer
@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """200 MB of JSON whitespace, gzipped to about 200 kB (made in pieces, never whole)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    piece = b" " * MIB
    parts = [packer.compress(b"{")] + [packer.compress(piece) for _ in range(200)]
    parts.append(packer.compress(b"}") + packer.flush())
    return b"".join(parts)


@pytest.mark.parametrize("encoding", ["gzip", "identity"])
def test_an_answer_past_max_response_bytes_stops_the_run_unread_and_not_retried(
    gzip_bomb: bytes, encoding: str
) -> None:
    """`SOURCES__SIGNING__MAX_RESPONSE_BYTES=1048576`: a 200 MB gzip bomb is inflated no
    further than 1 MiB, and a plain 2 MiB body is refused by its length; either stops the run
    at once (asking again would bring the same) in one line."""
    body = gzip_bomb if encoding == "gzip" else b"[" + b" " * (2 * MIB) + b"]"

    async def huge(request: Request) -> Response:
        headers = {"content-encoding": encoding} if encoding == "gzip" else {}
        return Response(body, media_type="application/json", headers=headers)

    with (
        StandIn(answering(huge)) as stand_in,
        source_env(stand_in.base_url, KEY, max_response_bytes=MIB),
    ):
        tracemalloc.start()
        try:
            with pytest.raises(ResponseTooLarge) as stopped:
                connect(configured_source())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        requests = stand_in.count

    message = str(stopped.value)
    assert message == (
        "GET /me answered more than max_response_bytes (1,048,576 bytes, decompressed); "
        "nothing more was read"
    )
    assert requests == 1
    assert stopped.value.exit_code == 1
    # Inflating the bomb whole took 200 MB; now a few MiB at most are ever held.
    assert peak < 16 * MIB, f"{peak:,} bytes at the peak"


def test_the_cli_names_a_gzip_bomb_in_one_line_with_the_default_limit(
    gzip_bomb: bytes, tmp_path: Path
) -> None:
    """The default `max_response_bytes` (64 MiB) stops a 200 MB bomb too; the user sees one
    line and exit 1."""

    async def bomb(request: Request) -> Response:
        return Response(
            gzip_bomb, media_type="application/json", headers={"content-encoding": "gzip"}
        )

    with StandIn(answering(bomb)) as stand_in:
        env = {
            **cli_env(None),
            "SOURCES__SIGNING__API_KEY": KEY,
            "SOURCES__SIGNING__BASE_URL": stand_in.base_url,
        }
        result = run_cli(load_args(tmp_path / "signing.duckdb"), cwd=tmp_path, env=env)

    assert result.returncode == 1, describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    lines = message_lines(result.stderr)
    assert len(lines) == 1, describe(result)
    assert "GET /me answered more than max_response_bytes (67,108,864 bytes" in lines[0]
    assert KEY not in result.stderr + result.stdout


# ---------------------------------------------------------------------- time of an answer
async def drip(request: Request) -> Response:
    """200 at once, then a byte of body every 0.2 s, forever."""

    async def bytes_forever() -> AsyncIterator[bytes]:
        yield b"{"
        while True:
            await asyncio.sleep(0.2)
            yield b" "

    return StreamingResponse(bytes_forever(), media_type="application/json")


async def silence(request: Request) -> Response:
    """Not a byte, not even headers, for an hour."""
    await asyncio.sleep(3600)
    return JSONResponse({})


@pytest.mark.parametrize("answer", [drip, silence], ids=["drip", "silence"])
def test_an_answer_that_never_completes_ends_at_the_request_deadline(answer: Handler) -> None:
    """`SOURCES__SIGNING__REQUEST_DEADLINE_SECONDS=2` and `..._GIVE_UP_AFTER_SECONDS=3`: each
    attempt ends at 2 s, whether the body drips within every read's 30 s time-out or nothing
    comes at all; the slow attempts count toward giving up, so the second one is the last."""
    with (
        StandIn(answering(answer)) as stand_in,
        source_env(stand_in.base_url, KEY, request_deadline_seconds=2, give_up_after_seconds=3),
    ):
        began = time.monotonic()
        with pytest.raises(ServiceUnreachable) as stopped:
            connect(configured_source())
        took = time.monotonic() - began
        requests = stand_in.count

    message = str(stopped.value)
    assert "\n" not in message
    assert "no whole answer within request_deadline_seconds (2 s) on GET /me" in message
    assert requests == 2, message
    assert 2 * 2 <= took <= 3 + 2 + SLACK, took


# ---------------------------------------------------------------------- giving up
async def always_500(request: Request) -> Response:
    return JSONResponse({"error": {"code": "server_error", "message": "down"}}, status_code=500)


def test_a_dead_me_is_given_up_on_after_give_up_after_seconds() -> None:
    """Every answer a 500: the run stops about `give_up_after_seconds` after the first request,
    not after the eight attempts' back-off (43 s before), and no back-off sleeps past that
    moment: the last attempt goes out right at it."""
    with StandIn(answering(always_500)) as stand_in:
        settings = configured_source(api_key=KEY, base_url=stand_in.base_url)
        began = time.monotonic()
        with pytest.raises(ServiceUnreachable) as stopped:
            connect(replace(settings, give_up_after_seconds=4))
        took = time.monotonic() - began
        arrivals = [a.at for a in stand_in.arrivals]

    assert str(stopped.value).startswith(f"gave up on 127.0.0.1:{stand_in.port} after ")
    assert str(stopped.value).endswith("HTTP 500 on GET /me")
    assert 2 <= len(arrivals) < 8, arrivals  # time stopped it, not the attempt count
    assert 4 <= took <= 4 + SLACK, took
    last_after_first = arrivals[-1] - arrivals[0]
    assert 4 - 0.5 <= last_after_first <= 4 + 1.0, last_after_first


def test_give_up_after_seconds_from_the_environment_holds_on_the_first_request() -> None:
    """`SOURCES__SIGNING__GIVE_UP_AFTER_SECONDS=3`, resolved by dlt as a user's run does."""
    with (
        StandIn(answering(always_500)) as stand_in,
        source_env(stand_in.base_url, KEY, give_up_after_seconds=3),
    ):
        began = time.monotonic()
        with pytest.raises(ServiceUnreachable):
            connect(configured_source())
        took = time.monotonic() - began
        requests = stand_in.count

    assert 2 <= requests < 8
    assert 3 <= took <= 3 + SLACK, took


def test_a_rate_limit_reset_centuries_away_stops_the_run_instead_of_waiting(
    tmp_path: Path,
) -> None:
    """`/me` says no request is left and the bucket resets in 10^20 s: that is not waited out
    (the pacer used to wait, or fail with an OverflowError); the run stops as an over-long
    Retry-After does, exit 75."""
    workspace = FakeWorkspace("ws_reset")
    api = FakeAPI({KEY: workspace}).app()

    async def me_then_wait(request: Request) -> Response:
        headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(10**20)}
        return JSONResponse(workspace.me(), headers=headers)

    api.router.routes.insert(0, Route("/v1/me", me_then_wait))
    with StandIn(api) as stand_in, source_env(stand_in.base_url, KEY):
        began = time.monotonic()
        result = load_incremental(tmp_path / "signing.duckdb", settings=fast())
        took = time.monotonic() - began
        requests = stand_in.count

    assert result.exit_code == 75
    assert result.stopped is not None
    assert "asked to wait 100,000,000,000,000,000,000 s (X-RateLimit-Reset)" in result.stopped
    assert requests == 1
    assert took < 60, took


# ---------------------------------------------------------------------- base URL
@pytest.mark.parametrize(
    "shape",
    [
        "http://reader:s3cret-part@{host}/v1",
        "http://{host}/v1?token=s3cret-part",
        "http://{host}/v1#s3cret-part",
    ],
    ids=["user-password", "query-token", "fragment"],
)
def test_a_base_url_that_carries_a_secret_is_refused_without_repeating_it(shape: str) -> None:
    workspace = FakeWorkspace("ws_url")
    with StandIn(FakeAPI({KEY: workspace}).app()) as stand_in:
        base_url = shape.format(host=f"127.0.0.1:{stand_in.port}")
        with pytest.raises(SigningAPIError) as refused:
            connect(configured_source(api_key=KEY, base_url=base_url))
        requests = stand_in.count

    message = str(refused.value)
    assert requests == 0  # refused before anything was sent
    assert "s3cret-part" not in message
    assert "reader" not in message
    assert "\n" not in message
    assert f"http://127.0.0.1:{stand_in.port}/v1" in message  # what it was about
    assert "SOURCES__SIGNING__API_KEY" in message


# ---------------------------------------------------------------------- bodies and messages
FORGED_MESSAGE = f"line one\n2026-01-01T00:00:00Z INFO all fine \x1b[2J\x1b[31mred {KEY}"
CLEAN_MESSAGE = "line one\\x0a2026-01-01T00:00:00Z INFO all fine \\x1b[2J\\x1b[31mred ***"


def test_a_200_without_data_stops_the_run_naming_the_endpoint(tmp_path: Path) -> None:
    """`/contacts` answers 200 with an error body: the run stops (exit 1) with one line that
    says so and quotes the body's error as one clean line, without the key."""
    workspace = FakeWorkspace("ws_data")
    api = FakeAPI({KEY: workspace}).app()

    async def error_body(request: Request) -> Response:
        return JSONResponse({"error": {"code": "server_error", "message": FORGED_MESSAGE}})

    api.router.routes.insert(0, Route("/v1/contacts", error_body))
    with StandIn(api) as stand_in, source_env(stand_in.base_url, KEY):
        result = load_incremental(tmp_path / "signing.duckdb", CONTACTS_ONLY, settings=fast())

    assert result.exit_code == 1
    assert result.stopped == (
        f"GET /contacts answered 200 without `data` (error server_error: {CLEAN_MESSAGE})"
    )


def nested(levels: int) -> object:
    """A value `levels` objects deep, with a forged `_dlt_id` at the bottom."""
    value: object = {"_dlt_id": "forged"}
    for _ in range(levels - 1):
        value = {"deeper": value}
    return value


@pytest.mark.parametrize(
    ("levels", "stopped"),
    [
        (40, None),  # odd but loadable: kept whole, as JSON
        (
            300,
            "GET /contacts answered JSON nested deeper than 64 levels, which no record of "
            "the API is",
        ),
    ],
)
def test_a_record_nested_deeper_than_the_api_ever_does_stops_the_run_in_one_line(
    tmp_path: Path, levels: int, stopped: str | None
) -> None:
    """Records are hashed and loaded through orjson, which writes at most 255 levels (it reads
    1,024): a deeper record used to fail the extract step with a `TypeError`."""
    contact = {"id": "con_1", "updated_at": "2026-01-01T00:00:00.000Z", "odd": nested(levels)}
    workspace = FakeWorkspace("ws_deep", contacts=[contact])

    with StandIn(FakeAPI({KEY: workspace}).app()) as stand_in, source_env(stand_in.base_url, KEY):
        result = load_incremental(tmp_path / "signing.duckdb", CONTACTS_ONLY, settings=fast())

    assert result.stopped == stopped
    assert result.exit_code == (0 if stopped is None else 1)
    assert result.rows.get("contacts") == (1 if stopped is None else None)


def test_the_services_error_message_reaches_an_exception_as_one_clean_line() -> None:
    """A refusal's message with a newline, ANSI escapes and the key itself: the exception's
    message is one line, its control characters escaped, the key blanked out."""

    async def refuse(request: Request) -> Response:
        body = {"error": {"code": "unauthorized", "message": FORGED_MESSAGE}}
        return JSONResponse(body, status_code=401)

    with StandIn(answering(refuse)) as stand_in, pytest.raises(KeyRefused) as refused:
        connect(configured_source(api_key=KEY, base_url=stand_in.base_url))

    assert str(refused.value) == (
        f"the API key was refused (401 unauthorized: {CLEAN_MESSAGE}); check the key"
    )


def test_a_long_error_message_is_cut_and_ids_stay_one_path_segment() -> None:
    """An id from the service cannot steer a request elsewhere (`../me`, `..`), and a message
    of 10,000 characters is cut to one short line."""
    seen: list[str] = []

    async def not_found(request: Request) -> Response:
        seen.append(request.scope["raw_path"].decode())  # as sent, before unquoting
        body = {"error": {"code": "not_found", "message": "x" * 10_000}}
        return JSONResponse(body, status_code=404)

    with StandIn(answering(not_found)) as stand_in:
        client = SigningClient(stand_in.base_url, KEY)
        try:
            with pytest.raises(NotFound) as missing:
                client.get(item_path("shipments", "../me", "events"))
            with pytest.raises(NotFound):
                client.get(item_path("shipments", "..", "events"))
        finally:
            client.close()

    assert seen == ["/v1/shipments/..%2Fme/events", "/v1/shipments/%2E%2E/events"]
    assert len(str(missing.value)) < 220, str(missing.value)
    assert str(missing.value).endswith("x…")


@pytest.fixture(autouse=True)
def _no_leftover_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No `SOURCES__SIGNING__*` from the calling shell leaks into these runs."""
    for name in [n for n in os.environ if n.startswith("SOURCES__SIGNING__")]:
        monkeypatch.delenv(name)
