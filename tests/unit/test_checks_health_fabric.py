"""PCIe link, NVLink and InfiniBand/RoCE port health on the real Node: fake sysfs trees in the kernel's
formats and replayed nvidia-smi output (the 2x H200 machine's real `nvlink -s` and `nvlink -e`, driver 580;
see tests/fixtures/node/health/README.md for the origin of each input)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.drills import pci_device_under_port
from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import health_ib, health_nvlink, health_pcie
from verify.result import Status
from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
H200X2 = FIXTURES / "health" / "h200x2" / "cmd"  # real, 2x H200 NV18, driver 580.159.04
NVLINK_S = (H200X2 / "nvlink-s.stdout").read_text()
NVLINK_E = (H200X2 / "nvlink-e.stdout").read_text()
BANNER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"


def spec_with(profile=None, **thresholds) -> dict:
    spec = desired_state()
    spec["verify"] = {"profile": profile, "benchmarks": [], "thresholds": thresholds}
    return spec


# ---- PCIe ----------------------------------------------------------------------------------------------

def pci_device(tree: FakeTree, address: str, speed: str, width: int, max_speed="32.0 GT/s PCIe", max_width=16,
               vendor="0x10de", klass="0x030200", bridge="0000:00:01.0", bridge_speed="32.0 GT/s PCIe",
               bridge_width=16) -> FakeTree:
    """A device under a root port (tests.helpers.drills.pci_device_under_port), Gen5 x16 GPU by default."""
    return pci_device_under_port(tree, address, bridge, speed, width, max_speed, max_width, vendor, klass,
                                 bridge_speed, bridge_width)


def one_link(tmp_path, **kwargs):
    tree = pci_device(FakeTree(tmp_path), "0000:18:00.0", **kwargs)
    return health_pcie.run(desired_state(), tree.node())


def test_full_link_passes_and_names_the_upstream_port(tmp_path):
    result = one_link(tmp_path, speed="32.0 GT/s PCIe", width=16)[0]
    assert result.status is Status.PASS and (result.expected, result.observed) == ("Gen5 x16", "Gen5 x16")
    assert result.details["upstream"] == "0000:00:01.0"


def test_width_below_max_fails_and_idle_gen_below_max_warns_for_a_gpu(tmp_path):
    narrow = one_link(tmp_path / "a", speed="32.0 GT/s PCIe", width=8)[0]
    assert narrow.status is Status.FAIL and "x8 of x16" in narrow.reason and "reseat" in narrow.remediation
    idle = one_link(tmp_path / "b", speed="2.5 GT/s PCIe", width=16)[0]
    assert idle.status is Status.WARN and "Gen1 of Gen5" in idle.reason and "--bench hostcopy" in idle.remediation


def test_a_gen5_gpu_in_a_gen4_slot_is_judged_against_the_slot(tmp_path):
    result = one_link(tmp_path, speed="16.0 GT/s PCIe", width=16, bridge_speed="16.0 GT/s PCIe")[0]
    assert result.status is Status.PASS and result.expected == "Gen4 x16"


def test_an_hca_at_a_lower_gen_fails_and_old_kernel_wording_parses(tmp_path):
    tree = FakeTree(tmp_path)
    pci_device(tree, "0000:17:00.0", speed="8 GT/s", width=16, max_speed="16 GT/s", vendor="0x15b3",
               klass="0x020700", bridge_speed="16 GT/s")
    tree.link("/sys/class/infiniband/mlx5_0/device", "../../../devices/pci0000:00/0000:00:01.0/0000:17:00.0")
    result = health_pcie.run(desired_state(), tree.node())[0]
    assert result.status is Status.FAIL and result.check_id == "health.pcie.hca.0000:17:00.0"
    assert "HCA mlx5_0" in result.reason and "Gen3 of Gen4" in result.reason


def test_link_down_fails_and_a_virtual_device_skips(tmp_path):
    down = one_link(tmp_path / "a", speed="Unknown", width=0)[0]
    assert down.status is Status.FAIL and "link down" in down.reason
    tree = FakeTree(tmp_path / "b")  # the GPU machine's VM: no link files on a passed-through GPU's parent
    tree.write("/sys/bus/pci/devices/0000:00:06.0/vendor", "0x10de\n").write(
        "/sys/bus/pci/devices/0000:00:06.0/class", "0x030200\n")
    assert health_pcie.run(desired_state(), tree.node())[0].status is Status.SKIP


@pytest.mark.parametrize("text, gen", [("32.0 GT/s PCIe", 5), ("8 GT/s", 3), ("2.5 GT/s PCIe", 1),
                                       ("64.0 GT/s PCIe", 6), ("Unknown", None), (None, None)])
def test_speed_to_generation(text, gen):
    assert health_pcie.gen_of(text) == gen


# ---- NVLink --------------------------------------------------------------------------------------------

def nvlink_node(tmp_path, status=NVLINK_S, errors=NVLINK_E):
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", BANNER)
    runner = ReplayRunner({tuple(health_nvlink.STATUS_ARGV): CommandOutput([], 0, status, "", 0.1),
                           tuple(health_nvlink.ERRORS_ARGV): CommandOutput([], 0, errors, "", 0.1)})
    return tree.node(runner=runner, live=True)


def test_the_gpu_machines_18_links_pass_against_its_profile(tmp_path):
    results = health_nvlink.run(spec_with("h200-x2-nvlink"), nvlink_node(tmp_path))
    assert [(r.check_id, r.status) for r in results] == [("health.nvlink.0", Status.PASS),
                                                         ("health.nvlink.1", Status.PASS)]
    assert results[0].observed == "18 links up" and results[0].details["links_gbps"]["17"] == 26.562


def test_an_inactive_link_fails_naming_it(tmp_path):
    broken = NVLINK_S.replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 2)  # both GPUs' link 5
    results = health_nvlink.run(spec_with("h200-x2-nvlink"), nvlink_node(tmp_path, broken))
    assert all(r.status is Status.FAIL and "17 of 18 links up (inactive: 5)" in r.reason for r in results)
    one = NVLINK_S.replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 1)  # no profile: GPU 1 sets the bar
    derived = health_nvlink.run(spec_with(), nvlink_node(tmp_path, one))
    assert [r.status for r in derived] == [Status.FAIL, Status.PASS]


def test_a_slow_link_and_error_counters(tmp_path):
    slow = NVLINK_S.replace("Link 3: 26.562 GB/s", "Link 3: 13.281 GB/s", 1)
    assert "3 at 13.28" in health_nvlink.run(spec_with("h200-x2-nvlink"), nvlink_node(tmp_path, slow))[0].reason
    few = NVLINK_E.replace("Link 4: CRC Errors: 0", "Link 4: CRC Errors: 7", 1)
    warn = health_nvlink.run(spec_with(), nvlink_node(tmp_path, errors=few))[0]
    assert warn.status is Status.WARN and "link 4 CRC Errors 7" in warn.reason
    assert "nvidia-smi -r -i 0" in warn.remediation
    many = NVLINK_E.replace("Link 2: Replay Errors: 0", "Link 2: Replay Errors: 2353", 1)
    assert health_nvlink.run(spec_with(), nvlink_node(tmp_path, errors=many))[0].status is Status.FAIL


def test_no_nvlink_skips_unless_the_profile_expects_it(tmp_path):
    pcie_only = "GPU 0: NVIDIA L40S (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
    for output in (pcie_only, ""):
        skipped = health_nvlink.run(spec_with(), nvlink_node(tmp_path, output))[0]
        assert skipped.status is Status.SKIP and "no active NVLink" in skipped.reason
    assert health_nvlink.run(spec_with("h200-x2-nvlink"), nvlink_node(tmp_path, pcie_only))[0].status is Status.FAIL
    expected = health_nvlink.run(spec_with("h200-x2-nvlink"), nvlink_node(tmp_path, ""))[0]
    assert expected.status is Status.FAIL and "reports no NVLink" in expected.reason


def test_nvlink_parsers():
    assert health_nvlink.parse_status(NVLINK_S)[1][17] == 26.562
    assert health_nvlink.parse_errors(NVLINK_E)[1][17] == {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0}
    with pytest.raises(health_nvlink.NvlinkParseError, match="unreadable state"):
        health_nvlink.parse_status("GPU 0: X\n\t Link 0: 12 furlongs\n")


# ---- InfiniBand / RoCE -----------------------------------------------------------------------------------

def ib_port(tree: FakeTree, device="mlx5_0", port=1, state="4: ACTIVE", phys="5: LinkUp",
            rate="400 Gb/sec (4X NDR)", layer="InfiniBand", **counters) -> FakeTree:
    base = f"/sys/class/infiniband/{device}/ports/{port}"
    for name, value in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", layer)):
        tree.write(f"{base}/{name}", f"{value}\n")
    for name in health_ib.COUNTERS:
        tree.write(f"{base}/counters/{name}", f"{counters.get(name, 0)}\n")
    return tree


def test_healthy_ports_pass(tmp_path):
    tree = ib_port(ib_port(FakeTree(tmp_path)), device="mlx5_1")
    results = health_ib.run(spec_with("h200-sxm-8x"), tree.node())
    assert [r.status for r in results] == [Status.PASS, Status.PASS]
    assert results[0].check_id == "health.ib.mlx5_0/1"


def test_port_down_slow_or_erroring(tmp_path):
    tree = ib_port(FakeTree(tmp_path))
    ib_port(tree, device="mlx5_1", state="1: DOWN", phys="3: Disabled")
    ib_port(tree, device="mlx5_2", state="1: DOWN", phys="2: Polling")
    ib_port(tree, device="mlx5_3", rate="200 Gb/sec (4X HDR)")
    ib_port(tree, device="mlx5_4", symbol_error=3)
    ib_port(tree, device="mlx5_5", link_downed=42)
    by_port = {r.check_id.split(".", 2)[2]: r for r in health_ib.run(spec_with(), tree.node())}
    # Disabled while its siblings of the same model are Active: a port that should be up (issue 26 item 5)
    assert by_port["mlx5_1/1"].status is Status.FAIL and "Disabled" in by_port["mlx5_1/1"].reason
    assert by_port["mlx5_2/1"].status is Status.FAIL and "Polling" in by_port["mlx5_2/1"].reason  # rdma_expected
    assert by_port["mlx5_3/1"].status is Status.FAIL and "rate 200" in by_port["mlx5_3/1"].reason
    assert by_port["mlx5_4/1"].status is Status.WARN and "symbol_error 3" in by_port["mlx5_4/1"].reason
    assert by_port["mlx5_5/1"].status is Status.FAIL and "cable" in by_port["mlx5_5/1"].remediation


def test_without_rdma_expected_a_down_port_only_warns(tmp_path):
    tree = ib_port(FakeTree(tmp_path), state="1: DOWN", phys="2: Polling", layer="Ethernet")
    spec = spec_with()
    spec["gpu"]["rdma_expected"] = False
    assert health_ib.run(spec, tree.node())[0].status is Status.WARN
