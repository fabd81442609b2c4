"""DCGM diagnostics: one GPU failing one test FAILs naming that GPU and test, whatever the other GPUs or a
summary say, in the JSON document and in dcgmi's human-readable table (real fragments in
tests/fixtures/node/health/public/dcgmi-diag-table_*.txt, cited in that README), through the real Node."""
from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.bench import dcgm
from verify.bench.dcgm_parse import parse, parse_table
from verify.judging import verdicts
from verify.result import Status
from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PUBLIC = FIXTURES / "node" / "health" / "public"
GPU0_FAILS = (PUBLIC / "dcgmi-diag-table_faulty_go-dcgm52-gpu-memory-fail-gpu0-partial.txt").read_text()
PCIE_ALL = (PUBLIC / "dcgmi-diag-table_faulty_dcgm49-pcie-fail-all-partial-2.4.6.txt").read_text()
HEALTHY = (PUBLIC / "dcgmi-diag-table_healthy_go-dcgm52-gpu1-header-partial-3.3.1.txt").read_text()
V4_SHAPED = (FIXTURES / "bench" / "dcgmi_diag_j_dcgm4_schema_shaped.json").read_text()
# TCLAP's answer (dcgmi's argument parser) to a flag it does not know.
NO_J = "PARSE ERROR: Argument: -j\n             Couldn't find match for argument\n"


def run_dcgm(tmp_path, answers: dict):
    runner = ReplayRunner({tuple(argv): CommandOutput(list(argv), rc, out, "", 0.0) for argv, (rc, out) in
                           answers.items()})
    return dcgm.run(desired_state(), None, FakeTree(tmp_path).node(runner=runner, live=True), {"level": 1}), runner


def test_one_gpu_failing_gpu_memory_in_the_table_fails_naming_it_while_its_sibling_passes(tmp_path):
    rows, runner = run_dcgm(tmp_path, {tuple(dcgm.argv(1)): (255, NO_J),
                                       tuple(dcgm.argv(1, json_output=False)): (226, GPU0_FAILS)})
    assert runner.calls == [dcgm.argv(1), dcgm.argv(1, json_output=False)]  # -j refused: asked for the table
    by_id = {r.check_id: r for r in rows}
    assert by_id["bench.dcgm.gpu_memory.gpu1"].status is Status.PASS
    failed = by_id["bench.dcgm.gpu_memory.gpu0"]
    assert failed.status is Status.FAIL and "Hardware / GPU Memory on GPU 0: Fail" in failed.reason
    # the warning's cell wraps mid-word ("R" / "estart"): joined as dcgmi printed it
    assert "Reset GPU. Restart DCGM. Rerun diagnostics. Unable to create CUDA context" in failed.reason
    # DCGM's own cause: a CUDA context it could not create ("busy or unavailable") with its system-triage
    # suggestion, not a memory fault: reset the GPU and rerun, no RMA (issue 36 item 8)
    assert failed.details[verdicts.ACTION_KEY] == verdicts.RESET_GPU
    assert failed.details["cause"].startswith("DCGM: system triage") and "reset the GPU" in failed.remediation
    assert verdicts.ACTION_KEY not in by_id["bench.dcgm.gpu_memory.gpu1"].details


def test_a_targeted_power_miss_on_one_gpu_fails_though_the_tests_summary_says_pass(tmp_path):
    # The DCGM 4 document with its memory test turned into Targeted Power: GPU 1 reached 0.1 W under the
    # target (DCGM_FR_TARGET_POWER_MSG of dcgmlib/dcgm_errors.h) and the test's summary reads Pass.
    document = json.loads(V4_SHAPED)
    test = document["DCGM Diagnostic"]["test_categories"][1]["tests"][0]
    test["name"], test["test_summary"]["status"] = "targeted_power", "Pass"
    test["results"][1]["warnings"][0]["warning"] = (
        "Max power of 299.9 did not reach desired power minimum target_power_min_ratio of 300.0 for GPU 1")
    rows, _ = run_dcgm(tmp_path, {tuple(dcgm.argv(1)): (0, json.dumps(document))})
    by_id = {r.check_id: r for r in rows}
    failed = by_id["bench.dcgm.targeted_power.gpu1"]
    assert failed.status is Status.FAIL and "targeted_power on GPU 1" in failed.reason
    assert "Max power of 299.9 did not reach desired power minimum" in failed.reason
    assert by_id["bench.dcgm.targeted_power.gpu0"].status is Status.PASS


