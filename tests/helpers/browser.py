"""Open an HTML file in real headless Chromium: the DOM after load, or a screenshot.

Used by report tests to prove a page opens cleanly in a browser, not just that the text holds
the right strings. Tests skip (with the reason) where Chromium is not installed.
"""
from __future__ import annotations

import html
import json
import os
import re
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


def dump_dom(page: Path, binary: Optional[str] = None, size: str = "1400,900") -> str:
    """The serialized DOM after Chromium loaded and laid out the page at `size` (raises CalledProcessError on
    a crash). A test that measures the layout adds a script to its own copy of the page (text_boxes)."""
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="tunefleet-chromium-") as profile:
        done = subprocess.run([*_argv(binary, profile), f"--window-size={size}", "--virtual-time-budget=5000",
                               "--dump-dom", Path(page).resolve().as_uri()],
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
                              env={**os.environ, "HOME": profile})
    return done.stdout


# Writes, into <pre id="text-boxes">, the rendered box of every <text> of every SVG plot as JSON:
# [{"plot": n, "text": "...", "left":, "top":, "right":, "bottom":}].
_TEXT_BOXES_SCRIPT = """<script>
window.addEventListener("load", () => {
  const boxes = [];
  document.querySelectorAll("svg.plot").forEach((svg, plot) => svg.querySelectorAll("text").forEach((t) => {
    const r = t.getBoundingClientRect();
    boxes.push({plot, text: t.textContent, left: r.left, top: r.top, right: r.right, bottom: r.bottom});
  }));
  const out = document.createElement("pre");
  out.id = "text-boxes";
  out.textContent = JSON.stringify(boxes);
  document.body.appendChild(out);
});
</script>"""


def text_boxes(page: Path, work_dir: Path, size: str = "1400,900") -> list:
    """The boxes Chromium drew each SVG plot's text in (a copy of the page with a measuring script; the page
    itself has none)."""
    measured = Path(work_dir) / f"measured-{Path(page).name}"
    measured.write_text(Path(page).read_text().replace("</body>", _TEXT_BOXES_SCRIPT + "</body>"))
    found = re.search(r'<pre id="text-boxes">(.*?)</pre>', dump_dom(measured, size=size), re.S)
    if not found:
        raise AssertionError("the measuring script did not run")
    return json.loads(html.unescape(found.group(1)))


def overlapping(boxes: list, slack: float = 0.5) -> list:
    """Pairs of texts of the same plot whose boxes intersect by more than `slack` px each way."""
    pairs = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a["plot"] == b["plot"] and min(a["right"], b["right"]) - max(a["left"], b["left"]) > slack \
                    and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > slack:
                pairs.append((a["text"], b["text"]))
    return pairs


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
