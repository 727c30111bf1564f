"""dbt's parse kept once per user (`pipelines/modeling/parse_cache.py`): a build in a new folder
reuses it and builds the same marts (checked against the sandbox's own records); the key follows
everything the parse depends on and nothing else; an unreadable copy is only a miss."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipelines.load.run import load_incremental
from pipelines.modeling.build import PROJECT_DIR, build_models
from pipelines.modeling.parse_cache import (
    CACHE_VARIABLE,
    PARTIAL_PARSE_FILE,
    cache_folder,
    cached_parse,
    parse_key,
)
from tests.models.test_marts import assert_marts_match
from tests.support import MODELS_BUILT, SandboxFactory, fast, pointed_at

pytestmark = pytest.mark.slow  # dbt builds with and without the kept parse

DUCKDB = "SIGNING_WAREHOUSE"


def test_a_build_in_a_new_folder_reuses_the_kept_parse_and_builds_the_same_marts(
    make_sandbox: SandboxFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    running = make_sandbox(shipments=40, seed=12, limits_enabled=False)
    first, second = tmp_path / "first" / "signing.duckdb", tmp_path / "second" / "signing.duckdb"
    first.parent.mkdir()
    with pointed_at(running):
        assert load_incremental(first, settings=fast()).stopped is None
    second.parent.mkdir()
    shutil.copy(first, second)

    built_first = build_models(first)
    kept = list((tmp_path / "cache").glob("*.msgpack"))
    built_second = build_models(second)

    assert built_first.success, built_first.summary
    assert built_second.success, built_second.summary
    assert len(kept) == 1
    # dbt parsed in the first folder (and kept its parse there); in the second it did not.
    assert (first.parent / ".signing.dbt" / "target" / PARTIAL_PARSE_FILE).is_file()
    assert not (second.parent / ".signing.dbt" / "target" / PARTIAL_PARSE_FILE).exists()
    target = second.parent / ".signing.dbt" / "target"
    assert (target / "manifest.json").is_file()
    assert (target / "semantic_manifest.json").is_file()
    assert built_second.models_passed == MODELS_BUILT
    assert built_second.tests_passed == built_first.tests_passed > 0
    assert_marts_match(second, running.store)


def _project_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "project"
    shutil.copytree(PROJECT_DIR, copy, ignore=shutil.ignore_patterns("target", "logs"))
    return copy


def test_the_key_follows_what_the_parse_depends_on_and_nothing_else(tmp_path: Path) -> None:
    project = _project_copy(tmp_path)
    key = parse_key(project, None, {DUCKDB: "/a/signing.duckdb"})
    # Another folder, the same file name: the same parse.
    assert parse_key(project, None, {DUCKDB: "/b/c/signing.duckdb"}) == key
    # dbt names the database after the file: another name is another parse.
    assert parse_key(project, None, {DUCKDB: "/a/other.duckdb"}) != key
    assert parse_key(project, "postgres", {DUCKDB: "/a/signing.duckdb"}) != key
    postgres = {"SIGNING_PG_DATABASE": "analytics", "DBT_ENV_SECRET_SIGNING_PG_PASSWORD": "one"}
    with_password = parse_key(project, "postgres", postgres)
    assert parse_key(project, "postgres", {**postgres, "SIGNING_PG_DATABASE": "x"}) != with_password
    # A password never reaches the key.
    other_password = {**postgres, "DBT_ENV_SECRET_SIGNING_PG_PASSWORD": "two"}
    assert parse_key(project, "postgres", other_password) == with_password
    # An edited model is another parse; dbt's own folders are not part of the project.
    (project / "target").mkdir()
    (project / "target" / "manifest.json").write_text("{}")
    assert parse_key(project, None, {DUCKDB: "/a/signing.duckdb"}) == key
    model = next((project / "models").rglob("*.sql"))
    model.write_text(model.read_text() + "\n-- edited\n")
    assert parse_key(project, None, {DUCKDB: "/a/signing.duckdb"}) != key


def test_an_unreadable_kept_parse_is_a_miss_and_the_cache_can_be_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    (tmp_path / "k.msgpack").write_bytes(b"\x93not a manifest")
    assert cached_parse("k") is None
    assert cached_parse("missing") is None
    monkeypatch.setenv(CACHE_VARIABLE, "off")
    assert cache_folder() is None
    monkeypatch.delenv(CACHE_VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder() == tmp_path / "xdg" / "signing-etl" / "dbt-parse"
