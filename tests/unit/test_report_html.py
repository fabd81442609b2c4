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
        assert f'data-status="{status}">{status} {count}</div>' in dom
    rows = re.findall(r'<tr data-status="(\w+)">', dom)
    assert len(rows) == len(report["results"])
    order = ["FAIL", "ERROR", "WARN", "SKIP", "PASS"]
    assert rows == sorted(rows, key=order.index) and rows[0] == "FAIL"
    assert "Fix: role network: set network_mtu" in dom
    assert not re.search(r'(src|href)="(https?:)?//', dom)  # self-contained


def test_chromium_draws_the_page(page, tmp_path):
    png = screenshot(page[0], tmp_path / "report.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
