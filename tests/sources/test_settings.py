"""The source's settings as one typed object (`SigningConfiguration`): each setting a user sets
as `SOURCES__SIGNING__<NAME>` reaches the part of the run it bounds, a workspace's own key and
URL win over the shared ones, a setting out of range is one line before any request, and the
key is never shown. Against a stand-in API over loopback; the truth is what the test set."""

from __future__ import annotations

import pytest

from pipelines.configuration import WorkspaceEntry, configured_workspaces
from pipelines.environment import environment_set
from pipelines.errors import CONFIGURATION_FAILURES, ConfigError, failure_reason
from sources.signing import (
    RunControl,
    SigningAPIError,
    configured_source,
    connect,
)
from sources.signing.errors import QUOTE_LIMIT, without_secret
from tests.support import FakeAPI, FakeWorkspace, StandIn

KEY = "sk_test_settings_0123456789"
# Every setting, as a user writes it, each unlike its default.
CONFIGURED = {
    "lag_seconds": "12.5",
    "page_size": "50",
    "concurrency": "3",
    "requests_per_second": "7.5",
    "burst": "9",
    "give_up_after_seconds": "33",
    "max_retry_after_seconds": "44",
    "request_deadline_seconds": "55",
    "max_response_bytes": "123456",
    "max_pages_without_new_records": "6",
    "deletes": "hard",
    "full_check_max_age_hours": "2",
    "mass_delete_share": "0.25",
}


def variables(base_url: str, key: str = KEY) -> dict[str, str]:
    """`SOURCES__SIGNING__*` for `CONFIGURED`, the key and the URL."""
    values = {**CONFIGURED, "api_key": key, "base_url": base_url}
    return {f"SOURCES__SIGNING__{name.upper()}": value for name, value in values.items()}


def test_every_setting_reaches_the_part_of_the_run_it_bounds() -> None:
    with (
        StandIn(FakeAPI({KEY: FakeWorkspace("ws_settings")}).app()) as stand_in,
        environment_set(variables(stand_in.base_url)),
    ):
        control = RunControl()
        try:
            connection = connect(
                configured_source(),
                since="2026-01-01T00:00:00Z",
                max_requests=17,
                reconcile=True,
                control=control,
            )
        finally:
            control.finish()

    client, pacer = connection.client, connection.client.pacer
    assert connection.workspace_id == "ws_settings"
    assert (connection.initial_since, connection.lag_seconds) == ("2026-01-01T00:00:00Z", 12.5)
    assert (connection.page_size, connection.concurrency) == (50, 3)
    assert connection.max_pages_without_new_records == 6
    assert (pacer.rate, pacer.burst, pacer.budget, pacer.max_wait) == (7.5, 9, 17, 44.0)
    assert (client.give_up_after, client.request_deadline) == (33.0, 55.0)
    assert client.max_response_bytes == 123456
    chosen = connection.deletions.settings
    assert (chosen.mode, chosen.reconcile, chosen.allow_mass_delete) == ("hard", True, False)
    assert (chosen.full_check_max_age_hours, chosen.mass_delete_share) == (2.0, 0.25)


def test_a_workspaces_own_key_and_url_win_over_the_shared_ones() -> None:
    entry = WorkspaceEntry("sales", "http://127.0.0.1:9/sales/v1", "sk_test_sales_key")
    with environment_set(variables("http://127.0.0.1:9/shared/v1", "sk_test_shared_key")):
        settings = entry.settings()

    assert (settings.api_key, settings.base_url) == (entry.api_key, entry.base_url)
    assert settings.page_size == int(CONFIGURED["page_size"])  # the rest is the shared one's


def test_the_key_is_never_shown() -> None:
    with environment_set(variables("http://127.0.0.1:9/v1")):
        settings = configured_source()
    entry = WorkspaceEntry("sales", "http://127.0.0.1:9/v1", KEY)

    limits = settings.request_limits()
    shown = [repr(settings), str(settings), f"{settings}", repr(entry), repr(limits)]
    assert settings.api_key == KEY
    assert not [text for text in shown if KEY in text], shown
    assert "page_size=50" in repr(settings)


