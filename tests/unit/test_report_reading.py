"""What a newcomer reads (issue 41 item 7): a figure with no floor is RECORDED, never PASS, and a fallback
bound is not shown as the node's physical peak; the HTML lists each finding once and says a repeated SKIP
reason once; the terminal table fits 120 columns and never cuts a number. From the CI VM's real report and
the real storage judge."""
from __future__ import annotations

import json
import re
from pathlib import Path

from verify.bench.storage import judge_floor
from verify.judging import peaks
from verify.report import build_report, render, terminal
from verify.result import CheckResult

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "fleet" / "node_report_ci_vm.json"


def ci_vm() -> dict:
    return json.loads(FIXTURE.read_text())


def with_virtio_read() -> dict:
    """The CI VM's report plus the demo's O_DIRECT read of its virtio disk: no floor set, the link unreadable
    (virtio), so only the fallback bound (PCIe Gen6 x16, 121 GB/s) judged it."""
    captured = ci_vm()
    read = judge_floor("bench.storage.odirect", "O_DIRECT 1 MiB reads, QD1:", 0.262, None, {"file": "/var/tmp/x"},
                       peaks.unknown_storage_bound("vda: virtio, no link"))
    results = [CheckResult.from_dict(r) for r in captured["results"]] + [read]
    return build_report(captured["desired_state"], captured["facts"], results, captured["run"])


def test_a_figure_with_no_floor_is_recorded_not_pass_in_every_format_people_read():
    report = with_virtio_read()
    read = next(r for r in report["results"] if r["check_id"] == "bench.storage.odirect")
    assert read["status"] == "PASS" and read["details"]["recorded_only"] is True  # the data: nothing to act on
    assert report["summary"]["recorded"] == 1 and report["summary"]["exit_code"] == 1  # the config FAILs decide
    table = terminal.render(report, width=120)
    assert re.search(r"^RECORDED +bench\.storage\.odirect", table, re.M)
    assert "RECORDED 1" in table.splitlines()[-1]
    markdown = render(report, "md")
    assert "**RECORDED** 1" in markdown
    assert "| `bench.storage.odirect` | 0.262 | GB/s | — | — | — | RECORDED |" in markdown
    html = render(report, "html")
    row = re.search(r'<tr class="benchmark" data-status="RECORDED" data-figure="bench.storage.odirect">(.*?)</tr>',
                    html, re.S).group(1)
    assert '<span class="RECORDED">RECORDED</span>' in row


def test_a_fallback_bound_is_not_shown_as_the_node_s_physical_peak():
    report = with_virtio_read()
    read = next(r for r in report["results"] if r["check_id"] == "bench.storage.odirect")
    assert read["details"]["physical_peak"]["fallback"] is True  # it still bounds the figure (an ERROR above it)
    html = render(report, "html")
    row = re.search(r'data-figure="bench.storage.odirect">(.*?)</tr>', html, re.S).group(1)
    cells = dict(re.findall(r'<td class="num (peak|percent)"[^>]*>([^<]*)</td>', row))
    assert cells == {"peak": "—", "percent": "—"}  # not "121" and "0 %"
    assert "not this node&#39;s peak" in row or "not this node's peak" in row
    assert "tunefleet_storage_peak" not in render(report, "prom")
    assert "0 %" not in row


def test_the_html_lists_each_finding_once_and_a_repeated_skip_reason_once():
    report = ci_vm()
    html = render(report, "html")
    findings = [r for r in report["results"] if r["status"] in ("FAIL", "WARN", "ERROR")]
    assert findings
    for r in findings:
        assert html.count(f"<code>{r['check_id']}</code>") == 1, r["check_id"]
    reason = "no NVIDIA driver loaded (/proc/driver/nvidia/version absent)"  # three GPU checks skipped for it
    results_table = html[html.index('id="results"'):html.index('id="facts"')]  # the facts say it once more
    assert results_table.count(reason) == 1 and f"{reason} <span class=\"remedy\">(3 checks)</span>" in html


def test_the_terminal_table_fits_120_columns_and_never_cuts_a_number():
    report = ci_vm()
    long_reason = "needs 2 ranks, this node has 0 GPUs; " + "a long reason " * 9  # under fact_text's 200
    report["run"]["bench"] = {"selection": "quick", "ran": [], "wall_s": 0.1,
                              "skipped": [{"benchmark": "nccl", "reason": long_reason}]}
    for width in (0, 80, 120, 200):
        lines = terminal.render(report, width=width).splitlines()
        assert max(len(line) for line in lines) <= 120
    table = terminal.render(report, width=200)
    assert "…" not in table
    words = set(table.split())
    for r in report["results"]:
        for value in (r["expected"], r["observed"]):
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                assert set(str(value).split()) <= words, value  # 4096 87380 268435456: each number whole
