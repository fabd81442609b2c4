"""PCIe: the kernel's own "available PCIe bandwidth, limited by ... at <upstream port>" notice and the idle
GPU below its generation (issue 26 item 8). Kernel logs are real published ones
(tests/fixtures/node/health/public/README.md cites each) replayed as `dmesg --kernel`; the sysfs trees hold
the devices those logs name, in the kernel's formats, through the real Node."""
from __future__ import annotations

from pathlib import Path

from tests.helpers.drills import pci_device_under_port as device
from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_pcie
from verify.facts import health_smi, links
from verify.judging import verdicts
from verify.result import Status
from verify.runner import CommandOutput

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
PUBLIC = HEALTH / "public"
DMESG = ("dmesg", "--kernel")
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"


def run_with_log(tree: FakeTree, log: str, extra=None):
    answers = {DMESG: CommandOutput(list(DMESG), 0, log, "", 0.1)}
    answers.update(extra or {})
    runner = ReplayRunner(answers)
    return health_pcie.run(desired_state(), tree.node(runner=runner, live=True)), runner


def test_a_gpu_capped_by_an_x4_slot_warns_naming_the_upstream_port_though_its_own_link_looks_full(tmp_path):
    # linux-surface#374: GPU 10de:1c20 at 0000:02:00.0, x16-capable, wired x4 behind root port 0000:00:1c.4.
    tree = device(FakeTree(tmp_path), "0000:02:00.0", "0000:00:1c.4", "8.0 GT/s PCIe", 4, "8.0 GT/s PCIe", 16,
                  "0x10de", "0x030200", "8.0 GT/s PCIe", 4)
    log = (PUBLIC / "kernel-log_faulty_linux-surface374-pcie-bw-limited-gpu-x4.txt").read_text()
    results, _ = run_with_log(tree, log)
    by_id = {r.check_id: r for r in results}
    assert by_id["health.pcie.gpu.0000:02:00.0"].status is Status.PASS  # x4 of an x4 slot: sysfs sees no fault
    notice = by_id["health.pcie.bandwidth.0000:02:00.0"]
    assert notice.status is Status.WARN and notice.details[verdicts.ACTION_KEY] == verdicts.WATCH
    assert "GPU at 0000:02:00.0" in notice.reason and "31.504 of 126.016 Gb/s" in notice.reason
    assert "8 GT/s x4 link at 0000:00:1c.4" in notice.reason and "0000:00:1c.4" in notice.remediation


def test_a_connectx_nic_in_a_gen3_x8_slot_warns_with_the_old_kernel_wording(tmp_path):
    # NVIDIA/l2fwd-nv#6: ConnectX-6 Dx function 0000:b3:00.1 behind 0000:b2:00.0, kernel 5.0 ("8 GT/s x8").
    tree = device(FakeTree(tmp_path), "0000:b3:00.1", "0000:b2:00.0", "8 GT/s", 8, "16 GT/s", 16,
                  "0x15b3", "0x020000", "8 GT/s", 8)
    tree.link("/sys/class/infiniband/mlx5_1/device", "../../../devices/pci0000:00/0000:b2:00.0/0000:b3:00.1")
    log = (PUBLIC / "kernel-log_faulty_l2fwd-nv6-pcie-bw-limited-mlx5-x8.txt").read_text()
    results, _ = run_with_log(tree, log)
    notice = {r.check_id: r for r in results}["health.pcie.bandwidth.0000:b3:00.1"]
    assert notice.status is Status.WARN and notice.details["upstream"] == "0000:b2:00.0"
    assert "HCA mlx5_1 (0000:b3:00.1)" in notice.reason and "63.008 of 252.048 Gb/s" in notice.reason