def _pieces(secret: str, size: int = 8) -> list[str]:
    return [secret[start : start + size] for start in range(len(secret) - size + 1)]


@pytest.mark.parametrize(
    ("words", "secret"),
    [
        ("x" * (QUOTE_LIMIT - 20) + " key " + KEY, KEY),  # the key across the cut
        # httpx's refusal of a key configured with a line break, as bytes and as text
        (f"Illegal header value {f'Bearer {KEY}{chr(10)}'.encode()!r}", KEY + "\n"),
        (f"header {KEY + chr(13)!r} is not valid", KEY + "\r"),
    ],
)
def test_the_key_is_blanked_from_words_before_they_are_cut_or_quoted(
    words: str, secret: str
) -> None:
    line = without_secret(words, secret)
    assert "***" in line
    assert not [piece for piece in _pieces(KEY) if piece in line], line
    assert len(line) <= QUOTE_LIMIT


def refusal_of_key(pasted: str) -> tuple[str, int]:
    """What `connect` says of the key `pasted`, and the requests the stand-in got before."""
    with StandIn(FakeAPI({KEY: FakeWorkspace("ws_pasted")}).app()) as stand_in:
        with environment_set(variables(stand_in.base_url)):
            settings = configured_source()
        settings.api_key = pasted
        with pytest.raises(SigningAPIError) as refused:
            connect(settings)
        return str(refused.value), stand_in.count


@pytest.mark.parametrize("pasted", [f"\u201c{KEY}\u201d", KEY + "\u00e9"])
def test_a_key_with_a_character_that_is_not_ascii_is_refused_before_any_request(
    pasted: str,
) -> None:
    """A header is ASCII: such a key ended in the HTTP library's traceback, and no run record."""
    said, requests = refusal_of_key(pasted)

    assert said.startswith("api_key holds a character that is not ASCII"), said
    assert KEY not in said
    assert requests == 0


@pytest.mark.parametrize("pasted", [KEY + "\n", KEY + "\r\n", " " + KEY, KEY + "\t"])
def test_a_key_pasted_with_a_space_or_line_break_is_refused_before_any_request(
    pasted: str,
) -> None:
    said, requests = refusal_of_key(pasted)

    assert said.startswith("api_key holds a space, a line break"), said
    assert KEY not in said
    assert requests == 0


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("page_size", 4, "page_size must be 5..200 (pages overlap by 4 records), not 4"),
        ("page_size", 201, "page_size must be 5..200 (pages overlap by 4 records), not 201"),
        ("request_deadline_seconds", 0.0, "request_deadline_seconds must be above 0, not 0.0"),
        ("max_response_bytes", 0, "max_response_bytes must be 1 or more, not 0"),
        ("max_pages_without_new_records", 0, "max_pages_without_new_records must be 1 or more"),
        ("full_check_max_age_hours", -1.0, "full_check_max_age_hours must be 0 or more, not -1.0"),
        ("mass_delete_share", 1.5, "mass_delete_share must be between 0 and 1, not 1.5"),
        ("deletes", "erase", "deletes must be soft or hard (SOURCES__SIGNING__DELETES)"),
        # A burst under 1 never lets a request go: the run hung, holding the warehouse.
        ("burst", 0, "burst must be 1 or more, not 0"),
        ("concurrency", 0, "concurrency must be 1 or more, not 0"),
        ("concurrency", -3, "concurrency must be 1 or more, not -3"),
        ("requests_per_second", 0.0, "requests_per_second must be above 0, not 0.0"),
        ("requests_per_second", -1.0, "requests_per_second must be above 0, not -1.0"),
        ("give_up_after_seconds", 0.0, "give_up_after_seconds must be above 0, not 0.0"),
        ("lag_seconds", -5.0, "lag_seconds must be 0 or more, not -5.0"),
        ("max_retry_after_seconds", float("nan"), "max_retry_after_seconds must be 0 or more"),
    ],
)
def test_a_setting_out_of_range_is_one_line_before_any_request(
    setting: str, value: object, said: str
) -> None:
    with StandIn(FakeAPI({KEY: FakeWorkspace("ws_range")}).app()) as stand_in:
        with environment_set(variables(stand_in.base_url)):
            settings = configured_source()
        setattr(settings, setting, value)
        with pytest.raises(SigningAPIError) as refused:
            connect(settings)
        requests = stand_in.count

    assert said in str(refused.value)
    assert "\n" not in str(refused.value)
    assert requests == 0


