"""The pcie checks on the real Node over fake sysfs trees whose bridges carry config space built from real
lspci captures (tests/fixtures/node/pcie/README.md), and the 1x H100 machine's own sysfs layout."""
from __future__ import annotations

import re
import struct
from pathlib import Path

from tests.helpers.fake_node import FakeTree, desired_state
from verify.checks import pcie_path
from verify.facts import pci_path
from verify.result import Status

PCIE = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "pcie"
ACS_ON = (PCIE / "lspci-vvv-amd-gpp-bridge-acs-on.txt").read_text()
ACS_OFF_ROOT_PORT = (PCIE / "lspci-vv-root-port-acs-off.txt").read_text()
ACS_SH_OFF = (PCIE / "nccl-606-acs-sh-acs-off.txt").read_text()
BITS = {name: bit for name, bit, _ in pci_path.ACS_BITS}


def spec(pcie: dict = None, **sections) -> dict:
    """The test desired state plus a pcie section as templates/desired_state.json.j2 would render it."""
    found = desired_state(**sections)
    if pcie is not None:
        found["pcie"] = dict(pcie_path.DEFAULTS, **pcie)
    return found


def flags(text: str, register: str) -> int:
    line = re.search(rf"{register}:\s*(.*)", text).group(1)
    return sum(BITS[word[:-1]] for word in line.split() if word.endswith("+"))


def config_space(offset: int, capability: int, control: int, port_type: int = 6) -> bytes:
    """4 KiB config space: a PCIe capability (port type) at 0x40 and an ACS extended capability at
    `offset`, behind one other extended capability at 0x100 (as real bridges chain them)."""
    data = bytearray(4096)
    struct.pack_into("<HH", data, 0, 0x8086, 0x1234)
    struct.pack_into("<H", data, 0x06, 0x10)  # status: capabilities list
    data[0x34] = 0x40
    data[0x40], data[0x41] = 0x10, 0x00
    struct.pack_into("<H", data, 0x42, 0x2 | port_type << 4)
    if offset != 0x100:
        struct.pack_into("<I", data, 0x100, 0x0001 | 1 << 16 | offset << 20)  # AER, next -> ACS
    struct.pack_into("<I", data, offset, 0x000D | 1 << 16)
    struct.pack_into("<HH", data, offset + 4, capability, control)
    return bytes(data)


def from_lspci(text: str, port_type: int = 6) -> bytes:
    offset = int(re.search(r"Capabilities: \[([0-9a-f]+) v1\] Access Control Services", text).group(1), 16)
    return config_space(offset, flags(text, "ACSCap"), flags(text, "ACSCtl"), port_type)


def from_acs_sh(line: str) -> bytes:
    """NCCL's acs.sh line '0000:00:07.1 (ecap 000d @2a0) @2a6 0000': offset and control register."""
    offset, control = re.search(r"@([0-9a-f]+)\) @[0-9a-f]+ ([0-9a-f]{4})", line).groups()
    return config_space(int(offset, 16), flags(ACS_ON, "ACSCap"), int(control, 16))


def device(tree: FakeTree, chain: list, address: str, vendor="0x10de", klass="0x030200") -> None:
    """A device under the bridges of `chain` (root port first), linked from /sys/bus/pci/devices."""
    real = "/sys/devices/pci0000:00/" + "/".join(chain + [address])
    tree.write(f"{real}/vendor", f"{vendor}\n").write(f"{real}/class", f"{klass}\n")
    for depth, bdf in enumerate(chain + [address]):
        link = f"/sys/bus/pci/devices/{bdf}"
        if not (tree.root / link.lstrip("/")).exists():
            tree.link(link, "../../../devices/pci0000:00/" + "/".join((chain + [address])[:depth + 1]))


def bridge_config(tree: FakeTree, chain: list, config: bytes) -> None:
    path = tree.root / ("sys/devices/pci0000:00/" + "/".join(chain)).lstrip("/") / "config"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(config)


