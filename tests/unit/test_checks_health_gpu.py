"""GPU health checks (presence, memory errors, clocks, Xid) on the real Node: captured nvidia-smi
output replayed through an injected runner, fake /proc and /sys trees (tests/fixtures/node/health)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_gpu, health_xid, run_checks
from verify.facts import health_smi
from verify.facts import kernel_log as kernel_log_facts
from verify.result import Status
from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
HEALTH = FIXTURES / "health"
IDLE = (HEALTH / "h200_query-gpu_idle_590.48.01.csv").read_text()
LOAD = (HEALTH / "h200_query-gpu_load_590.48.01.csv").read_text()
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build\n"
H200_BUS = "0000:83:00.0"  # the capture's GPU


def with_field(capture: str, name: str, value: str) -> str:
    """The real capture with ONE column (by header name) changed: a faulty reading, the rest real."""
    header, row = capture.splitlines()[:2]
    names = [health_smi._header_name(column) for column in header.split(", ")]
    cells = row.split(", ")
    cells[names.index(name)] = value
    return f"{header}\n{', '.join(cells)}\n"


def smi(stdout: str, extra: dict = None) -> ReplayRunner:
    """Replays the health query's output; `extra` maps argv tuples or argv[0] to more outputs."""
    answers = {tuple(health_smi.argv()): CommandOutput(health_smi.argv(), 0, stdout, "", 0.1)}
    answers.update(extra or {})
    return ReplayRunner(answers)


def gpu_tree(tmp_path, bus=(H200_BUS,), driver=True) -> FakeTree:
    tree = FakeTree(tmp_path)
    if driver:
        tree.write("/proc/driver/nvidia/version", BANNER)
    for address in bus:
        tree.write(f"/sys/bus/pci/devices/{address}/vendor", "0x10de\n")
        tree.write(f"/sys/bus/pci/devices/{address}/class", "0x030200\n")
    tree.write("/sys/bus/pci/devices/0000:00:00.0/vendor", "0x8086\n")  # a host bridge: not a GPU
    tree.write("/sys/bus/pci/devices/0000:00:00.0/class", "0x060000\n")
    return tree


def profile_spec(name="h200-x2-nvlink", **thresholds) -> dict:
    spec = desired_state()
    spec["verify"] = {"profile": name, "benchmarks": [], "thresholds": thresholds}
    return spec


# ---- parsing -----------------------------------------------------------------------------------------

def test_real_captures_parse_with_the_new_clock_event_names():
    idle, load = health_smi.parse(IDLE)[0], health_smi.parse(LOAD)[0]
    assert (idle.bus_id, idle.number("temperature.gpu.tlimit"), load.number("temperature.gpu.tlimit")) == \
        ("00000000:83:00.0", 59, 35)
    assert idle.active("clocks_throttle_reasons.hw_slowdown") is False  # asked as throttle, printed as event
    assert idle.text("retired_pages.pending") is None  # [N/A] on HBM3 (row remapping replaced it)
    assert load.number("power.draw") == 627.40


@pytest.mark.parametrize("damage, message", [
    (lambda t: "", "printed nothing"),
    (lambda t: t.replace("pci.bus_id", "pci.bus"), "lacks pci.bus_id"),
    (lambda t: t.rstrip("\n") + ", extra\n", "fields, the header"),
    (lambda t: with_field(t, "remapped_rows.pending", "Maybe"), "neither"),
])
def test_damaged_output_is_a_parse_error_naming_the_field(damage, message):
    with pytest.raises(health_smi.HealthParseError, match=message):
        gpu = health_smi.parse(damage(IDLE))[0]
        gpu.active("remapped_rows.pending")


def test_an_old_driver_rejecting_a_field_is_asked_again_without_it(tmp_path):
    rejected = CommandOutput([], 2, 'Field "temperature.gpu.tlimit" is not a valid field to query.\n', "", 0.1)
    fewer = [f for f in health_smi.FIELDS if f != "temperature.gpu.tlimit"]
    runner = smi("", {tuple(health_smi.argv()): rejected,
                         tuple(health_smi.argv(fewer)): CommandOutput([], 0, IDLE, "", 0.1)})
    node = gpu_tree(tmp_path).node(runner=runner, live=True)
    gpus, reason = health_smi.query(node)
    assert reason == "" and len(gpus) == 1 and len(runner.calls) == 2
    health_smi.query(node)
    assert len(runner.calls) == 2  # memoised for the run