def test_a_test_failing_on_all_gpus_and_a_healthy_table(tmp_path):
    # DCGM#49: PCIe "Fail - All" on PCIe A100s (a DCGM bug per the thread): reported as DCGM says it.
    (row,) = parse_table(PCIE_ALL).rows
    assert (row.category, row.test, row.status, row.gpus) == ("Integration", "PCIe", "FAIL", [])
    assert "GPU 0's NvLink link 4 is currently down Run a field diagnostic on the GPU." in row.warnings[0]
    rows, _ = run_dcgm(tmp_path, {tuple(dcgm.argv(1)): (0, HEALTHY)})  # a table even from `-j`: read as one
    assert [r.status for r in rows] == [Status.PASS] * 6
    assert rows[0].details["dcgm_version"] == "3.3.1" and rows[0].details["driver"] == "535.129.03"
    assert "all GPUs" in rows[0].reason


def test_a_deployment_failure_is_not_a_hardware_class():
    failed = parse(HEALTHY.replace("| Persistence Mode          | Pass", "| Persistence Mode          | Fail"))
    row = dcgm._row(next(r for r in failed.rows if r.test == "Persistence Mode"), 1, {})
    assert row.status is Status.FAIL and verdicts.ACTION_KEY not in row.details


# ---- classed by the cause DCGM gives (issue 36 item 8) ------------------------------------------------------

def test_a_failure_dcgm_sends_to_field_diagnostics_is_hardware():
    (row,) = parse_table(PCIE_ALL).rows  # DCGM#49: every warning ends "Run a field diagnostic on the GPU."
    result = dcgm._row(row, 1, {})
    assert result.details[verdicts.ACTION_KEY] == verdicts.DRAIN_RMA
    assert result.details["cause"] == "DCGM: run a field diagnostic (hardware)"


def test_every_gpu_failing_cuda_initialisation_is_the_nodes_setup_not_hardware():
    # The real go-dcgm#52 table with its CUDA error replaced by CUDA 802's text (cudaErrorSystemNotReady, as
    # NVIDIA/nccl-tests#264 shows it on an 8x H200 node whose fabric manager was not up): composed, not captured
    setup = GPU0_FAILS.replace("'CUDA-capable device(s) is/", "'system not yet initialized'   ").replace(
        "are busy or unavailable'.", "                         ")
    failed = next(r for r in parse_table(setup).rows if r.status == "FAIL")
    result = dcgm._row(failed, 1, {})
    assert result.status is Status.FAIL and result.details[verdicts.ACTION_KEY] == verdicts.REBOOT
    assert "fabric manager" in result.details["cause"] and "nvidia-fabricmanager" in result.remediation


def test_dcgm4s_own_error_category_decides():
    document = json.loads(V4_SHAPED)
    rows = parse(json.dumps(document)).rows
    failing = [r for r in rows if r.status == "FAIL"]
    assert failing and all(r.error_categories for r in failing)
    for row in failing:
        row.error_categories = [6]  # DCGM_FR_EC_SOFTWARE_CUDA
        assert dcgm.cause(row)[0] == verdicts.REBOOT
        row.error_categories = [10]  # DCGM_FR_EC_HARDWARE_MEMORY
        assert dcgm.cause(row)[0] == verdicts.DRAIN_RMA


def test_the_healthy_twin_carries_no_class(tmp_path):
    rows, _ = run_dcgm(tmp_path, {tuple(dcgm.argv(1)): (0, HEALTHY)})
    assert all(verdicts.ACTION_KEY not in r.details for r in rows)
