"""The self-contained fleet page, opened in real headless Chromium."""
from __future__ import annotations

import argparse
import re

import pytest

from tests.helpers.browser import dump_dom, find_chromium, screenshot
from tests.unit.test_fleet_report import fleet
from verify.fleet.report import main as report_main

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed")]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    directory = fleet(tmp_path_factory.mktemp("fleet"), count=12, slow=1, odd_driver=1)
    report_main(argparse.Namespace(directory=str(directory), format="html", out=None))
    return directory / "fleet_report.html"


def test_the_page_is_self_contained(page):
    html = page.read_text()
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<script" not in html


def test_chromium_shows_the_bad_host_first_with_its_reason_and_draws_the_plots(page):
    dom = dump_dom(page)
    problems = re.findall(r'<tr class="problem" data-host="([^"]+)">', dom)
    assert problems[0] == "gpu-00000"
    assert "of the fleet median" in dom
    assert "575.57.08" in dom  # the driver off the majority
    matrix_hosts = re.findall(r'<tr data-host="([^"]+)" data-worst="([A-Z]+)">', dom)
    assert matrix_hosts[0] == ("gpu-00000", "FAIL") and len(matrix_hosts) == 12
    assert dom.count('<svg class="plot"') == 2  # busbw curves and the distribution (bars are their own svg)
    assert 'class="curve" data-host="gpu-00000" fill="none" stroke="#c0392b"' in dom  # the outlier in red


def test_chromium_draws_the_page_without_error(page, tmp_path):
    png = screenshot(page, tmp_path / "fleet.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