# ---- presence ----------------------------------------------------------------------------------------

def test_presence_passes_when_the_driver_lists_every_gpu_on_the_bus(tmp_path):
    node = gpu_tree(tmp_path).node(runner=smi(IDLE), live=True)
    result = health_gpu.run_presence(desired_state(), node)[0]
    assert result.status is Status.PASS and result.observed == 1


def test_a_gpu_on_the_bus_that_the_driver_lost_fails_naming_its_slot(tmp_path):
    node = gpu_tree(tmp_path, bus=(H200_BUS, "0000:86:00.0")).node(runner=smi(IDLE), live=True)
    result = health_gpu.run_presence(desired_state(), node)[0]
    assert result.status is Status.FAIL and "0000:86:00.0" in result.reason and "reboot" in result.remediation


def test_fewer_gpus_than_the_profile_expects_fail(tmp_path):
    node = gpu_tree(tmp_path).node(runner=smi(IDLE), live=True)
    result = health_gpu.run_presence(profile_spec(), node)[0]  # h200-x2-nvlink: gpu_count 2
    assert result.status is Status.FAIL and (result.expected, result.observed) == (2, 1)
    inventory = health_gpu.run_presence(profile_spec("h200-x2-nvlink", gpu_count=1), gpu_tree(tmp_path).node(
        runner=smi(IDLE), live=True))[0]
    assert inventory.status is Status.PASS  # verify_thresholds (the inventory) wins over the profile


def test_driver_that_answers_nothing_with_gpus_on_the_bus_fails(tmp_path):
    failed = CommandOutput([], 9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                                       "driver.\n", 0.1)
    node = gpu_tree(tmp_path).node(runner=smi("", {tuple(health_smi.argv()): failed}), live=True)
    result = health_gpu.run_presence(desired_state(), node)[0]
    assert result.status is Status.FAIL and "couldn't communicate" in result.reason


def test_a_root_tree_counts_the_bus_against_the_profile(tmp_path):
    result = health_gpu.run_presence(profile_spec(), gpu_tree(tmp_path, bus=(H200_BUS, "0000:86:00.0")).node())[0]
    assert result.status is Status.WARN and result.observed == 2 and "--root" in result.reason


# ---- memory errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("capture", [IDLE, LOAD])
def test_real_captures_have_healthy_memory(capture):
    result = health_gpu.judge_memory(health_smi.parse(capture)[0])
    assert result.status is Status.PASS and result.check_id == "health.gpu.memory.0"


@pytest.mark.parametrize("name, value, status, action, words", [
    # NVIDIA GPU Memory Error Management: a pending remap is applied at the next reset (reset when idle);
    # the RMA criterion is the remapping failure flag
    ("ecc.errors.uncorrected.volatile.total", "2", Status.WARN, "reset-gpu", "nvidia-smi -r -i 0"),
    ("remapped_rows.pending", "Yes", Status.WARN, "reset-gpu", "nvidia-smi -r -i 0"),
    ("remapped_rows.failure", "Yes", Status.FAIL, "drain-rma", "RMA"),
    ("ecc.errors.uncorrected.aggregate.total", "4", Status.WARN, "watch", "look again if it repeats"),
    ("ecc.mode.current", "Disabled", Status.WARN, "watch", "nvidia-smi -e 1"),
])
def test_each_memory_fault_gets_its_verdict_and_remedy(name, value, status, action, words):
    result = health_gpu.judge_memory(health_smi.parse(with_field(IDLE, name, value))[0])
    assert result.status is status and words in result.remediation and result.details["action"] == action
    assert "GPU 0 (00000000:83:00.0)" in result.reason


def a10_remap_pending(capture: str) -> str:
    """The A10's real remap state (public/nvidia-smi-q_faulty_gpud-a10-remap-pending-535.129.03.txt: Pending
    Yes, Uncorrectable Error 4, Failure No) put into the H200's real query row: two fields changed."""
    return with_field(with_field(capture, "remapped_rows.pending", "Yes"), "remapped_rows.uncorrectable", "4")