def two_gpus_under_a_switch(tmp_path, downstream_config: bytes) -> FakeTree:
    """Root port 0000:00:01.0 > switch upstream 0000:01:00.0 > downstream ports 0000:02:00.0 / 02:01.0 > GPUs."""
    tree = FakeTree(tmp_path)
    device(tree, ["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"], "0000:03:00.0")
    device(tree, ["0000:00:01.0", "0000:01:00.0", "0000:02:01.0"], "0000:04:00.0")
    bridge_config(tree, ["0000:00:01.0"], from_lspci(ACS_OFF_ROOT_PORT, port_type=4))
    bridge_config(tree, ["0000:00:01.0", "0000:01:00.0"], config_space(0x100, 0, 0, port_type=5))
    for port in ("0000:02:00.0", "0000:02:01.0"):
        bridge_config(tree, ["0000:00:01.0", "0000:01:00.0", port], downstream_config)
    return tree


def by_id(results) -> dict:
    return {r.check_id: r for r in results}


def test_a_redirect_on_bridge_fails_naming_bridge_and_bits_when_the_role_owns_acs(tmp_path):
    tree = two_gpus_under_a_switch(tmp_path, from_lspci(ACS_ON))
    results = by_id(pcie_path.run(spec({"enabled": True, "acs_disable": True}), tree.node()))
    failed = results["pcie.acs.0000:02:00.0"]
    assert failed.status is Status.FAIL
    assert "SrcValid, ReqRedir, CmpltRedir, UpstreamFwd" in failed.reason and "0000:02:00.0" in failed.reason
    assert "switch downstream port" in failed.reason and "GPU 0000:03:00.0" in failed.reason
    assert failed.observed.startswith("SrcValid+ TransBlk- ReqRedir+")
    assert results["pcie.acs.0000:00:01.0"].status is Status.PASS  # the root port's bits are all off
    assert results["pcie.acs.0000:01:00.0"].status is Status.PASS


def test_the_healthy_twin_passes(tmp_path):
    tree = two_gpus_under_a_switch(tmp_path, from_acs_sh(ACS_SH_OFF.splitlines()[0]))
    results = pcie_path.run(spec({"enabled": True}), tree.node())
    assert [r.status for r in results if r.check_id.startswith("pcie.acs.")] == [Status.PASS] * 4


def test_without_the_role_a_redirect_is_a_warn_naming_the_variable(tmp_path):
    tree = two_gpus_under_a_switch(tmp_path, from_lspci(ACS_ON))
    warned = by_id(pcie_path.run(desired_state(), tree.node()))["pcie.acs.0000:02:01.0"]
    assert warned.status is Status.WARN and "pcie_enabled: true" in warned.remediation
    assert warned.details["action"] == "watch"


def test_the_path_of_every_gpu_is_in_the_report(tmp_path):
    tree = two_gpus_under_a_switch(tmp_path, from_lspci(ACS_ON))
    path = by_id(pcie_path.run(desired_state(), tree.node()))["pcie.path.0000:03:00.0"]
    assert path.observed == ("pci0000:00 > 0000:00:01.0 (root port) > 0000:01:00.0 (switch upstream port) > "
                             "0000:02:00.0 (switch downstream port) > 0000:03:00.0")
    assert path.details["hops"][3]["acs_offset"] == "0x2a0"


def test_one_gpu_and_no_nic_expects_no_peer_traffic_and_a_vm_skips(tmp_path):
    tree = FakeTree(tmp_path / "one")
    device(tree, ["0000:00:01.0"], "0000:01:00.0")
    bridge_config(tree, ["0000:00:01.0"], from_lspci(ACS_ON, port_type=4))
    acs = by_id(pcie_path.run(desired_state(), tree.node()))["pcie.acs"]
    assert acs.status is Status.SKIP and "no peer traffic expected" in acs.reason
    vm = two_gpus_under_a_switch(tmp_path / "vm", from_lspci(ACS_ON))
    vm.write("/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor lahf_lm\n")
    results = by_id(pcie_path.run(spec({"enabled": True}), vm.node()))
    assert results["pcie.acs"].status is Status.SKIP and "hypervisor flag" in results["pcie.acs"].reason
    assert results["pcie.iommu"].status is Status.SKIP


