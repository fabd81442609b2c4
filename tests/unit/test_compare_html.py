"""The comparison page (`tunefleet compare --out DIR`), opened in real headless Chromium: it loads, shows the
verdict, both health figures, one plot per figure with both distributions and the slow node with its driver."""
from __future__ import annotations

import re

import pytest

from tests.helpers.browser import dump_dom, find_chromium, screenshot
from tests.unit.test_compare import run_compare, synthetic_run

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed")]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    before = synthetic_run(tmp / "before", seed=1)
    after = synthetic_run(tmp / "after", seed=2, factor=0.97, slow={17: (0.85, "575.57.08", "212992")})
    code, document, out = run_compare(tmp, before, after)
    assert code == 1
    return out / "compare.html"


def test_chromium_shows_the_verdict_the_health_and_both_distributions(page):
    dom = dump_dom(page)
    assert "REGRESSION: 1 figure(s) got worse" in dom
    assert dom.count("fleet health before") == 1 and "change" in dom
    svg = re.search(r"<svg[^>]*aria-label=\"REGRESSION fleet.nccl_allreduce_multinode[^\"]*\".*?</svg>", dom, re.S)
    assert svg is not None
    bars = re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"', svg.group(0))
    assert {"#3b6fb6", "#e07b00"} <= set(bars)  # before and after both drawn
    assert len(re.findall(r"<line [^>]*stroke-width=\"2\"", svg.group(0))) == 2  # the two medians
    assert "below the axis: 0 before, 1 after" in svg.group(0)  # the slow node, counted apart from the bins
    host_row = re.search(r"<tr><td>gpu-00017</td>.*?</tr>", dom, re.S)
    assert host_row is not None and "575.57.08" in host_row.group(0) and "apart from the fleet" in host_row.group(0)


def test_chromium_draws_the_page_without_error(page, tmp_path):
    png = screenshot(page, tmp_path / "compare.png", size="1300,1400")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