def test_a_pending_remap_is_reset_when_idle_and_a_remap_failure_is_rma():
    correctable_only = health_gpu.judge_memory(health_smi.parse(with_field(IDLE, "remapped_rows.pending", "Yes"))[0])
    assert correctable_only.status is Status.WARN and "correctable-error rows only" in correctable_only.reason
    pending = health_gpu.judge_memory(health_smi.parse(a10_remap_pending(IDLE))[0])
    assert pending.status is Status.WARN and pending.details["action"] == "reset-gpu"
    assert "4 row(s) remapped for uncorrectable errors" in pending.reason and "when it is idle" in pending.remediation
    failed = health_gpu.judge_memory(health_smi.parse(with_field(a10_remap_pending(IDLE), "remapped_rows.failure",
                                                                 "Yes"))[0])
    assert failed.status is Status.FAIL and failed.details["action"] == "drain-rma"
    assert failed.observed == "row remapping failed (NVIDIA's RMA criterion for GPU memory)"


def test_the_healthy_twins_remap_state_passes():
    # public/nvidia-smi-q_healthy_gpud-h100x8-535.161.08.txt: every GPU Pending No, Failure No, 0 rows
    text = (HEALTH / "public" / "nvidia-smi-q_healthy_gpud-h100x8-535.161.08.txt").read_text()
    assert "Pending                           : Yes" not in text and "Remapping Failure Occurred        : No" in text
    healthy = with_field(with_field(IDLE, "remapped_rows.pending", "No"), "remapped_rows.failure", "No")
    result = health_gpu.judge_memory(health_smi.parse(healthy)[0])
    assert result.status is Status.PASS and "action" not in result.details


# ---- clocks, temperature, power -----------------------------------------------------------------------

@pytest.mark.parametrize("capture, headroom", [(IDLE, 59), (LOAD, 35)])
def test_real_captures_have_no_slowdown(capture, headroom):
    result = health_gpu.judge_clocks(health_smi.parse(capture)[0], health_gpu.DERIVED_TEMP_MARGIN)
    assert result.status is Status.PASS and result.details["readings"]["tlimit_headroom_c"] == headroom


@pytest.mark.parametrize("name, value, status, words", [
    ("clocks_throttle_reasons.hw_slowdown", "Active", Status.FAIL, "cooling"),
    ("clocks_throttle_reasons.hw_power_brake_slowdown", "Active", Status.FAIL, "power brake"),
    ("clocks_throttle_reasons.hw_thermal_slowdown", "Active", Status.FAIL, "cooling"),
    ("temperature.gpu.tlimit", "3", Status.FAIL, "cooling"),
    ("temperature.gpu.tlimit", "8", Status.WARN, "cooling"),
    ("power.draw", "790.40 W", Status.WARN, "power feed"),
])
def test_slowdowns_and_limits(name, value, status, words):
    result = health_gpu.judge_clocks(health_smi.parse(with_field(IDLE, name, value))[0], health_gpu.DERIVED_TEMP_MARGIN)
    assert result.status is status and words in result.remediation and "GPU 0 (00000000:83:00.0)" in result.reason


@pytest.mark.parametrize("name, value", [
    ("clocks_throttle_reasons.sw_power_cap", "Active"),  # a GPU running a job at its power limit
    ("power.draw", "712.40 W"),  # one sample over the 700 W cap: power capping's overshoot, not a fault
])
def test_a_gpu_at_its_power_limit_is_not_a_finding(name, value):
    """NVML's SW power cap means "the clocks have been optimized to ensure not to exceed currently set power
    limits" (verify/judging/clock_reasons.py): the normal state under load, shown but never WARNed."""
    result = health_gpu.judge_clocks(health_smi.parse(with_field(IDLE, name, value))[0], health_gpu.DERIVED_TEMP_MARGIN)
    assert result.status is Status.PASS, result.reason
    if name.endswith("sw_power_cap"):
        assert "at its power limit" in result.observed and result.details["readings"]["at_power_limit"] is True


def test_profile_temperature_margin_overrides_the_derived_one(tmp_path):
    node = gpu_tree(tmp_path).node(runner=smi(LOAD), live=True)
    spec = profile_spec("h200-x2-nvlink", gpu_temp_margin_c={"min": 40, "source": "test"})
    assert health_gpu.run_clocks(spec, node)[0].status is Status.FAIL  # 35 C of headroom < 40


