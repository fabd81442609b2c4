"""`nvidia-smi -q` text read for every section the health checks judge (issue 36 item 6): a pasted report and
`--inject` meet the same judges as the live node's CSV. Real captures only: the 2x H200 machine's own -q and
CSV, gpud's A10 with a pending remap and its healthy 8x H100 twin (tests/fixtures/node/health/public/README.md)."""
from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree
from tests.helpers.replay import ReplayRunner
from verify.checks import health_gpu
from verify.facts import health_smi
from verify.judging.thresholds import Threshold
from verify.result import Status
from verify.runner import CommandOutput

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
PUBLIC = HEALTH / "public"
H200_Q = (HEALTH / "h200x2" / "cmd" / "nvidia-smi-q.stdout").read_text()
H200_CSV = (HEALTH / "h200x2" / "cmd" / "query-gpu.stdout").read_text()
IDLE_CSV = (HEALTH / "h200_query-gpu_idle_590.48.01.csv").read_text()
A10_Q = (PUBLIC / "nvidia-smi-q_faulty_gpud-a10-remap-pending-535.129.03.txt").read_text()
H100X8_Q = (PUBLIC / "nvidia-smi-q_healthy_gpud-h100x8-535.161.08.txt").read_text()
MARGIN = Threshold(limit=5, warn=10, kind="min")


def test_every_judged_section_of_a_real_report_is_read():
    gpu = health_smi.from_smi_q(H200_Q)[0]
    assert (gpu.index, gpu.bus_id, gpu.name) == (0, health_smi.parse(H200_CSV)[0].bus_id, "NVIDIA H200")
    assert gpu.text("ecc.mode.current") == "Enabled" and gpu.number("ecc.errors.uncorrected.volatile.sram") == 0
    assert gpu.text("ecc.sram_threshold_exceeded") == "No"
    assert gpu.active("clocks_throttle_reasons.hw_thermal_slowdown") is False  # nested under "HW Slowdown"
    assert (gpu.number("temperature.gpu"), gpu.number("temperature.gpu.tlimit")) == (37, 50)
    assert (gpu.number("power.draw"), gpu.number("enforced.power.limit")) == (79.65, 700.0)
    assert (gpu.text("pcie.link.gen.current"), gpu.text("pcie.link.width.current")) == ("5", "16x")
    assert gpu.text("fabric.state") == "Completed" and gpu.text("fabric.health.summary") is None  # "N/A"


def test_the_report_and_the_csv_of_one_machine_get_the_same_verdicts():
    by_q = {g.bus_id.lower(): g for g in health_smi.from_smi_q(H200_Q)}
    for csv_gpu in health_smi.parse(H200_CSV):
        q_gpu = by_q[csv_gpu.bus_id.lower()]
        for judge in (health_gpu.judge_memory, lambda g: health_gpu.judge_clocks(g, MARGIN)):
            from_csv, from_q = judge(csv_gpu), judge(q_gpu)
            assert (from_q.check_id, from_q.status, from_q.details.get("action")) == \
                (from_csv.check_id, from_csv.status, from_csv.details.get("action"))


def test_a_pasted_report_with_a_pending_remap_gets_the_vendors_action():
    (gpu,) = health_smi.from_smi_q(A10_Q)
    result = health_gpu.judge_memory(gpu)
    assert result.status is Status.WARN and result.details["action"] == "reset-gpu"
    assert "row remapping pending (4 row(s) remapped for uncorrectable errors)" in result.reason
    assert gpu.text("ecc.errors.uncorrected.aggregate.sram") == "0"  # the R535 A10 prints one "SRAM Uncorrectable"


def test_the_healthy_twin_passes_on_every_gpu():
    gpus = health_smi.from_smi_q(H100X8_Q)
    assert len(gpus) == 8 and [g.index for g in gpus] == list(range(8))
    assert {health_gpu.judge_memory(g).status for g in gpus} == {Status.PASS}


def test_the_sram_threshold_flag_is_the_rma_criterion():
    # the H200's real report with its "SRAM Threshold Exceeded" flag set (no public capture with it set was found)
    flagged = re.sub(r"(SRAM Threshold Exceeded\s+: )No", r"\1Yes", H200_Q, count=1)
    result = health_gpu.judge_memory(health_smi.from_smi_q(flagged)[0])
    assert result.status is Status.FAIL and result.details["action"] == "drain-rma"
    assert "SRAM Threshold Exceeded" in result.reason


def test_inject_a_report_alone_and_the_health_query_reads_it(tmp_path):
    # --inject with `nvidia-smi -q` only: the CSV query is answered as a missing tool, as over a tree
    runner = ReplayRunner({tuple(health_smi.Q_ARGV): CommandOutput(health_smi.Q_ARGV, 0, A10_Q, "", 0.1)})
    node = FakeTree(tmp_path).node(runner=runner, live=True)
    gpus, reason = health_smi.query(node)
    assert reason == "" and [g.bus_id for g in gpus] == ["00000000:07:00.0"]


def test_the_live_query_asks_for_the_sram_flag_only_when_sram_errors_are_counted(tmp_path):
    asked = []

    def answer(argv, **_):
        asked.append(tuple(argv))
        if tuple(argv) == tuple(health_smi.Q_ECC_ARGV):
            # the other H200's real report, flag set, its first GPU put at this CSV's bus id
            report = re.sub(r"(SRAM Threshold Exceeded\s+: )No", r"\1Yes", H200_Q)
            return CommandOutput(argv, 0, report.replace("GPU 00000000:00:06.0", "GPU 00000000:83:00.0"), "", 0.1)
        return CommandOutput(argv, 0, csv, "", 0.1)

    csv = IDLE_CSV  # the H200's real CSV with the SRAM/DRAM columns, every count 0
    health_smi.query(FakeTree(tmp_path / "a").node(runner=answer, live=True))
    assert tuple(health_smi.Q_ECC_ARGV) not in asked
    header, *rows = IDLE_CSV.splitlines()
    names = [health_smi._header_name(c) for c in header.split(", ")]
    cells = rows[0].split(", ")
    cells[names.index("ecc.errors.uncorrected.aggregate.sram")] = "3"
    csv = "\n".join([header, ", ".join(cells)] + rows[1:]) + "\n"
    gpus, _ = health_smi.query(FakeTree(tmp_path / "b").node(runner=answer, live=True))
    assert tuple(health_smi.Q_ECC_ARGV) in asked and gpus[0].text("ecc.sram_threshold_exceeded") == "Yes"


PARTS = st.sampled_from(["GPU 00000000:83:00.0\n", "    ", "        ", "ECC Errors", "Volatile", "SRAM Uncorrectable",
                         " : ", "9" * 5000, "N/A", "\n", ":", "Remapped Rows", "Pending", "Yes", "\t", "\x00"])


@given(st.one_of(st.text(max_size=400), st.lists(PARTS, max_size=60).map("".join)))
def test_smi_q_is_total(text):
    for gpu in health_smi.from_smi_q(text):
        for name in ("ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.sram"):
            value = gpu.fields.get(name)
            assert value is None or value == "[N/A]" or len(value) <= 22
