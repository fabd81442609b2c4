"""The HTML report opened in real headless Chromium: what a person sees, failures first."""
from __future__ import annotations

import re

import pytest

from tests.helpers.browser import dump_dom, find_chromium, screenshot
from tests.helpers.fake_node import FakeTree, desired_state
from verify.local_run import verify_node
from verify.report import write_reports

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed")]


@pytest.fixture
def page(tmp_path):
    tree = FakeTree(tmp_path / "root").nic("ens1", mtu=1500)
    tree.write("/etc/hostname", "node-<b>7</b>\n")  # markup in data must arrive as text
    tree.write("/proc/sys/net/core/rmem_max", "536870912\n").write("/proc/sys/vm/swappiness", "60\n")
    report = verify_node(desired_state(), tree.node(), bench=False)
    written, _ = write_reports(report, ["html"], str(tmp_path / "out"))
    return written[0], report


def test_chromium_shows_summary_and_failures_first(page):
    path, report = page
    dom = dump_dom(path)
    assert "<title>tunefleet: node-&lt;b&gt;7&lt;/b&gt;</title>" in dom  # escaped, not markup
    counts = report["summary"]["counts"]
    for status, count in counts.items():
        if status != "PASS":  # PASS is shown less the figures only recorded (RECORDED, counted apart)
            assert f'data-status="{status}">{status} {count}</div>' in dom
    # Each finding once: in the findings table, never again in "every other result"; a SKIP reason once.
    findings = re.findall(r'<tr class="finding" data-status="(\w+)">', dom)
    rows = re.findall(r'<tr data-status="(\w+)"(?: data-count="(\d+)")?>', dom)
    assert len(findings) + sum(int(n or 1) for _, n in rows) == len(report["results"])
    order = ["FAIL", "ERROR", "WARN", "SKIP", "PASS"]
    assert findings[0] == "FAIL" and [s for s, _ in rows] == sorted((s for s, _ in rows), key=order.index)
    skip_reasons = [r["reason"] for r in report["results"] if r["status"] == "SKIP"]
    assert sum(1 for s, _ in rows if s == "SKIP") == len(set(skip_reasons))
    assert "Fix: apply role network (playbooks/site.yml --tags network, or" in dom and "sets network_mtu: 9000" in dom
    assert not re.search(r'(src|href)="(https?:)?//', dom)  # self-contained


def test_chromium_draws_the_page(page, tmp_path):
    png = screenshot(page[0], tmp_path / "report.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
