"""Facts may be missing (issue 27, item 4): every node report format renders the real GPU machine's report
with each fact group removed in turn, set to None and set to a value of the wrong type, and with the run and
summary records damaged the same way. A renderer that indexes a fact it assumed ends the whole run."""
from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from verify.report import WRITERS, render
from verify.report import terminal as terminal_report
from verify.report.bench_phase import lines as bench_lines

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REPORT = json.loads((FIXTURES / "node" / "gpu_machine_report.json").read_text())
FORMATS = sorted(WRITERS)
FACT_GROUPS = sorted(REPORT["facts"])
# Each way a fact can arrive broken: absent, null, and a type other than the one the renderers expect.
DAMAGE = {"absent": ..., "none": None, "text": "not read: permission denied", "number": 10 ** 400,
          "list": [{"a": 1}], "object": {"name": ["x"], "pretty_name": {"x": 1}}}


def damaged(report: dict, path: tuple, how: str) -> dict:
    copied = copy.deepcopy(report)
    where = copied
    for key in path[:-1]:
        where = where[key]
    if DAMAGE[how] is ...:
        where.pop(path[-1], None)
    else:
        where[path[-1]] = DAMAGE[how]
    return copied


def render_everything(report: dict) -> dict:
    out = {fmt: render(report, fmt) for fmt in FORMATS}
    out["terminal"] = terminal_report.render(report, width=120)
    return out


def test_the_real_report_has_the_fact_groups_this_test_removes():
    assert {"os", "cpu", "gpus", "nics", "block_devices", "kernel", "memory_kib", "tool_versions"} <= set(FACT_GROUPS)


@pytest.mark.parametrize("how", sorted(DAMAGE))
@pytest.mark.parametrize("group", FACT_GROUPS)
def test_every_format_renders_with_a_fact_group_missing_or_of_the_wrong_type(group, how):
    rendered = render_everything(damaged(REPORT, ("facts", group), how))
    # Every result is still listed in every format: the damaged fact cost its own line only.
    failing = [r["check_id"] for r in REPORT["results"] if r["status"] == "FAIL"]
    for fmt in ("md", "html", "terminal", "junit"):
        assert all(check_id in rendered[fmt] for check_id in failing[:5]), fmt
    ET.fromstring(rendered["junit"].split("\n", 1)[1])  # still XML
    assert "tunefleet_check_status" in rendered["prom"]
    assert json.loads(rendered["json"])["host"] == REPORT["host"]


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_every_format_renders_with_all_facts_missing_or_of_the_wrong_type(how):
    rendered = render_everything(damaged(REPORT, ("facts",), how))
    assert "unknown OS" in rendered["md"] and "unknown OS" in rendered["html"]


@pytest.mark.parametrize("how", sorted(DAMAGE))
@pytest.mark.parametrize("path", [("run",), ("run", "bench"), ("run", "duration_s"), ("summary",),
                                  ("summary", "counts"), ("summary", "exit_code"), ("generated_at",), ("host",),
                                  ("profile",), ("history",)])
def test_every_format_renders_with_the_run_or_summary_record_damaged(path, how):
    rendered = render_everything(damaged(REPORT, path, how))
    if path[0] == "summary":  # recomputed from the results: the same tally as the real record
        assert f"**FAIL** {REPORT['summary']['counts']['FAIL']}" in rendered["md"]
        assert f"tunefleet_verify_exit_code {REPORT['summary']['exit_code']}" in rendered["prom"]


def test_the_html_page_shows_what_it_could_read_and_marks_the_rest():
    report = damaged(REPORT, ("facts", "cpu"), "text")
    report["facts"]["nics"] = [{"name": "eth0", "mtu": 9000, "speed_mbps": 10 ** 400, "numa_node": "x"}, "junk"]
    html = render(report, "html")
    assert "? (? CPUs, 0 NUMA nodes)" in html  # the unreadable CPU fact
    assert "eth0 (MTU 9000)" in html  # the readable NIC, without its damaged speed and NUMA node
    assert REPORT["facts"]["os"]["pretty_name"] in html  # an undamaged fact is still shown


def test_a_damaged_benchmark_record_is_read_field_by_field():
    report = copy.deepcopy(REPORT)
    report["run"]["bench"] = {"selection": "quick", "wall_s": 10 ** 400, "ran": "nccl",
                              "skipped": ["x", {"benchmark": "gds"}],
                              "profile_how": {"x": 1}, "hardware": "H200"}
    assert bench_lines(report) == ["benchmarks (quick): ran nothing; skipped 2", "skipped gds: ?"]
