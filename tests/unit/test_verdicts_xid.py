"""The verdict classes (verify.judging.verdicts) and the Xid judge that uses them, on real published kernel
logs (tests/fixtures/node/health/public, README cites each) and the GPU machines' captures, through the real
Node with a replayed runner: driver lines only, catalog classes, recurrence, the lookback, the drain reason."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_xid
from verify.facts import kernel_log
from verify.history.drain import first_failure
from verify.judging import verdicts, xid_catalog
from verify.result import CheckResult, Status
from verify.runner import CommandOutput

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
PUBLIC = HEALTH / "public"
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build\n"
H200_DMESG = (HEALTH / "h200x2" / "cmd" / "dmesg-kernel.stdout").read_text()  # the machine's real log, no Xid
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def judge(tmp_path, log: str, lookback: dict = None, uptime: str = None) -> dict:
    tree = FakeTree(tmp_path)
    tree.write("/proc/driver/nvidia/version", BANNER)
    if uptime:
        tree.write("/proc/uptime", uptime)
    runner = ReplayRunner({"dmesg": CommandOutput(["dmesg", "--kernel"], 0, log, "", 0.01),
                           "nvidia-smi": CommandOutput(["nvidia-smi"], 9, "", "no devices\n", 0.01)})
    node = tree.node(runner=runner, live=True)
    if lookback:
        node.memo["lookback"] = lookback
    return {r.check_id: r for r in health_xid.run(desired_state(), node)}


# ---- the classes -------------------------------------------------------------------------------------

def test_each_class_has_its_status_and_words_and_the_catalog_uses_them():
    assert {a: verdicts.STATUS[a] for a in verdicts.ACTIONS} == {
        "ok": Status.PASS, "watch": Status.WARN, "application": Status.WARN, "fix-config": Status.FAIL,
        "reset-gpu": Status.WARN,
        "reboot": Status.FAIL, "drain-rma": Status.FAIL}
    assert set(verdicts.WORDS) == set(verdicts.ACTIONS)
    assert xid_catalog.RESET_GPU is verdicts.RESET_GPU and xid_catalog.ACTIONS is verdicts.ACTIONS
    assert len(xid_catalog.CATALOG) == 172 and all(e.action in verdicts.ACTIONS for e in xid_catalog.CATALOG.values())
    assert verdicts.recurred("reset-gpu", 2) == "drain-rma" and verdicts.recurred("reset-gpu", 1) == "reset-gpu"
    assert verdicts.recurred("application", 5) == "application"


@pytest.mark.parametrize("code, action", [(13, "application"), (31, "application"), (48, "reset-gpu"),
                                          (63, "reset-gpu"), (64, "drain-rma"), (79, "reboot"), (92, "watch"),
                                          (94, "reset-gpu"), (119, "reset-gpu")])
def test_codes_get_the_catalogs_class(code, action):
    # 92: the catalog's IGNORE (watch), where tunefleet's first table said drain-rma
    assert health_xid.classify(code, "")[0] == action


def test_every_catalog_code_judges_to_its_class_status(tmp_path):
    for code, entry in xid_catalog.CATALOG.items():
        if code == health_xid.RECOVERY:
            continue
        line = f"[ 100.000001] NVRM: Xid (PCI:0000:3b:00): {code}, pid='<unknown>', name=<unknown>, text\n"
        result = judge(tmp_path, line)["health.gpu.xid.0000:3b:00.0"]
        assert (result.status, result.details["action"]) == (verdicts.STATUS[entry.action], entry.action), code


def test_an_unknown_code_is_a_warn_naming_it(tmp_path):
    result = judge(tmp_path, "[ 5.000001] NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, new\n")
    only = result["health.gpu.xid.0000:3b:00.0"]
    assert only.status is Status.WARN and "Xid 999 x1 (not in NVIDIA's Xid catalog: watch)" in only.reason


# ---- driver lines only ---------------------------------------------------------------------------------

PLANTED = [  # another subsystem's message echoing a user-chosen name (a USB product string, a process name)
    f"[  812.100231] usb 1-1: Product: {XID79}",
    f"[  812.100232] audit: type=1400 audit(1700000000.123:42): apparmor=\"DENIED\" comm=\"{XID79}\"",
    f"kern  :info  : [  812.100233] usb 1-1: SerialNumber: {XID79}",
    f"Nov 15 12:02:03 gpu-07 kernel: usb 1-1: Manufacturer: {XID79}",
    f"[  812.100234] python3[4242]: {XID79}",
]


def test_an_xid_planted_in_another_subsystems_message_never_fails(tmp_path):
    planted = H200_DMESG + "\n".join(PLANTED) + "\n"
    assert kernel_log.parse_xids(planted) == {} and kernel_log.parse_lost(planted) == {}
    assert [r.status for r in judge(tmp_path, planted).values()] == [Status.PASS]
    # the same Xid as the driver's own record, in each real prefix form: FAIL
    for prefix in ("[  812.100235] ", "[Fri Apr  5 21:29:39 2024] ", "2024-11-15T12:02:03,470068+00:00 ",
                   "kern  :err   : [  812.100235] ", "Nov 15 12:02:03 gpu-07 kernel: ", "kernel: ", "<3>", ""):
        real = judge(tmp_path, planted + prefix + XID79 + "\n")
        assert real["health.gpu.xid.0000:3b:00.0"].status is Status.FAIL, prefix


@pytest.mark.parametrize("line", ["NVRM: Xid (PCI:::): 79, x", "NVRM: Xid (PCI:zz): 79, x", "NVRM: Xid (PCI:.): 13, y",
                                  "NVRM: GPU 0000:99:00.9: GPU has fallen off the bus."])
def test_a_malformed_bus_id_never_raises(line):
    assert kernel_log.parse_xids(line) == {} and kernel_log.parse_lost(line) == {}


# ---- real public logs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, bus, status, action, words", [
    # Xid 48 + 63 + 94 within 0.2 s: one incident, the remap applies at the next reset (not a drain)
    ("kernel-log_faulty_gpud-xid48-63-94.txt", "0000:19:00.0", Status.WARN, "reset-gpu", "Xid 63 x1"),
    ("kernel-log_faulty_akash209-xid79-535.161.07.txt", "0000:a1:00.0", Status.FAIL, "reboot", "Xid 79 x1"),
    ("kernel-log_faulty_gpud-xid13-43.txt", "0000:38:00.0", Status.WARN, "application", "Xid 13 x28"),
    # GSP timeouts at 16:24, 16:27 and 16:30: a reset-gpu fault that came back
    ("kernel-log_faulty_gpud-xid119-xe9680.txt", "0000:9b:00.0", Status.FAIL, "drain-rma", "recurs after reset"),
    ("kernel-log_faulty_nvsentinel155-fallen-off-bus-probe-570.158.01.txt", "0000:b3:00.0", Status.FAIL,
     "drain-rma", "fallen off the bus x1"),
])
def test_real_faulty_logs_get_the_vendors_action(tmp_path, name, bus, status, action, words):
    result = judge(tmp_path, (PUBLIC / name).read_text())[f"health.gpu.xid.{bus}"]
    assert (result.status, result.details["action"]) == (status, action) and words in result.reason


def test_application_faults_name_the_process(tmp_path):
    log = (PUBLIC / "kernel-log_faulty_ogkm1150-xid45-after-145-149-590.48.01.txt").read_text()
    result = judge(tmp_path, log)["health.gpu.xid.0000:dc:00.0"]
    assert result.status is Status.WARN and result.remediation.startswith("pid 1818990 (python3): the application")


def test_the_healthy_twin_and_the_machines_logs_pass(tmp_path):
    for log in ((PUBLIC / "kernel-log_healthy_gpud-pcie-bw-mlx5.txt").read_text(), H200_DMESG,
                (HEALTH / "h200x2" / "cmd" / "dmesg-nvrm-levels.stdout").read_text()):
        assert [r.status for r in judge(tmp_path, log).values()] == [Status.PASS]


# ---- lookback ----------------------------------------------------------------------------------------------

DOCUMENTED = (HEALTH / "kernel_log_xid79_48_documented.txt").read_text()  # Xids at 8213 s, 9120 s, 9301 s, 9410 s


def test_events_before_the_lookback_start_stay_as_history_and_do_not_fail(tmp_path):
    now = datetime.now(timezone.utc)
    # up 10000 s: the lookback start at uptime 9350 s falls after both Xid 79s, before the Xid 13
    since = (now - timedelta(seconds=650)).isoformat()
    lookback = {"since_utc": since, "source": "operator ack 2026-07-03: reseated GPU 1"}
    results = judge(tmp_path, DOCUMENTED, lookback, uptime="10000.00 19000.00\n")
    fallen = results["health.gpu.xid.0000:86:00.0"]
    assert fallen.status is Status.PASS and fallen.details["before_lookback"]["79"]["count"] == 2
    assert fallen.details["lookback"]["source"] == "operator ack 2026-07-03: reseated GPU 1"
    assert results["health.gpu.xid.0000:3b:00.0"].status is Status.PASS
    app = results["health.gpu.xid.0000:af:00.0"]
    assert app.status is Status.WARN and "since operator ack 2026-07-03" in app.reason
    # without a lookback: since boot, as before
    assert judge(tmp_path, DOCUMENTED)["health.gpu.xid.0000:86:00.0"].status is Status.FAIL


def test_a_reset_gpu_fault_after_the_lookback_recurs_only_when_seen_twice(tmp_path):
    twice = "".join(f"[ {t}.000001] NVRM: Xid (PCI:0000:3b:00): 94, pid='<unknown>', name=<unknown>, Contained\n"
                    for t in (100, 5000))
    assert judge(tmp_path, twice)["health.gpu.xid.0000:3b:00.0"].details["action"] == "drain-rma"
    since = (datetime.now(timezone.utc) - timedelta(seconds=2000)).isoformat()
    once = judge(tmp_path, twice, {"since_utc": since, "source": "last verify run 1"}, uptime="6000.0 1.0\n")
    assert once["health.gpu.xid.0000:3b:00.0"].details["action"] == "reset-gpu"


# ---- the drain reason ----------------------------------------------------------------------------------------

def test_the_drain_reason_names_the_worst_class_and_a_reset_gpu_warn_never_drains(tmp_path):
    results = list(judge(tmp_path, DOCUMENTED).values())
    assert first_failure(results).startswith("reboot: health.gpu.xid.0000:86:00.0: GPU at 0000:86:00.0 logged Xid 79")
    warns = list(judge(tmp_path, (PUBLIC / "kernel-log_faulty_gpud-xid48-63-94.txt").read_text()).values())
    assert [r.details["action"] for r in warns] == ["reset-gpu"] and first_failure(warns) is None
    plain = CheckResult("bench.h2d", "bench", Status.FAIL, reason="slow")
    rma = CheckResult("health.gpu.memory.3", "health", Status.FAIL, reason="remap failed",
                      details={"action": "drain-rma"})
    assert first_failure([plain, rma]) == "drain-rma: health.gpu.memory.3: remap failed"
    assert first_failure([plain]) == "bench.h2d: slow"