def test_the_healthy_twin_gives_no_notice_and_other_vendors_are_not_judged(tmp_path):
    healthy = (PUBLIC / "kernel-log_healthy_gpud-pcie-bw-mlx5.txt").read_text()
    tree = device(FakeTree(tmp_path / "a"), "0000:1a:00.0", "0000:17:01.0", "32.0 GT/s PCIe", 16,
                  "32.0 GT/s PCIe", 16, "0x15b3", "0x020000", "32.0 GT/s PCIe", 16)
    tree.link("/sys/class/infiniband/mlx5_0/device", "../../../devices/pci0000:00/0000:17:01.0/0000:1a:00.0")
    results, _ = run_with_log(tree, healthy)
    assert [(r.check_id, r.status) for r in results] == [("health.pcie.hca.0000:1a:00.0", Status.PASS)]
    # raspberry-pi-pcie-devices#712: the capped device is an AMD bridge (1022:1470): not a GPU or RDMA NIC.
    amd = device(FakeTree(tmp_path / "b"), "0000:01:00.0", "0000:00:00.0", "8.0 GT/s PCIe", 1, "8.0 GT/s PCIe",
                 16, "0x1022", "0x060400", "8.0 GT/s PCIe", 1)
    device(amd, "0000:18:00.0", "0000:00:01.0", "32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16, "0x10de", "0x030200",
           "32.0 GT/s PCIe", 16)
    log = (PUBLIC / "kernel-log_faulty_rpi-pcie712-pcie-bw-limited-x1.txt").read_text()
    results, _ = run_with_log(amd, log)
    assert [r.check_id for r in results] == ["health.pcie.gpu.0000:18:00.0"]


def test_in_a_vm_without_real_ports_the_kernel_log_is_not_read(tmp_path):
    tree = FakeTree(tmp_path)  # the GPU machines' VMs: a passed-through GPU whose parent has no link files
    tree.write("/sys/bus/pci/devices/0000:00:06.0/vendor", "0x10de\n").write(
        "/sys/bus/pci/devices/0000:00:06.0/class", "0x030200\n")
    results, runner = run_with_log(tree, (PUBLIC / "kernel-log_faulty_linux-surface374-pcie-bw-limited-gpu-x4.txt")
                                   .read_text())
    assert [r.status for r in results] == [Status.SKIP] and list(DMESG) not in runner.calls


def test_an_idle_gpu_below_its_generation_passes_with_the_idle_reason_and_warns_without_it(tmp_path):
    # The 2x H200 machine's real query (clocks_event_reasons.active 0x...01 = Idle on both GPUs); the GPU's
    # link files set at Gen1, as an idle H200 on a bare-metal board shows them.
    query = (HEALTH / "h200x2" / "cmd" / "query-gpu.stdout").read_text()
    for name, text, status in (("idle", query, Status.PASS),
                               ("busy", query.replace("0x0000000000000001", "0x0000000000000000", 1), Status.WARN)):
        tree = device(FakeTree(tmp_path / name), "0000:00:06.0", "0000:00:01.0", "2.5 GT/s PCIe", 16,
                      "32.0 GT/s PCIe", 16, "0x10de", "0x030200", "32.0 GT/s PCIe", 16)
        tree.write("/proc/driver/nvidia/version", BANNER)
        smi = {tuple(health_smi.argv()): CommandOutput([], 0, text, "", 0.1)}
        results, _ = run_with_log(tree, "", smi)
        gpu = {r.check_id: r for r in results}["health.pcie.gpu.0000:00:06.0"]
        assert gpu.status is status and "GPU 0 (0000:00:06.0)" in gpu.reason, name
    assert "Idle clock-event reason" in (health_pcie.judge_link("gpu", "GPU 0", {
        "address": "0000:00:06.0", "gen_current": 1, "gen_max": 5, "width_current": 16, "width_max": 16},
        idle=True).reason)


def test_the_notice_parser_reads_both_kernel_wordings_and_keeps_the_last_per_device():
    new = (PUBLIC / "kernel-log_faulty_linux-surface374-pcie-bw-limited-gpu-x4.txt").read_text()
    old = (PUBLIC / "kernel-log_faulty_l2fwd-nv6-pcie-bw-limited-mlx5-x8.txt").read_text()
    gpu = links.parse_bandwidth_notices(new)["0000:02:00.0"]
    assert (gpu.limit_gts, gpu.limit_width, gpu.upstream, gpu.capable_width) == (8.0, 4, "0000:00:1c.4", 16)
    nic = links.parse_bandwidth_notices(old)["0000:b3:00.1"]
    assert (nic.limit_gts, nic.limit_width, nic.capable_gts) == (8.0, 8, 16.0)
    assert links.parse_bandwidth_notices((PUBLIC / "kernel-log_healthy_gpud-pcie-bw-mlx5.txt").read_text()) == {}
    twice = old + "\n" + old.replace("63.008", "126.016").replace("x8 link at", "x16 link at")
    assert links.parse_bandwidth_notices(twice)["0000:b3:00.1"].available_gbits == 126.016
