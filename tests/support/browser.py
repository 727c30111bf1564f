"""Headless Chromium (Debian's `chromium`) for checking pages as a browser sees them: the DOM
after its scripts ran, with no network."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, Route, sync_playwright

# Flags a machine with a closed network needs (no background connections, no updates), and
# `--no-sandbox` because the tests may run as root.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def chromium() -> str:
    """The Chromium executable; CI installs Debian's package (`.ci/run`)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Chromium is not installed: apt-get install chromium (CI's .ci/run does)"
    return found


def dom_after_load(page: Path) -> str:
    """The document of `page` serialized after it loaded and its scripts (if any) ran."""
    with tempfile.TemporaryDirectory() as profile:
        shown = subprocess.run(
            [
                chromium(),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--dump-dom",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    return shown.stdout


@contextmanager
def offline_page(page: Path, *, explorer: bool = True) -> Iterator[tuple[Page, list[str]]]:
    """`page` opened in headless Chromium driven by Playwright (Debian's browser, no download),
    with every request but the file itself refused and listed, once it loaded and (`explorer`)
    its explorer has drawn."""
    refused: list[str] = []

    def only_the_file(route: Route) -> None:
        if route.request.url == page.as_uri():
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium(),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            opened = browser.new_page(viewport={"width": 1280, "height": 900})
            opened.route("**/*", only_the_file)
            opened.goto(page.as_uri())
            if explorer:
                opened.wait_for_selector("body[data-explorer=ready]", timeout=60_000)
            yield opened, refused
        finally:
            browser.close()