def test_config_space_cut_at_256_bytes_skips_asking_for_root(tmp_path):
    tree = two_gpus_under_a_switch(tmp_path, from_lspci(ACS_ON)[:256])
    skipped = by_id(pcie_path.run(desired_state(), tree.node()))["pcie.acs.0000:02:00.0"]
    assert skipped.status is Status.SKIP and "run as root" in skipped.reason


def test_the_gpu_machines_own_layout_gpu_on_the_root_bus(tmp_path):
    """tests/fixtures/node/health/h100x1/sysfs: path=/sys/devices/pci0000:00/0000:00:06.0, no bridge."""
    capture = (Path(__file__).resolve().parents[1] / "fixtures/node/health/h100x1/sysfs/0000:00:06.0.txt").read_text()
    fields = dict(line.split("=", 1) for line in capture.splitlines() if "=" in line)
    tree = FakeTree(tmp_path)
    tree.write(f"{fields['path']}/vendor", fields["vendor"] + "\n").write(f"{fields['path']}/class",
                                                                         fields["class"] + "\n")
    tree.link("/sys/bus/pci/devices/0000:00:06.0", "../../.." + fields["path"][len("/sys"):])
    tree.write("/proc/cpuinfo", "flags\t\t: fpu sse2 hypervisor\n")
    results = by_id(pcie_path.run(desired_state(), tree.node()))
    assert results["pcie.path.0000:00:06.0"].observed == "pci0000:00 > 0000:00:06.0"
    assert results["pcie.acs"].status is Status.SKIP and results["pcie.iommu"].status is Status.SKIP


def iommu(tmp_path, group_type: str, cmdline: str) -> FakeTree:
    tree = two_gpus_under_a_switch(tmp_path, from_lspci(ACS_OFF_ROOT_PORT))
    tree.write("/proc/cmdline", cmdline).mkdir("/sys/class/iommu/dmar0")
    for group, gpu in ((7, "0000:03:00.0"), (8, "0000:04:00.0")):
        tree.write(f"/sys/kernel/iommu_groups/{group}/type", f"{group_type}\n")
        tree.link(f"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:0{group - 7}.0/{gpu}/iommu_group",
                  f"../../../../../../kernel/iommu_groups/{group}")
    return tree


def test_iommu_translated_fails_where_the_role_asks_pt_and_passthrough_passes(tmp_path):
    wanted = spec({"enabled": True, "iommu": "pt"})
    translated = by_id(pcie_path.run(wanted, iommu(tmp_path / "a", "DMA-FQ", "ro quiet\n").node()))["pcie.iommu"]
    assert translated.status is Status.FAIL and translated.observed == "translated" and "DMA-FQ" in translated.reason
    passthrough = by_id(pcie_path.run(wanted, iommu(tmp_path / "b", "identity", "ro iommu=pt\n").node()))["pcie.iommu"]
    assert passthrough.status is Status.PASS and passthrough.observed == "pt"
    rdma = desired_state(gpu={"rdma_expected": True})
    unowned = by_id(pcie_path.run(rdma, iommu(tmp_path / "c", "DMA", "ro\n").node()))["pcie.iommu"]
    assert unowned.status is Status.WARN and "pcie_iommu: pt" in unowned.remediation


def test_a_looping_capability_list_is_refused_not_followed_forever():
    data = bytearray(4096)
    struct.pack_into("<I", data, 0x100, 0x0001 | 0x100 << 20)
    try:
        pci_path.find_ext_capability(bytes(data), pci_path.ACS_CAP_ID)
    except pci_path.PciConfigError as exc:
        assert "loops" in str(exc)
    else:
        raise AssertionError("a loop was followed")
