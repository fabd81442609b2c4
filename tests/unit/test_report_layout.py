"""What a person reads first (issue 32): the node and fleet HTML reports open with the benchmark table (figure,
unit, floor, physical peak, % of peak, verdict, an SVG bar), then the health and config findings; trend plots
only for figures with at least 3 recorded runs, with SI-prefixed ticks whose text never overlaps, as drawn
by headless Chromium at 1400 px. The benchmark figures are the real 1x H100 engine capture and the real 2x
H200 host-copy capture through the real benchmark modules (tests/fixtures/bench/README.md)."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from bench_helpers import fixture, output, scripted_node

from tests.helpers.browser import dump_dom, find_chromium, overlapping, text_boxes
from tests.unit.test_bench_gpu import ENGINE_H100X1, engine_node, payload
from tests.unit.test_fleet_report import fleet
from tests.unit.test_verdicts_xid import XID79, judge
from verify.bench import gpu, gpu_burn, hostcopy
from verify.cli import build_parser
from verify.fleet.report import main as report_main
from verify.history.cli import finish_local, prepare
from verify.history.store import Measurement, RunRecord, open_store
from verify.node import Node
from verify.report import build_report, render, terminal, write_reports
from verify.report.plots import nice_ticks, si
from verify.result import CheckResult

GPU_REPORT = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "gpu_machine_report.json"
needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed")


@pytest.fixture
def measured_report(tmp_path, monkeypatch) -> dict:
    """The 1x H100's GPU engine figures and the 2x H200's host copies, judged by the real modules, on the
    GPU machine's captured facts; the history holds 3 earlier runs of the HBM figure only."""
    for module in (gpu, gpu_burn, hostcopy):
        monkeypatch.setattr(module, "module_available", lambda name: True)
    results = gpu.run(None, None, engine_node(payload(ENGINE_H100X1), gpus=1), {})
    copies = scripted_node(lambda argv: output(argv, stdout=fixture("h200x2_hostcopy.stdout")))
    results += hostcopy.run(None, None, copies, {"tries": 1})
    captured = json.loads(GPU_REPORT.read_text())
    captured_results = [r for r in captured["results"] if r["status"] != "PASS"][:6]
    results += [CheckResult.from_dict(r) for r in captured_results]
    report = build_report(captured["desired_state"], dict(captured["facts"], host="h100-node"), results,
                          dict(captured["run"], started_at="2026-11-25T10:00:00+00:00"))
    hbm = next(r for r in report["results"] if r["check_id"] == "bench.gpu_hbm.gpu0")
    path = str(tmp_path / "history.sqlite")
    with open_store(path) as store:
        for day, value in enumerate((2500.0, 1660.0, 2480.0)):  # the figures whose ticks overlapped
            store.record(RunRecord("h100-node", f"2026-11-2{day}T00:00:00+00:00", "local", f"old{day}", "PASS", 0,
                                   [Measurement("bench.gpu_hbm.gpu0", "PASS", value, "GB/s")], {}))
    finish_local(prepare(build_parser().parse_args(["verify", "--local", "--history", path])), report, Node())
    assert hbm["status"] == "PASS"
    return report


def test_si_ticks_are_round_and_short():
    assert [si(v) for v in (0, 999, 2500, 1660, 55.4, 3.352e12, 0.0042)] == \
        ["0", "999", "2.5k", "1.66k", "55.4", "3.35T", "4.2m"]
    assert nice_ticks(2750) == [0, 1000, 2000, 3000]
    assert nice_ticks(55.44) == [0, 20, 40, 60] and nice_ticks(0) == [0.0, 1.0]


