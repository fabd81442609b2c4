"""DCGM diagnostics as an optional benchmark, on the real Node with a replaying runner: the DCGM 3.1.0
output of NVIDIA's own "real output" test, a DCGM 4.x document in the shape of DCGM's JSON schema, and
the ways dcgmi fails (absent, no host engine, hung, garbage)."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.bench import check_options, dcgm, plan, run_benchmarks
from verify.bench.dcgm_parse import DcgmParseError, parse
from verify.result import Status
from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bench"
V3_REAL = (FIXTURES / "dcgmi_diag_j_8gpu_dcgm3.1.0_nvidia_test.txt").read_text()
V4_SHAPED = (FIXTURES / "dcgmi_diag_j_dcgm4_schema_shaped.json").read_text()


def node_answering(tmp_path, stdout="", returncode=0, stderr="", level=1, **flags):
    command = dcgm.argv(level)
    runner = ReplayRunner({tuple(command): CommandOutput(command, returncode, stdout, stderr, 0.0, **flags)})
    return FakeTree(tmp_path).node(runner=runner, live=True), runner


def test_real_dcgm3_output_gives_one_pass_row_per_test_and_gpu(tmp_path):
    node, runner = node_answering(tmp_path, V3_REAL)
    rows = dcgm.run(desired_state(), None, node, {"level": 1})
    assert runner.calls == [["dcgmi", "diag", "-r", "1", "-j"]]
    assert len(rows) == 9 + 8 and {r.status for r in rows} == {Status.PASS}
    assert rows[0].check_id == "bench.dcgm.denylist" and rows[0].details["gpus"] == list(range(8))
    assert [r.check_id for r in rows[-2:]] == ["bench.dcgm.software.gpu6", "bench.dcgm.software.gpu7"]
    assert rows[0].details["dcgm_version"] == "3.1.0" and rows[0].remediation == ""


def test_dcgm4_document_judges_each_gpu_and_names_the_warning_and_error_id(tmp_path):
    node, _ = node_answering(tmp_path, V4_SHAPED, returncode=226)  # dcgmi exits non-zero when a test fails
    rows = {r.check_id: r for r in dcgm.run(desired_state(), None, node, {"level": 1})}
    assert rows["bench.dcgm.memory.gpu0"].status is Status.PASS
    failed = rows["bench.dcgm.memory.gpu1"]
    assert failed.status is Status.FAIL and "Found 3 faulty memory elements on GPU 1" in failed.reason
    assert "Hardware / memory on GPU 1" in failed.reason and "error id 52" in failed.remediation
    assert rows["bench.dcgm.memory.gpu2"].status is Status.SKIP
    assert "ECC Memory is not turned on" in rows["bench.dcgm.memory.gpu2"].reason
    assert rows["bench.dcgm.memory.gpu3"].status is Status.WARN
    assert failed.details["driver"] == "570.148.08" and failed.details["returncode"] == 226


def test_named_only_the_level_reaches_dcgmi_and_the_quick_set_never_runs_it(tmp_path):
    node, runner = node_answering(tmp_path, V3_REAL, level=2)
    rows = run_benchmarks(desired_state(), None, node, names=["dcgm"], overrides={"dcgm": {"level": 2}})
    assert ["dcgmi", "diag", "-r", "2", "-j"] in runner.calls and rows and rows[0].check_id.startswith("bench.dcgm")
    assert "dcgm" not in plan(["quick"], node).families
    assert "dcgm" not in plan(["full"], node).families
    assert "dcgm" in plan(["quick", "dcgm"], node).families


def test_not_installed_is_a_skip_with_the_reason(tmp_path):
    node = FakeTree(tmp_path).node(runner=ReplayRunner(), live=True)
    rows = dcgm.run(desired_state(), None, node, {})
    assert [r.status for r in rows] == [Status.SKIP] and "dcgmi is not installed" in rows[0].reason


def test_no_host_engine_is_an_error_saying_what_to_start(tmp_path):
    said = ("Error: unable to establish a connection to the specified host: localhost\n"
            "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
    node, _ = node_answering(tmp_path, said, returncode=255)
    rows = dcgm.run(desired_state(), None, node, {})
    assert [r.status for r in rows] == [Status.ERROR] and "nv-hostengine" in rows[0].remediation


@pytest.mark.parametrize("stdout", ["", "{", V3_REAL[: len(V3_REAL) // 2], '{"other": 1}',
                                    V3_REAL.replace('"PASS"', '"MAYBE"', 1)])
def test_broken_output_is_one_error_row_naming_the_problem(tmp_path, stdout):
    node, _ = node_answering(tmp_path, stdout, returncode=1)
    rows = dcgm.run(desired_state(), None, node, {})
    assert [r.status for r in rows] == [Status.ERROR] and "dcgmi diag -j output" in rows[0].reason


def test_hung_run_and_bad_level_are_errors_and_a_bad_level_runs_nothing(tmp_path):
    node, _ = node_answering(tmp_path, "", returncode=None, timed_out=True)
    assert "hung" in dcgm.run(desired_state(), None, node, {"timeout_s": 5})[0].reason
    node, runner = node_answering(tmp_path, V3_REAL)
    rows = dcgm.run(desired_state(), None, node, {"level": 4})
    assert rows[0].status is Status.ERROR and "1, 2 or 3" in rows[0].reason and runner.calls == []
    with pytest.raises(ValueError, match="verify_bench_options.dcgm.level"):
        check_options({"dcgm": {"level": "2"}})


def test_runtime_error_in_the_document_is_an_error_row(tmp_path):
    node, _ = node_answering(tmp_path, '{"DCGM Diagnostic": {"runtime_error": "Unable to run diagnostic on '
                                       'unsupported GPU 0."}}', returncode=1)
    rows = dcgm.run(desired_state(), None, node, {})
    assert [r.status for r in rows] == [Status.ERROR] and "unsupported GPU 0" in rows[0].reason


def test_parser_is_total_on_every_prefix_of_the_real_output():
    for end in range(0, len(V3_REAL), 37):
        with contextlib.suppress(DcgmParseError):  # anything else fails the test
            parse(V3_REAL[:end])