# ---- Xid ----------------------------------------------------------------------------------------------

def kernel_log(text: str) -> ReplayRunner:
    return smi(IDLE, {"dmesg": CommandOutput(["dmesg", "--kernel"], 0, text, "", 0.01)})


def run_xid(tmp_path, log: str, bus=(H200_BUS,), lookback: dict = None, uptime: str = None) -> dict:
    tree = gpu_tree(tmp_path, bus=bus)
    if uptime:
        tree.write("/proc/uptime", uptime)
    node = tree.node(runner=kernel_log(log), live=True)
    if lookback:
        node.memo["lookback"] = lookback
    return {r.check_id: r for r in health_xid.run(desired_state(), node)}


DOCUMENTED = (HEALTH / "kernel_log_xid79_48_documented.txt").read_text()
DOCUMENTED_BUSES = ("0000:3b:00.0", "0000:86:00.0", "0000:af:00.0")


def test_each_xid_gets_its_catalog_class_per_gpu(tmp_path):
    found = kernel_log_facts.parse_xids(DOCUMENTED)
    assert set(found) == set(DOCUMENTED_BUSES) and found["0000:86:00.0"][79][0] == 2
    results = run_xid(tmp_path, DOCUMENTED, bus=DOCUMENTED_BUSES)
    fallen = results["health.gpu.xid.0000:86:00.0"]
    assert fallen.status is Status.FAIL and fallen.details["action"] == "reboot"
    assert "Xid 79 x2 (GPU has fallen off the bus: reboot)" in fallen.reason and "reboot" in fallen.remediation
    assert "GPU at 0000:86:00.0" in fallen.reason  # nvidia-smi lists only the capture's GPU: no index
    # Xid 48 + 63 in the same second: one incident, reset when idle (not a drain)
    dbe = results["health.gpu.xid.0000:3b:00.0"]
    assert dbe.status is Status.WARN and dbe.details["action"] == "reset-gpu"
    assert "nvidia-smi -r -i 0000:3b:00.0" in dbe.remediation and dbe.details["xids"]["63"]["action"] == "reset-gpu"
    app = results["health.gpu.xid.0000:af:00.0"]
    assert app.status is Status.WARN and app.details["action"] == "application"
    assert "pid 48211 (python3)" in app.remediation and "application pid 48211 (python3)" in app.reason


def test_xid_154_carries_the_drivers_own_verdict(tmp_path):
    log = (HEALTH / "kernel_log_xid62_154_forum_595.71.05.txt").read_text()
    result = run_xid(tmp_path, log, bus=("0000:01:00.0",))["health.gpu.xid.0000:01:00.0"]
    assert result.status is Status.WARN and result.details["action"] == "reset-gpu"  # GPU Reset Required
    assert "recovery action 0x1 (GPU Reset Required)" in result.reason and "Xid 62 x1" in result.reason
    reboot = log.replace("to 0x1 (GPU Reset Required)", "to 0x2 (Node Reboot Required)")
    rebooted = run_xid(tmp_path, reboot, bus=("0000:01:00.0",))["health.gpu.xid.0000:01:00.0"]
    assert rebooted.status is Status.FAIL and rebooted.details["action"] == "reboot"
    cleared = log.replace("to 0x1 (GPU Reset Required)", "to 0x0 (None)").replace("62,", "13,")
    calm = run_xid(tmp_path, cleared, bus=("0000:01:00.0",))["health.gpu.xid.0000:01:00.0"]
    assert calm.status is Status.WARN and calm.details["xids"]["154"]["action"] == "ok"


def test_a_log_without_xids_passes_and_journalctl_is_the_fallback(tmp_path):
    quiet = "NVRM: GPU0 _kgspRpcGspEventPmuHalted: Received signal from GSP that PMU has halted.\n"
    refused = CommandOutput(["dmesg"], 1, "", "dmesg: read kernel buffer failed: Operation not permitted\n", 0.01)
    runner = smi(IDLE, {"dmesg": refused, "journalctl": CommandOutput(["journalctl"], 0, quiet, "", 0.01)})
    result = health_xid.run(desired_state(), gpu_tree(tmp_path).node(runner=runner, live=True))[0]
    assert result.status is Status.PASS and result.details["source"].startswith("journalctl -k -b")


