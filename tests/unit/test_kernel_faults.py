"""Driver failures that are not Xids, by class (issue 46 item 2), and incidents and repeats (item 5), on real
published kernel logs (tests/fixtures/node/health/public/README.md, "Round 5") with their healthy twins, through
the real Node with a replayed runner; the scheduler hook keeps what the checks judge."""
from __future__ import annotations

from pathlib import Path

from tests.helpers.drills import rebuild_sysfs
from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_xid
from verify.facts import kernel_log
from verify.judging import kernel_faults, verdicts
from verify.result import Status
from verify.runner import CommandOutput

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
PUBLIC = HEALTH / "public"
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build\n"
H200 = HEALTH / "h200x2"
H200_DMESG = (H200 / "cmd" / "dmesg-kernel.stdout").read_text()  # the machine's real log: the healthy twin


def read(name: str) -> str:
    return (PUBLIC / name).read_text()


def judge(tmp_path, log: str, tree: FakeTree = None, smi: CommandOutput = None) -> dict:
    tree = tree or FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    runner = ReplayRunner({"dmesg": CommandOutput(["dmesg", "--kernel"], 0, log, "", 0.01),
                           "nvidia-smi": smi or CommandOutput(["nvidia-smi"], 9, "", "no devices\n", 0.01)})
    return {r.check_id: r for r in health_xid.run(desired_state(), tree.node(runner=runner, live=True))}


# ---- initialisation failures ---------------------------------------------------------------------------------

def test_rminitadapter_failed_fails_the_gpu_it_names(tmp_path):
    results = judge(tmp_path, read("kernel-log_faulty_ogkm789-rminitadapter-gsp-550.144.03.txt"))
    result = results["health.gpu.driver.0000:98:00.0"]
    assert result.status is Status.FAIL and result.details["action"] == verdicts.REBOOT
    # the GSP boot failure printed before it, with no bus id, is the same GPU's (one burst)
    assert set(result.details["faults"]) == {"init-failed", "gsp-boot-failed"}
    assert result.details["faults"]["gsp-boot-failed"]["count"] == 1 and "reboot" in result.remediation
    # the GFW boot failures 19 minutes later name no GPU and no GPU-named line is near: the node's
    later = results["health.gpu.driver.node"]
    assert later.status is Status.FAIL and later.details["faults"]["gsp-boot-failed"]["count"] == 2


def test_the_syslog_form_with_the_kernels_stamp_reads_the_same(tmp_path):
    result = judge(tmp_path, read("kernel-log_faulty_gpuop1146-rminitadapter-syslog-kernel-stamp.txt"))[
        "health.gpu.driver.0000:0a:00.0"]
    assert result.status is Status.FAIL and result.details["faults"]["init-failed"]["count"] == 12


def test_an_init_failure_with_no_bus_id_is_the_nodes_and_names_the_gpu_missing_from_the_driver(tmp_path):
    tree = rebuild_sysfs(tmp_path, H200)  # the real 2x H200 tree, plus a third GPU the driver never listed
    real = "/sys/devices/pci0000:00/0000:00:08.0"
    tree.write(f"{real}/vendor", "0x10de\n").write(f"{real}/class", "0x030200\n")
    tree.link("/sys/bus/pci/devices/0000:00:08.0", "../../../devices/pci0000:00/0000:00:08.0")
    smi = CommandOutput(["nvidia-smi"], 0, (H200 / "cmd" / "query-gpu.stdout").read_text(), "", 0.01)
    result = judge(tmp_path, read("kernel-log_faulty_bumblebee722-rminitadapter-no-bus.txt"), tree, smi)[
        "health.gpu.driver.node"]
    assert result.status is Status.FAIL and result.details["missing_from_driver"] == ["0000:00:08.0"]
    assert "missing from the driver's list: 0000:00:08.0" in result.reason


def test_a_gsp_timeout_banner_without_an_xid_joins_the_gpu_that_then_failed_to_initialise(tmp_path):
    results = judge(tmp_path, read("kernel-log_faulty_ogkm1230-gsp-timeout-banner-then-init-failed-595.71.05.txt"))
    result = results["health.gpu.driver.0000:a1:00.0"]
    assert set(result.details["faults"]) == {"gsp-timeout", "gsp-boot-failed", "init-failed"}
    assert result.status is Status.FAIL and list(results) == ["health.gpu.xid", "health.gpu.driver.0000:a1:00.0"]


# ---- reset required, GSP timeouts ----------------------------------------------------------------------------

def test_reset_required_without_a_bus_id_is_the_nodes_reset_class(tmp_path):
    for name in ("kernel-log_faulty_sichek51-reset-required-no-bus.txt",
                 "kernel-log_faulty_ogkm1045-reset-required-journal-590.48.01.txt"):
        result = judge(tmp_path, read(name))["health.gpu.driver.node"]
        assert (result.status, result.details["action"]) == (Status.WARN, verdicts.RESET_GPU), name
        assert result.details["faults"]["reset-required"]["count"] == 1


