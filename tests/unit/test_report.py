"""Every report format from one node report: schema-valid JSON, JUnit that parses with the right
counts, Prometheus text that a real exposition parser accepts, Markdown and the terminal table
with failures first."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree, desired_state
from verify.local_run import verify_node
from verify.report import SCHEMA, render, write_reports
from verify.report import terminal as terminal_report
from verify.result import CheckResult, Status

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "verify" / "schema" / "node_report.v1.json"


@pytest.fixture
def report(tmp_path):
    """A node with one pass, failures, skips and an error (a sysctl key its kernel lacks)."""
    tree = FakeTree(tmp_path / "root").nic("ens1", mtu=1500, numa=0, local_cpus="0-3", irqs={90: "0-1"})
    tree.write("/proc/sys/net/core/rmem_max", "212992\n").write("/proc/sys/vm/swappiness", "0\n")
    tree.write("/etc/hostname", 'gpu-"07"\n')  # a quote in a label value must be escaped
    tree.write("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    return verify_node(desired_state(), tree.node(), bench=False)


def test_json_validates_against_the_published_schema(report):
    jsonschema = pytest.importorskip("jsonschema")
    document = json.loads(render(report, "json"))
    jsonschema.validate(document, json.loads(SCHEMA_FILE.read_text()))
    assert document["schema"] == SCHEMA
    assert document["summary"]["exit_code"] == 1


def test_schema_rejects_a_report_with_an_unknown_status(report):
    jsonschema = pytest.importorskip("jsonschema")
    broken = json.loads(render(report, "json"))
    broken["results"][0]["status"] = "MAYBE"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, json.loads(SCHEMA_FILE.read_text()))


def test_junit_counts_and_elements(report):
    root = ET.fromstring(render(report, "junit"))
    suite = root.find("testsuite")
    counts = report["summary"]["counts"]
    assert int(suite.get("failures")) == counts["FAIL"] == len(suite.findall("testcase/failure"))
    assert int(suite.get("errors")) == counts["ERROR"] == len(suite.findall("testcase/error"))
    assert int(suite.get("skipped")) == counts["SKIP"] == len(suite.findall("testcase/skipped"))
    assert int(suite.get("tests")) == len(report["results"])
    mtu = suite.find("testcase[@name='network.mtu.ens1']/failure")
    assert "ens1 has MTU 1500" in mtu.get("message") and "network_mtu" in mtu.text


_SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+]+$')


def test_prometheus_text_is_valid_exposition(report):
    text = render(report, "prom")
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or _SAMPLE.match(line), line
    parser = pytest.importorskip("prometheus_client.parser")
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    status = families["tunefleet_check_status"]
    current = {(s.labels["check"], s.labels["status"]) for s in status.samples if s.value == 1}
    assert ("network.mtu.ens1", "FAIL") in current and ("sysctl.vm.swappiness", "PASS") in current
    per_check = {}
    for sample in status.samples:
        per_check.setdefault(sample.labels["check"], []).append(sample.value)
    assert all(sorted(values) == [0, 0, 0, 0, 1] for values in per_check.values())
    ok = {s.labels["check"]: s.value for s in families["tunefleet_check_ok"].samples}
    assert ok["network.mtu.ens1"] == 0 and ok["sysctl.vm.swappiness"] == 1
    assert families["tunefleet_verify_exit_code"].samples[0].value == 1


def test_markdown_and_terminal_list_failures_first(report):
    rows = [line for line in render(report, "md").splitlines() if line.startswith("| ") and "`" in line]
    statuses = [row.split("|")[1].split()[0] for row in rows]  # "FAIL [fix-config]": the status, then its class
    assert statuses == sorted(statuses, key=["FAIL", "ERROR", "WARN", "SKIP", "PASS"].index)
    table = terminal_report.render(report, width=120).splitlines()
    assert table[2].startswith("FAIL") and table[-1].endswith("(exit code 1)")


def test_write_reports_writes_every_format_atomically(report, tmp_path):
    out = tmp_path / "out"
    written, skipped = write_reports(report, ["json", "md", "html", "junit", "prom"], str(out))
    assert sorted(Path(p).name for p in written) == sorted(
        ["report.json", "report.md", "report.html", "report.junit.xml", "tunefleet.prom"])
    assert skipped == [] and not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left
    with pytest.raises(ValueError, match="unknown report format"):
        write_reports(report, ["pdf"], str(out))


def test_html_without_jinja2_is_skipped_with_a_message(report, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "jinja2", None)
    written, skipped = write_reports(report, ["json", "html"], str(tmp_path / "bare"))
    assert [Path(p).name for p in written] == ["report.json"]
    assert skipped and "jinja2 is not installed" in skipped[0]


def _report_with(results) -> dict:
    from verify.report import build_report

    facts = {"host": "n1", "kernel": "6.8", "os": None, "cpu": None, "gpus": None, "nics": [],
             "block_devices": [], "tool_versions": {}}
    return build_report(desired_state(), facts, results, {"duration_s": 0.1, "config_checks_s": 0.01})


TEXT = st.text(max_size=60)
RESULTS = st.lists(st.builds(
    CheckResult, check_id=st.text(min_size=1, max_size=30), role=TEXT, status=st.sampled_from(list(Status)),
    expected=st.one_of(st.none(), TEXT, st.integers()), observed=st.one_of(st.none(), TEXT, st.integers()),
    reason=TEXT, remediation=TEXT), max_size=6)


@settings(max_examples=80, deadline=None)
@given(results=RESULTS)
def test_any_result_text_renders_to_valid_junit_and_prometheus(results):
    report = _report_with(results)
    suite = ET.fromstring(render(report, "junit")).find("testsuite")
    assert int(suite.get("tests")) == len(results)
    text = render(report, "prom")
    parser = pytest.importorskip("prometheus_client.parser")
    checks = {s.labels["check"] for f in parser.text_string_to_metric_families(text)
              if f.name == "tunefleet_check_ok" for s in f.samples}
    assert checks == {r.check_id for r in results}
    json.loads(render(report, "json"))
    render(report, "md")
