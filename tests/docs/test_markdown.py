"""Every Markdown file of the repository, rendered by a real Markdown parser (markdown-it-py):
no code fence left open, no relative link to a file that does not exist, no link to an anchor
that no heading of its target makes (GitHub's anchors, computed as GitHub computes them)."""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
# Not ours: the environment, git, dbt's output and packages, and the tools' caches.
SKIPPED = {".venv", ".git", "models/target", "models/dbt_packages"}
CACHES = {".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", "node_modules"}
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, mailto:, ...
_CONTAINER_PREFIX = re.compile(r"^[\s>]*")  # a list item's indent, a block quote's markers


@dataclass(frozen=True)
class Fault:
    """One thing that renders or links wrongly, where it is in the source."""

    path: Path
    line: int
    kind: str  # "unclosed fence", "missing file", "missing anchor"
    detail: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.detail}"


def markdown_files(root: Path) -> list[Path]:
    """Every `*.md` under `root`, but in the folders that are not the project's own."""
    found: list[Path] = []
    for folder, subfolders, files in os.walk(root):
        here = Path(folder)
        subfolders[:] = sorted(
            name
            for name in subfolders
            if name not in CACHES and (here / name).relative_to(root).as_posix() not in SKIPPED
        )
        found.extend(here / name for name in sorted(files) if name.endswith(".md"))
    return found


def _parser() -> MarkdownIt:
    """CommonMark with GitHub's tables, as GitHub renders the files."""
    return MarkdownIt("commonmark").enable("table")


def _parse(path: Path) -> list[Token]:
    return _parser().parse(path.read_text(encoding="utf-8"))