def test_unreadable_kernel_log_is_a_skip_with_both_reasons(tmp_path):
    refused = CommandOutput(["dmesg"], 1, "", "dmesg: read kernel buffer failed: Operation not permitted\n", 0.01)
    node = gpu_tree(tmp_path).node(runner=smi(IDLE, {"dmesg": refused}), live=True)
    result = health_xid.run(desired_state(), node)[0]
    assert result.status is Status.SKIP and "Operation not permitted" in result.reason


# The probe-time message exactly as open-gpu-kernel-modules prints it (README: source-derived, not a capture).
LOST = (HEALTH / "kernel_log_fallen_off_bus_probe_source.txt").read_text()
LOST_BUS = "0000:5d:00.0"


def dmesg_layout(message: str, stamp: str = "[   12.482211] ") -> str:
    """One multi-line printk as `dmesg` shows it: the stamp on the first line, the rest indented under it."""
    first, *rest = message.splitlines()
    return "\n".join([stamp + first] + [" " * len(stamp) + line for line in rest]) + "\n"


def test_a_gpu_lost_at_probe_without_xid_fails_naming_its_bus(tmp_path):
    real = (HEALTH / "h200x2" / "cmd" / "dmesg-kernel.stdout").read_text()  # the machine's real log, no Xid
    log = real + dmesg_layout(LOST)
    node = gpu_tree(tmp_path, bus=(H200_BUS, LOST_BUS)).node(runner=kernel_log(log), live=True)
    results = health_xid.run(desired_state(), node)
    assert [(r.check_id, r.status) for r in results] == [(f"health.gpu.xid.{LOST_BUS}", Status.FAIL)]
    lost = results[0]
    assert f"GPU at {LOST_BUS}" in lost.reason and lost.details["action"] == "drain-rma"
    assert "fallen off the bus x1 (driver message, no Xid 79: drain-rma)" in lost.reason
    assert "reseat" in lost.remediation and "RMA" in lost.remediation and "drain the node" in lost.remediation
    assert lost.details["bus_lost"]["last"].endswith("fallen off the bus and is not responding to commands.")


def test_lost_gpu_message_parses_bare_and_in_dmesg_layout_but_not_other_probe_messages():
    assert kernel_log_facts.parse_lost(LOST) == {LOST_BUS: (1, " ".join(LOST.split("\n")).strip())}
    assert set(kernel_log_facts.parse_lost(dmesg_layout(LOST) + dmesg_layout(LOST, "[   13.001002] "))) == {LOST_BUS}
    assert kernel_log_facts.parse_lost(dmesg_layout(LOST))[LOST_BUS][0] == 1
    # same opening, other ending (osapi.c's "not supported" message): not a lost GPU
    unsupported = ("NVRM: The NVIDIA GPU 0000:5d:00.0 (PCI ID: 10de:2335)\n"
                   "NVRM: installed in this system is not supported by open\n"
                   "NVRM: nvidia.ko because it does not include the required GPU\n"
                   "NVRM: System Processor (GSP).\n")
    assert kernel_log_facts.parse_lost(unsupported) == {}


def test_a_gpu_lost_at_run_time_stays_under_its_xid_79(tmp_path):
    # Xid 79, then "NVRM: GPU 0000:86:00.0: GPU has fallen off the bus."
    log = (HEALTH / "kernel_log_xid79_48_documented.txt").read_text()
    assert set(kernel_log_facts.parse_lost(log)) == {"0000:86:00.0"}
    tree = gpu_tree(tmp_path, bus=("0000:3b:00.0", "0000:86:00.0", "0000:af:00.0"))
    node = tree.node(runner=kernel_log(log), live=True)
    fallen = {r.check_id: r for r in health_xid.run(desired_state(), node)}["health.gpu.xid.0000:86:00.0"]
    assert "reboot" in fallen.remediation and "bus_lost" not in fallen.details
    # the run-time line alone (its Xid rotated out of the ring): still a FAIL for that GPU
    alone = "\n".join(line for line in log.splitlines() if "NVRM: GPU 0000:86:00.0" in line)
    result = health_xid.run(desired_state(), gpu_tree(tmp_path).node(runner=kernel_log(alone), live=True))[0]
    assert result.status is Status.FAIL and result.check_id == "health.gpu.xid.0000:86:00.0"