def test_the_xid_119_lines_are_judged_once_in_their_xid_row(tmp_path):
    results = judge(tmp_path, read("kernel-log_faulty_gpud-xid119-xe9680.txt"))
    assert not [k for k in results if k.startswith("health.gpu.driver")]  # "Rate limiting ..." is Xid 119's
    assert kernel_log.driver_faults(read("kernel-log_faulty_gpud-xid119-xe9680.txt"))[0].fault.key == "gsp-timeout"


def test_healthy_twins_have_no_driver_failure(tmp_path):
    for log in (H200_DMESG, read("kernel-log_healthy_cachyos1019-journal-localised-month-610.57.04.txt"),
                read("kernel-log_healthy_ogkm446-talos-dmesg-gsp-trace.txt")):
        assert kernel_log.driver_faults(log) == []
        assert [r.status for r in judge(tmp_path, log).values()] == [Status.PASS]


# ---- incidents and repeats -----------------------------------------------------------------------------------

XID119 = read("kernel-log_faulty_gpud-xid119-xe9680.txt")
TIMEOUT = next(line for line in XID119.splitlines() if "): 119," in line).split("] ", 1)[1]


def every(minutes: int, count: int, line: str = TIMEOUT) -> str:
    """`line` printed `count` times, `minutes` apart, under dmesg -T stamps (the capture's own layout)."""
    out = []
    for i in range(count):
        minute = 24 + i * minutes
        out.append(f"[Sun Feb 23 {16 + minute // 60}:{minute % 60:02d}:18 2025] {line}")
    return "\n".join(out) + "\n"


def test_one_failure_printed_many_times_is_one_burst_and_stays_a_warn(tmp_path):
    result = judge(tmp_path, XID119)["health.gpu.xid.0000:9b:00.0"]
    assert (result.status, result.details["action"], result.details["bursts"]) == (Status.WARN, "reset-gpu",
                                                                                   {"119": 2})
    assert judge(tmp_path, every(0, 5))["health.gpu.xid.0000:9b:00.0"].details["bursts"] == {"119": 1}


def test_five_gsp_timeouts_within_an_hour_fail_with_no_reset_between(tmp_path):
    result = judge(tmp_path, every(12, 5))["health.gpu.xid.0000:9b:00.0"]
    assert (result.status, result.details["action"]) == (Status.FAIL, kernel_faults.REPEAT_ACTION)
    assert "repeated: 5 bursts within 24 h" in result.reason and result.details["incidents"] == 1
    assert judge(tmp_path, every(12, 4))["health.gpu.xid.0000:9b:00.0"].status is Status.WARN


def test_a_reset_class_driver_failure_repeating_fails_too(tmp_path):
    line = read("kernel-log_faulty_sichek51-reset-required-no-bus.txt").splitlines()[1].split("] ", 1)[1]
    result = judge(tmp_path, every(10, 5, line))["health.gpu.driver.node"]
    assert (result.status, result.details["faults"]["reset-required"]["bursts"]) == (Status.FAIL, 5)


def test_the_burst_and_repeat_rule():
    assert kernel_faults.bursts([0.0, 100.0, 279.0, 500.0]) == [[0, 1, 2], [3]]
    assert kernel_faults.repeats([0.0, 200.0, 400.0, 600.0, 800.0]) == 5
    assert kernel_faults.repeats([i * 5 * 3600.0 for i in range(5)]) == 5  # 20 h: within the day
    assert kernel_faults.repeats([i * 7 * 3600.0 for i in range(5)]) == 4  # 28 h: not
    assert kernel_faults.repeats([None, None, None]) == 1  # undated lines: never more incidents than proven
    assert kernel_faults.repeats([]) == 0


# ---- the scheduler hook keeps them -------------------------------------------------------------------------

def test_the_hook_keeps_driver_failures_and_aer_records_open_until_the_reboot():
    from verify.scheduler import kernel_events

    init = read("kernel-log_faulty_ogkm789-rminitadapter-gsp-550.144.03.txt")
    fatal = read("kernel-log_faulty_returnn1500-aer-fatal-sdes-cmpltto-reltime.txt")
    since = kernel_events.from_text(init + fatal, "dmesg --kernel", None)
    assert kernel_log.driver_faults(since.text) == kernel_log.driver_faults(init + fatal) != []
    lines = kernel_events.failing_lines(since.text)
    assert any("RmInitAdapter failed!" in line for line in lines)
    assert any("can't recover" in line for line in lines) and any("Uncorrected (Fatal)" in line for line in lines)
    reset = kernel_events.failing_lines(read("kernel-log_faulty_sichek51-reset-required-no-bus.txt"))
    assert reset == []  # a reset-class WARN is judged in its interval, never held open


def test_the_hook_passes_unread_lines_on_to_the_check(tmp_path):
    from verify.scheduler import kernel_events

    odd = "gpu-node-7 | NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"
    since = kernel_events.from_text(H200_DMESG + odd, "dmesg --kernel", None)
    assert kernel_log.unread_lines(since.text) == [odd.strip()]
    result = judge(tmp_path, since.text)["health.kernel_log.unread"]
    assert result.status is Status.WARN and "1 lines could not be read" in result.reason
    assert result.details["examples"] == [odd.strip()]
