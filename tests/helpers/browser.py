"""Open an HTML file in real headless Chromium: the DOM after load, or a screenshot.

Used by report tests to prove a page opens cleanly in a browser, not just that the text holds
the right strings. Tests skip (with the reason) where Chromium is not installed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = 60


def find_chromium() -> Optional[str]:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _argv(binary: str, profile: str) -> list:
    # --no-sandbox: CI runs as root, where Chromium refuses its sandbox.
    # The background/component/sync switches keep a test run from reaching for the network.
    return [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-extensions", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}"]


def dump_dom(page: Path, binary: Optional[str] = None) -> str:
    """The serialized DOM after Chromium loaded the page (raises CalledProcessError on a crash)."""
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="tunefleet-chromium-") as profile:
        done = subprocess.run([*_argv(binary, profile), "--dump-dom", Path(page).resolve().as_uri()],
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
                              env={**os.environ, "HOME": profile})
    return done.stdout


def screenshot(page: Path, out: Path, size: str = "1200,900", binary: Optional[str] = None) -> Path:
    """A PNG of the page as Chromium drew it."""
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="tunefleet-chromium-") as profile:
        subprocess.run([*_argv(binary, profile), f"--screenshot={Path(out).resolve()}", f"--window-size={size}",
                        Path(page).resolve().as_uri()],
                       capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
                       env={**os.environ, "HOME": profile})
    return Path(out)