def test_two_names_for_one_key_are_refused_naming_both_and_no_key() -> None:
    """Two entries with the same key (and API root) are one workspace: both loaded it, and
    `status --check` then failed for ever on the name whose runs the other's shadowed."""
    twins = {
        "SOURCES__SIGNING__BASE_URL": "http://127.0.0.1:9/v1",
        "SOURCES__SIGNING__WORKSPACES__SALES__API_KEY": "sk_test_shared",
        "SOURCES__SIGNING__WORKSPACES__DUP__API_KEY": "sk_test_shared",
    }
    with environment_set(twins), pytest.raises(ConfigError) as refused:
        configured_workspaces()
    said = str(refused.value)
    assert "have the same api_key and base_url, so they are one workspace" in said
    assert {"'sales'", "'dup'"} <= set(said.replace(",", " ").split())
    assert "sk_test_shared" not in said
    other_root = {**twins, "SOURCES__SIGNING__WORKSPACES__DUP__BASE_URL": "http://127.0.0.2:9/v1"}
    with environment_set(other_root):  # another service's workspace may share a key's text
        assert {e.name for e in configured_workspaces()} == {"sales", "dup"}


def test_a_workspace_may_treat_deleted_records_its_own_way() -> None:
    """`deletes` of `[sources.signing.workspaces.<name>]` is that workspace's, as the README
    says; the others keep `[sources.signing]`'s, and an unknown one names its variable."""
    shared = {
        "SOURCES__SIGNING__BASE_URL": "http://127.0.0.1:9/v1",
        "SOURCES__SIGNING__DELETES": "soft",
        "SOURCES__SIGNING__WORKSPACES__HR__API_KEY": "sk_test_hr",
        "SOURCES__SIGNING__WORKSPACES__SALES__API_KEY": "sk_test_sales",
    }
    with environment_set({**shared, "SOURCES__SIGNING__WORKSPACES__HR__DELETES": "hard"}):
        modes = {e.name: e.settings().delete_mode() for e in configured_workspaces()}
    with (
        environment_set({**shared, "SOURCES__SIGNING__WORKSPACES__HR__DELETES": "erase"}),
        pytest.raises(ConfigError) as refused,
    ):
        configured_workspaces()

    assert modes == {"hr": "hard", "sales": "soft"}
    assert str(refused.value) == (
        "workspace 'hr': deletes must be soft or hard "
        "(SOURCES__SIGNING__WORKSPACES__HR__DELETES), not 'erase'"
    )


def test_a_setting_of_the_wrong_type_is_one_line_that_names_its_variable() -> None:
    wrong = {**variables("http://127.0.0.1:9/v1"), "SOURCES__SIGNING__PAGE_SIZE": "many"}
    with environment_set(wrong), pytest.raises(CONFIGURATION_FAILURES) as refused:
        configured_source()

    assert failure_reason(refused.value) == (
        "the setting page_size must be of type int, not 'many' (for the source: "
        "SOURCES__SIGNING__PAGE_SIZE, or page_size under [sources.signing] in .dlt/config.toml)"
    )