def test_the_node_page_opens_with_the_benchmark_table_then_findings_then_trends(measured_report):
    page = render(measured_report, "html")
    order = [page.index(marker) for marker in ('id="benchmark-table"', 'id="findings"', 'id="history"',
                                               'id="results"')]
    assert order == sorted(order)
    table = page[page.index('id="benchmark-table"'):page.index("</table>", page.index('id="benchmark-table"'))]
    row = re.search(r'data-figure="bench.gpu_hbm.gpu0">(.*?)</tr>', table, re.S).group(1)
    cells = dict(re.findall(r'<td class="num (value|floor|peak|percent)"[^>]*>([^<]*)</td>', row))
    hbm = next(r for r in measured_report["results"] if r["check_id"] == "bench.gpu_hbm.gpu0")
    peak = hbm["details"]["physical_peak"]["gbps"]
    assert cells["peak"] == si(peak) and cells["percent"] == f"{hbm['observed'] / peak * 100:.0f} %"
    assert cells["floor"] != "—" and "<svg class=\"bar\"" in row and "GB/s" in row
    assert 'data-figure="bench.h2d.gpu0"' in table  # the host copies too
    # The HBM figure has 4 recorded runs and is drawn; the host copies have one each and are not.
    history = page[page.index('id="history"'):page.index('id="results"')]
    assert history.count('<svg class="plot"') == 1 and "bench.gpu_hbm.gpu0 over the last 4 runs" in history
    assert "e+" not in history and ">2k<" in history


def test_every_format_shows_the_action_class_and_the_summary_the_worst(tmp_path):
    results = list(judge(tmp_path / "root", XID79 + "\n").values())
    fallen = next(r for r in results if r.status.value == "FAIL")
    assert fallen.details["action"] == "reboot"
    captured = json.loads(GPU_REPORT.read_text())
    report = build_report(captured["desired_state"], captured["facts"], results, captured["run"])
    assert report["summary"]["action"] == "reboot"
    label = "FAIL [reboot]"
    assert label in render(report, "md") and label in render(report, "html")
    assert f'type="{label}"' in render(report, "junit")
    table = terminal.render(report, width=160)
    assert f"{label} {fallen.check_id}" in table and "action: reboot  (exit code 1)" in table


def test_a_run_whose_results_carry_no_class_has_summary_action_ok():
    captured = json.loads(GPU_REPORT.read_text())
    results = [CheckResult.from_dict(r) for r in captured["results"]]
    report = build_report(captured["desired_state"], captured["facts"], results, captured["run"])
    assert report["summary"]["action"] == "ok"
    assert "action:" not in render(report, "md")  # "ok" beside 25 config FAILs would read as "nothing to do"


@pytest.mark.slow
@needs_chromium
def test_chromium_draws_the_node_page_table_first_and_no_axis_text_overlaps(measured_report, tmp_path):
    written, _ = write_reports(measured_report, ["html"], str(tmp_path / "out"))
    dom = dump_dom(Path(written[0]))
    assert dom.index('id="benchmark-table"') < dom.index('id="findings"') < dom.index('id="history"')
    assert len(re.findall(r'<tr class="benchmark"', dom)) == \
        sum(r["role"] == "bench" for r in measured_report["results"])
    boxes = text_boxes(Path(written[0]), tmp_path)
    assert {b["text"] for b in boxes} >= {"2k", "3k"}
    assert overlapping(boxes) == []


@pytest.mark.slow
@needs_chromium
def test_chromium_draws_the_fleet_page_with_a_benchmark_table_per_host_and_no_overlap(tmp_path):
    directory = fleet(tmp_path / "fleet", count=12, slow=1, odd_driver=1)
    assert report_main(argparse.Namespace(directory=str(directory), format="html", out=None)) == 1
    page = directory / "fleet_report.html"
    dom = dump_dom(page)
    hosts = re.findall(r'<table class="benchmark-table" data-host="([^"]+)">', dom)
    assert hosts[0] == "gpu-00000" and len(hosts) == 12  # the slow host first
    assert dom.index('class="benchmark-table"') < dom.index('id="problems"')
    assert 'data-figure="fleet.nccl_allreduce_multinode"' in dom
    boxes = text_boxes(page, tmp_path)
    assert len({b["plot"] for b in boxes}) == 2 and overlapping(boxes) == []
