"""Headless Chromium (Debian's `chromium`) for checking pages as a browser sees them: the DOM
after its scripts ran, with no network."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

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