def github_slug(text: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation removed (hyphens and
    underscores stay), each space a hyphen (github-slugger's rule)."""
    kept = (
        ch
        for ch in text.lower()
        if ch.isalnum() or ch in "-_ " or unicodedata.category(ch).startswith("M")
    )
    return "".join(kept).replace(" ", "-")


def _heading_text(inline: Token) -> str:
    """A heading's text as rendered: code spans' content, links' and emphasis's text, no tags."""
    parts = (
        child.content
        for child in inline.children or []
        if child.type in ("text", "code_inline", "softbreak")
    )
    return "".join(parts).strip()


def heading_anchors(tokens: list[Token]) -> set[str]:
    """The anchors a file's headings make; a repeated one gets `-1`, `-2`, ... as on GitHub."""
    occurrences: dict[str, int] = {}
    anchors = set()
    for index, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        slug = github_slug(_heading_text(tokens[index + 1]))
        if slug in occurrences:
            while f"{slug}-{occurrences[slug] + 1}" in occurrences:
                occurrences[slug] += 1
            occurrences[slug] += 1
            slug = f"{slug}-{occurrences[slug]}"
        occurrences[slug] = 0
        anchors.add(slug)
    return anchors


def unclosed_fences(path: Path, tokens: list[Token], lines: list[str]) -> Iterator[Fault]:
    """Fences whose closing marker is missing. markdown-it ends such a block at the end of its
    container (the file, a list item), or at the closing marker of a later fence, whose opening
    line (a marker with an info string, which cannot close) then sits inside it as text."""
    for token in tokens:
        if token.type != "fence" or token.map is None:
            continue
        start, end = token.map
        opened = f"{token.markup}{token.info}"
        marker = re.escape(token.markup[0]) + "{" + str(len(token.markup)) + ",}"
        last = _CONTAINER_PREFIX.sub("", lines[end - 1]) if end - 1 > start else ""
        closed = re.fullmatch(marker + r"\s*", last) is not None
        for number in range(start + 1, end - 1 if closed else end):
            swallowed = _CONTAINER_PREFIX.sub("", lines[number])
            if re.match(marker, swallowed):
                yield Fault(
                    path,
                    start + 1,
                    "unclosed fence",
                    f"{opened} runs on to line {end}, over the fence opened at line "
                    f"{number + 1} ({swallowed.strip()}): close it before that one",
                )
                break
        else:
            if not closed:
                yield Fault(
                    path, start + 1, "unclosed fence", f"{opened} is never closed: the rest is code"
                )


def links(tokens: list[Token]) -> Iterator[tuple[int, str]]:
    """(line, target) of every link and image, in reading order."""
    for token in tokens:
        if token.type != "inline" or token.map is None:
            continue
        line = token.map[0] + 1
        for child in token.children or []:
            line += child.type in ("softbreak", "hardbreak")
            target = child.attrGet("href") if child.type == "link_open" else None
            target = child.attrGet("src") if child.type == "image" else target
            if isinstance(target, str) and target:
                yield line, target


class Checker:
    """Checks files of one repository; each link target's anchors are computed once."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._anchors: dict[Path, set[str]] = {}

    def anchors_of(self, path: Path) -> set[str]:
        if path not in self._anchors:
            self._anchors[path] = heading_anchors(_parse(path))
        return self._anchors[path]

    def check(self, paths: Iterable[Path]) -> list[Fault]:
        faults: list[Fault] = []
        for path in paths:
            text = path.read_text(encoding="utf-8")
            tokens = _parser().parse(text)
            named = path.relative_to(self.root) if path.is_relative_to(self.root) else path
            faults.extend(unclosed_fences(named, tokens, text.splitlines()))
            faults.extend(self._broken_links(path, named, tokens))
        return faults

    def _broken_links(self, path: Path, named: Path, tokens: list[Token]) -> Iterator[Fault]:
        """`path`'s links to no file or to no heading; faults name the file as `named`."""
        for line, target in links(tokens):
            if _SCHEME.match(target) or target.startswith("//"):
                continue  # another site: not checked here
            file_part, _, anchor = target.partition("#")
            file_name = unquote(file_part)
            if not file_name:
                linked = path
            elif file_name.startswith("/"):  # GitHub reads a leading slash as the repository's root
                linked = self.root / file_name.lstrip("/")
            else:
                linked = path.parent / file_name
            linked = Path(os.path.normpath(linked))
            if not linked.is_relative_to(self.root) or not linked.exists():
                yield Fault(
                    named, line, "missing file", f"{target} names no file of the repository"
                )
            elif (
                anchor
                and linked.suffix.lower() == ".md"
                and linked.is_file()
                and unquote(anchor) not in self.anchors_of(linked)
            ):
                yield Fault(named, line, "missing anchor", f"{target}: no heading makes it")


def test_every_markdown_file_renders_closed_and_links_to_what_exists() -> None:
    files = markdown_files(ROOT)
    assert ROOT / "README.md" in files
    assert {ROOT / "docs" / name for name in ("api.md", "design.md")} <= set(files)
    assert not any(".venv" in path.parts for path in files)
    faults = Checker(ROOT).check(files)
    assert not faults, "\n".join(str(fault) for fault in faults)


BROKEN = """\
# A broken page

## Fresh within a minute: `webhooks`!

## Notes

## Notes

- a list item with a closed fence:

  ```sh
  uv run signing-etl load
  ```

Fine: [self](#a-broken-page), [punctuation](#fresh-within-a-minute-webhooks),
[repeated](#notes-1), [other](other.md#present-heading), [folder](sub/), [web](https://x.org/y).

Broken: [no file](missing.md) and [no heading](#no-such-heading),
[repeated too often](#notes-2), [elsewhere](other.md#absent), [outside](../../etc/passwd).

````markdown
```nginx
a longer fence may hold a shorter one's markers
```
````

```sh
a fence its author forgot to close

```nginx
location / {}
```

```sh
never closed
"""


def test_the_checker_reports_each_fault_of_a_broken_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "other.md").write_text("# Other\n\n## Present heading\n")
    (tmp_path / "broken.md").write_text(BROKEN)
    faults = faults_of(tmp_path)
    found = {(fault.kind, fault.line, fault.detail.split(" ")[0]) for fault in faults}
    assert found == {
        ("missing file", 18, "missing.md"),
        ("missing anchor", 18, "#no-such-heading:"),
        ("missing anchor", 19, "#notes-2:"),
        ("missing anchor", 19, "other.md#absent:"),
        ("missing file", 19, "../../etc/passwd"),
        ("unclosed fence", 27, "```sh"),  # the README's fault: it runs on to the next fence
        ("unclosed fence", 34, "```sh"),
    }
    assert "over the fence opened at line 30 (```nginx)" in str(faults)


def faults_of(root: Path) -> list[Fault]:
    return Checker(root).check(markdown_files(root))


def test_markdown_files_leave_out_what_is_not_the_projects(tmp_path: Path) -> None:
    for folder in (".venv/lib", ".git", "models/target", "models/dbt_packages/x", ".pytest_cache"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "README.md").write_text("```\n")
    (tmp_path / "models" / "README.md").write_text("# Models\n")
    assert markdown_files(tmp_path) == [tmp_path / "models" / "README.md"]
