"""The report says where the node stands (issue 48 item 4): on a node tunefleet's roles never changed, one
line says the FAILs the roles fix are what applying site.yml would change; a RECORDED figure with neither a
floor nor a peak gets no bar; the profile line and the hardware line say each reason once, unnested; the
run's time line is the whole, not a part smaller than its parts."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from verify.desired import render_spec
from verify.judging import remedies
from verify.local_run import LEDGER_PATH, choose_profile, time_line
from verify.node import Node
from verify.report import bench_table, build_report, render, standing
from verify.report.bench_phase import lines as bench_lines
from verify.result import CheckResult, Status

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))


def untuned_report(applied) -> dict:
    """A config FAIL a role fixes (the remedy table attached it), a WARN nobody fixes, a RECORDED figure."""
    spec = render_spec()
    results = [
        CheckResult("sysctl.net.core.rmem_max", "sysctl", Status.FAIL, expected="536870912", observed="212992",
                    reason="below the desired value"),
        CheckResult("limits.login.memlock", "limits", Status.FAIL, expected="unlimited", observed="8192",
                    reason="a new login session: no limits.conf(.d) entry sets memlock"),
        CheckResult("bench.storage.odirect_read", "bench", Status.PASS, observed=1790.0,
                    reason="recorded only: no floor for this device", details={"recorded_only": True,
                                                                                 "unit": "MB/s"}),
    ]
    remedies.attach(results, spec)
    run = {"started_at": "2026-12-07T03:00:00+00:00", "duration_s": 1.0, "config_checks_s": 0.5,
           "check_timings_s": {}, "root": "/", "benchmarks": True}
    if applied is not None:
        run["tunefleet_applied"] = applied
    return build_report(spec, {"host": "demo-node"}, results, run)


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_an_untuned_node_says_its_fails_are_what_site_yml_would_change(fmt):
    text = render(untuned_report(applied=False), fmt)
    line = standing(untuned_report(applied=False))
    assert line.startswith("tunefleet's roles were never applied to this node (no ledger): the 2 FAIL(s)")
    assert "playbooks/site.yml" in line and line in text.replace("&#39;", "'")
    if fmt == "html":
        assert '<p id="standing" class="standing">' in text


def test_the_terminal_says_it_before_the_tally():
    from verify.report import terminal

    closing = terminal.render(untuned_report(applied=False), width=120).splitlines()[-3:]
    assert any("were never applied to this node" in line for line in closing)


@pytest.mark.parametrize("applied", [True, None])
def test_a_tuned_node_or_an_older_report_says_nothing_of_it(applied):
    """A FAIL on a node tunefleet did change is drift: no excuse line; an older report recorded nothing."""
    report = untuned_report(applied)
    assert standing(report) == ""
    assert "never applied" not in render(report, "md") and 'id="standing"' not in render(report, "html")


def test_verify_records_whether_the_ledger_exists(tmp_path):
    """run.tunefleet_applied is read from the node (under --root too): the roles' own ledger path."""
    from ansible_collections.tunefleet.gpu_node.plugins.module_utils.ledger_core import DEFAULT_LEDGER_PATH

    assert LEDGER_PATH == DEFAULT_LEDGER_PATH
    node = Node(root=str(tmp_path))
    assert node.exists(LEDGER_PATH) is False
    ledger = tmp_path / LEDGER_PATH.lstrip("/")
    ledger.parent.mkdir(parents=True)
    ledger.write_text("{}")
    assert node.exists(LEDGER_PATH) is True


def test_a_recorded_figure_without_floor_or_peak_gets_no_bar():
    report = untuned_report(applied=False)
    (row,) = bench_table.rows(report)
    assert row.status == "RECORDED" and row.floor is None and row.peak is None
    assert bench_table.bar_svg(row) == ""
    html = render(report, "html")
    assert 'class="bar"' not in html
    md_row = next(line for line in render(report, "md").splitlines() if "bench.storage.odirect_read" in line)
    assert "| — | — | — |" in md_row  # floor, physical peak, % of peak: nothing to draw against
    # A figure with a floor still gets its bar.
    row.floor = 1000.0
    assert 'class="bar"' in bench_table.bar_svg(row)


def test_the_profile_and_hardware_lines_say_each_reason_once_unnested(tmp_path):
    """A node without a GPU (no driver, no tool answers): the reason is said once, no parenthesis inside another."""
    from bench_helpers import output, scripted_node

    from verify.facts.hardware import detect

    node = scripted_node(lambda argv: output(argv, missing=True), root=str(tmp_path))
    node.live = True
    from verify.bench import hardware_set

    _, how = choose_profile({"verify": {"profile": "auto"}}, {}, node)
    _, skipped = hardware_set(node, {})
    report = {"run": {"bench": {"selection": "quick", "ran": ["storage"], "profile_how": how,
                                "hardware": detect(node).to_dict(),
                                "skipped": [{"benchmark": b, "reason": why} for b, why in skipped]}}}
    said = "\n".join(bench_lines(report))
    assert "no shipped profile matches; node: no GPU" in said and "matches no GPU" not in said
    reason = detect(node).gpu_reason
    # Once for what the node is (the profile line), once for what did not run (gpu and hostcopy in one line).
    assert reason and said.count(reason) == 2 and "skipped gpu, hostcopy: no GPU on this node: " in said
    for line in said.splitlines():
        depth = 0
        for char in line:
            depth += {"(": 1, ")": -1}.get(char, 0)
            assert depth <= 1, f"nested parentheses: {line}"


def test_the_time_line_is_the_whole_run_and_its_largest_parts():
    line = time_line({"process_start_s": 0.4, "facts_s": 0.2, "config_checks_s": 0.1}, 2.35)
    assert line == "time: 2.4 s in all (since the process started); largest: process_start 0.4 s, facts 0.2 s, " \
                   "config_checks 0.1 s"
    assert time_line({}, None).startswith("time: total unknown")
