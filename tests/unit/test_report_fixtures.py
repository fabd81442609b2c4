"""Reports produced for real on other machines stay readable: schema-valid, parseable metrics."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from verify.report import results_of
from verify.result import Status, exit_code

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
SCHEMA = Path(__file__).resolve().parents[2] / "verify" / "schema" / "node_report.v1.json"


def test_bare_python_container_report_fits_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    report = json.loads((FIXTURES / "systemd_container_report.json").read_text())
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    results = {r.check_id: r for r in results_of(report)}
    # inside a container the host-wide sysctl keys are absent: ERROR (could not check), never FAIL
    assert results["sysctl.net.core.netdev_max_backlog"].status is Status.ERROR
    assert results["limits.systemd_nofile"].status is Status.PASS  # the drop-in + daemon-reexec
    assert all(r.status is Status.SKIP for r in results.values() if r.role == "gpu")
    assert exit_code(results.values()) == report["summary"]["exit_code"] == 1


def test_container_prom_file_parses():
    parser = pytest.importorskip("prometheus_client.parser")
    text = (FIXTURES / "systemd_container.prom").read_text()
    names = {f.name for f in parser.text_string_to_metric_families(text)}
    assert {"tunefleet_check_status", "tunefleet_check_ok", "tunefleet_verify_exit_code"} <= names