# ---- the machine without GPUs ---------------------------------------------------------------------------

def test_every_health_check_skips_with_a_reason_on_a_node_without_gpus_or_hcas(tmp_path):
    runner = ReplayRunner()
    names = [name for name in __import__("verify.checks", fromlist=["REGISTRY"]).REGISTRY if name.startswith("health")]
    results = run_checks(desired_state(), FakeTree(tmp_path).node(runner=runner, live=True), names=names)
    assert [r.status for r in results] == [Status.SKIP] * len(names) and all(r.reason for r in results)
    assert runner.calls == []  # nothing run where there is nothing to read


def test_uncorrectable_errors_are_said_as_the_increase_since_the_last_run():
    gpu = health_smi.parse(with_field(IDLE, "ecc.errors.uncorrected.volatile.total", "5"))[0]
    first = health_gpu.judge_memory(gpu)
    assert "5 uncorrectable ECC error(s) since the driver loaded" in first.reason
    later = health_gpu.judge_memory(gpu, {"ecc.errors.uncorrected.volatile.total": 2})
    assert "3 uncorrectable ECC error(s) since the last run (5 since the driver loaded)" in later.reason
    same = health_gpu.judge_memory(gpu, {"ecc.errors.uncorrected.volatile.total": 5})
    assert "no new uncorrectable ECC error since the last run" in same.reason
    assert same.status is Status.WARN and same.details["action"] == "reset-gpu"  # still not reset: still its advice
    reloaded = health_gpu.judge_memory(gpu, {"ecc.errors.uncorrected.volatile.total": 9})  # the driver reloaded
    assert "5 uncorrectable ECC error(s) since the driver loaded" in reloaded.reason


# ---- SRAM and DRAM apart (issue 36 item 1) -------------------------------------------------------------------

def test_sram_errors_are_not_judged_as_rows_to_remap_and_keep_their_lifetime_count():
    # the H200's real query row, with the counts of the issue's held-back case: 1 SRAM uncorrectable error since
    # the driver loaded, 5 in the GPU's life (no public capture of a faulty SRAM row was found)
    faulty = with_field(with_field(IDLE, "ecc.errors.uncorrected.volatile.sram", "1"),
                        "ecc.errors.uncorrected.aggregate.sram", "5")
    faulty = with_field(with_field(faulty, "ecc.errors.uncorrected.volatile.total", "1"),
                        "ecc.errors.uncorrected.aggregate.total", "5")
    result = health_gpu.judge_memory(health_smi.parse(faulty)[0])
    assert result.status is Status.WARN and result.details["action"] == "reset-gpu"
    assert "1 uncorrectable SRAM ECC error(s) since the driver loaded (5 in the GPU's lifetime)" in result.reason
    assert "SRAM has no rows to remap" in result.reason and "remapped" not in result.reason
    assert result.details["readings"]["ecc.errors.uncorrected.aggregate.sram"] == "5"


def test_dram_errors_go_to_the_remapper_and_a_lifetime_only_count_is_watched():
    dram = with_field(with_field(IDLE, "ecc.errors.uncorrected.volatile.dram", "2"),
                      "ecc.errors.uncorrected.volatile.total", "2")
    result = health_gpu.judge_memory(health_smi.parse(dram)[0])
    assert result.details["action"] == "reset-gpu" and "DRAM" in result.reason
    assert "its row is remapped at the next GPU reset" in result.reason and "SRAM" not in result.reason
    old = with_field(with_field(IDLE, "ecc.errors.uncorrected.aggregate.sram", "5"),
                     "ecc.errors.uncorrected.aggregate.total", "5")
    watched = health_gpu.judge_memory(health_smi.parse(old)[0])
    assert watched.details["action"] == "watch" and "5 uncorrectable SRAM ECC error(s) in the GPU's lifetime" in \
        watched.reason


def test_the_real_h200_row_reports_sram_and_dram_apart_and_is_healthy():
    gpu = health_smi.parse(IDLE)[0]  # the healthy twin: the machine's own capture, every split counter 0
    assert [gpu.number(name) for name in health_smi.SPLIT_ECC_FIELDS] == [0, 0, 0, 0]
    assert health_gpu.judge_memory(gpu).status is Status.PASS
