"""Planted faults for `tunefleet verify --inject` (verify/inject.py): each drill is the real 1x H100
capture (tests/fixtures/node/health/h100x1: its commands, exactly as the health checks ran them there)
with the one output that shows the fault replaced by a real published faulty output or line
(tests/fixtures/node/health/public/, README there), moved onto the H100's own GPU (bus 0000:00:06.0) and,
for kernel-log lines, onto dmesg's own timestamp form. Each drill names the verdict it must reach.

    python3 -m tests.helpers.drills OUT     # one injection directory per drill under OUT, and OUT/expected.json

The same directories drive the CLI tests here (over a tree rebuilt from the capture's sysfs dumps) and
the drills on the GPU machine (live: tests/device/verdict_drills.sh).
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tests.helpers.fake_node import FakeTree

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
PUBLIC = HEALTH / "public"
MACHINE = HEALTH / "h100x1"
BUS = "0000:00:06"  # the H100's GPU, as the driver's Xid line names it (no function)
COMMANDS = ("dmesg-kernel", "journalctl-k", "nvidia-smi-q", "nvlink-s", "nvlink-e")
# health_smi's query, whatever fields this version asks: the captured CSV is read by header name.
QUERY_MATCH = r"nvidia-smi --query-gpu=index,pci\.bus_id,name,ecc\.mode\.current,\S+ --format=csv"


@dataclass
class Expect:
    check_id: str
    status: str
    action: str = ""  # details["action"], "" when the row carries none


@dataclass
class Drill:
    name: str
    why: str
    plant: Callable[[Path], None]
    expect: list = field(default_factory=list)
    plant_tree: Optional[Callable[[Path], None]] = None  # a fault in the files under --root (no live run)


def public_lines(name: str, pattern: str) -> list:
    """The lines of a public capture whose text matches `pattern`, with their own prefixes removed."""
    found = []
    for line in (PUBLIC / name).read_text().splitlines():
        at = line.find("NVRM: ")
        if at >= 0 and re.search(pattern, line):
            found.append(line[at:])
    assert found, f"{name}: no line matches {pattern!r}"
    return found


def on_this_gpu(message: str) -> str:
    return re.sub(r"PCI:[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}", f"PCI:{BUS}", message)


def append_kernel_lines(directory: Path, messages: list, start_s: float = 10.0) -> None:
    """The messages after the capture's own log, stamped as dmesg stamps its records (seconds since boot)."""
    log = directory / "dmesg-kernel.stdout"
    stamped = [f"[{start_s + i * 0.000100:12.6f}] {m}" for i, m in enumerate(messages)]
    log.write_text(log.read_text() + "\n".join(stamped) + "\n")


def set_query_field(directory: Path, column: str, value: str) -> None:
    """One column of the captured health query's GPU row set to `value` (the rest of the row stays real)."""
    path = directory / "query-gpu.stdout"
    header, row, *rest = path.read_text().splitlines()
    names = [c.strip() for c in header.split(",")]
    cells = [c.strip() for c in row.split(",")]
    cells[names.index(column)] = value
    path.write_text("\n".join([header, ", ".join(cells), *rest]) + "\n")


def plant_xid79(directory: Path) -> None:
    append_kernel_lines(directory, [on_this_gpu(m) for m in public_lines(
        "kernel-log_faulty_akash209-xid79-535.161.07.txt", r"Xid .*: 79,|fallen off the bus")])


def plant_xid48_63(directory: Path) -> None:
    append_kernel_lines(directory, [on_this_gpu(m) for m in public_lines(
        "kernel-log_faulty_gpud-xid48-63-94.txt", r"Xid .*: (48|63),")])


def plant_xid79_in_user_text(directory: Path) -> None:
    """An unprivileged user's process name echoed by another subsystem: never a driver record."""
    xid = on_this_gpu(public_lines("kernel-log_faulty_akash209-xid79-535.161.07.txt", r"Xid .*: 79,")[0])
    append_kernel_lines(directory, [f"usb 1-1: Product: {xid}", f'audit: type=1400 audit(1700000000.123:42): '
                                    f'apparmor="DENIED" operation="open" comm="{xid}"'])


def plant_remap_pending(directory: Path) -> None:
    set_query_field(directory, "remapped_rows.pending", "Yes")


def plant_remap_failure(directory: Path) -> None:
    set_query_field(directory, "remapped_rows.failure", "Yes")


def plant_nvlink_inactive(directory: Path) -> None:
    """GPU 0's 18 NV18 links as the 2x H200 machine printed them, two of them `<inactive>` as the V100 in
    Azure/azhpc-diagnostics#73 printed its dead links (the H200's name kept: its model has 18 links)."""
    block = (HEALTH / "h200x2" / "cmd" / "nvlink-s.stdout").read_text().split("GPU 1:")[0]
    lines = block.splitlines()
    for number in (3, 5):
        lines = [re.sub(rf"(Link {number}:).*$", r"\1 <inactive>", line) if re.search(rf"Link {number}:", line)
                 else line for line in lines]
    (directory / "nvlink-s.stdout").write_text("\n".join(lines) + "\n")


def plant_ib_ports_down(tree_root: Path) -> None:
    """/sys/class/infiniband from the real ibstat of an H100 RoCE node with two ConnectX-7 ports Down /
    Disabled beside six Active at 400 and two ConnectX-6 Dx at 100 (leptonai/gpud testdata)."""
    ibstat_to_sysfs((PUBLIC / "ibstat_faulty_gpud-h100-roce-cx7-2down.txt").read_text(), FakeTree(tree_root))


def plant_pcie_notice(directory: Path) -> None:
    """The kernel's bandwidth notice for a GPU wired x4 in an x16 slot (linux-surface#374), as it logged it."""
    lines = [line[line.index("]") + 2:] if line.startswith("[") else line for line in
             (PUBLIC / "kernel-log_faulty_linux-surface374-pcie-bw-limited-gpu-x4.txt").read_text().splitlines()
             if "available PCIe bandwidth" in line]
    append_kernel_lines(directory, lines)


def plant_gpu_behind_x4_port(tree_root: Path) -> None:
    """That GPU (10de:1c20 at 0000:02:00.0) behind its root port 0000:00:1c.4, wired x4."""
    pci_device_under_port(FakeTree(tree_root), "0000:02:00.0", "0000:00:1c.4", "8.0 GT/s PCIe", 4, "8.0 GT/s PCIe",
                          16, "0x10de", "0x030200", "8.0 GT/s PCIe", 4)


XID_ROW = f"health.gpu.xid.{BUS}.0"
DRILLS = (
    Drill("healthy", "the capture as taken: the healthy twin of every drill", lambda d: None,
          [Expect("health.gpu.xid", "PASS")]),
    Drill("xid79", "Xid 79 and the driver's 'GPU has fallen off the bus' (akash-network/support#209)",
          plant_xid79, [Expect(XID_ROW, "FAIL", "reboot")]),
    Drill("xid48_63", "Xid 48 (double-bit ECC) and 63 (row marked for remapping, 'reset gpu to activate') "
          "(leptonai/gpud testdata)", plant_xid48_63, [Expect(XID_ROW, "WARN", "reset-gpu")]),
    Drill("xid79_in_user_text", "Xid 79's text inside usb and audit messages (a user-chosen name)",
          plant_xid79_in_user_text, [Expect("health.gpu.xid", "PASS")]),
    Drill("remap_pending", "a row remap pending (applied at the next GPU reset)", plant_remap_pending,
          [Expect("health.gpu.memory.0", "WARN", "reset-gpu")]),
    Drill("remap_failure", "a row remapping failure (NVIDIA's RMA criterion)", plant_remap_failure,
          [Expect("health.gpu.memory.0", "FAIL", "drain-rma")]),
    Drill("nvlink_inactive", "two of an NV18 GPU's 18 links <inactive>", plant_nvlink_inactive,
          [Expect("health.nvlink.0", "FAIL", "reboot")]),
    Drill("ib_ports_down", "two ConnectX-7 ports Down beside their Active siblings; the slower ConnectX-6 Dx "
          "ports are their own group", lambda d: None,
          [Expect("health.ib.mlx5_5/1", "FAIL", "drain-rma"), Expect("health.ib.mlx5_11/1", "FAIL", "drain-rma"),
           Expect("health.ib.mlx5_0/1", "PASS")], plant_tree=plant_ib_ports_down),
    Drill("pcie_bandwidth_notice", "the kernel's 'available PCIe bandwidth, limited by ... x4 link at 0000:00:1c.4' "
          "for a GPU whose own link looks full", plant_pcie_notice,
          # the planted second GPU is on the bus but not in the H100 driver's list: presence says so too
          [Expect("health.pcie.bandwidth.0000:02:00.0", "WARN", "watch"), Expect("health.gpu.presence", "FAIL")],
          plant_tree=plant_gpu_behind_x4_port),
)


def make(drill: Drill, directory: Path) -> Path:
    """The injection directory of `drill`: the machine's captures with its fault planted."""
    directory.mkdir(mode=0o700, parents=True)
    for name in COMMANDS:
        for suffix in ("argv", "stdout", "stderr", "rc"):
            source = MACHINE / "cmd" / f"{name}.{suffix}"
            if source.exists():
                shutil.copy(source, directory / source.name)
    for suffix in ("stdout", "stderr", "rc"):
        shutil.copy(MACHINE / "cmd" / f"query-gpu.{suffix}", directory / f"query-gpu.{suffix}")
    (directory / "query-gpu.match").write_text(QUERY_MATCH + "\n")
    drill.plant(directory)
    return directory


def rebuild_sysfs(root: Path, capture: Path = MACHINE) -> FakeTree:
    """The files the health checks read on a captured machine, from its dumps: one sysfs/<device>.txt per
    PCI function and its parent ("path=<real path>" then "<file>=<value>"), linked from
    /sys/bus/pci/devices like the kernel's; /sys/class/infiniband from its `ls -la`; the driver banner
    and the kernel release (dmesg's first line)."""
    tree = FakeTree(root)
    tree.write("/proc/driver/nvidia/version", (capture / "proc_driver_nvidia_version.txt").read_text())
    banner = re.search(r"Linux version (\S+)", (capture / "cmd" / "dmesg-kernel.stdout").read_text())
    tree.write("/proc/sys/kernel/osrelease", banner.group(1) + "\n")  # the kernel the capture ran on
    for dump in sorted((capture / "sysfs").glob("*.txt")):
        text = dump.read_text()
        if dump.name == "infiniband_ls.txt":
            devices = [line.split()[-1] for line in text.splitlines()[1:] if line.split()[-1] not in (".", "..")]
            # A capture with HCAs brings ib_<device>_port<n>.txt too: rebuild its ports before accepting it.
            assert not devices, f"{dump.name}: RDMA devices {devices}; their ports are not rebuilt here yet"
            tree.mkdir("/sys/class/infiniband")
            continue
        assert not dump.name.startswith("ib_"), f"{dump.name}: no rebuild for HCA dumps yet"
        lines = text.splitlines()
        assert lines[0].startswith("path=/sys/devices/"), f"{dump.name}: first line {lines[0]!r}"
        real = lines[0].split("=", 1)[1]
        tree.mkdir(real)
        files = dict(line.split("=", 1) for line in lines[1:])
        for name, value in files.items():
            tree.write(f"{real}/{name}", f"{value}\n")
        if "vendor" in files:  # a PCI function (the host bridge directory pci0000:00 has no vendor file)
            tree.link(f"/sys/bus/pci/devices/{real.rsplit('/', 1)[1]}", "../../.." + real[len("/sys"):])
    return tree


# drivers/infiniband/core/sysfs.c: state_show "%d: %s" (ib_port_state_str), phys_state_show "%d: %s"
# (ib_port_phys_state_str), rate_show "%d%s Gb/sec (%dX%s)"; ibstat prints the names as below.
STATE = {"Down": "1: DOWN", "Initializing": "2: INIT", "Armed": "3: ARMED", "Active": "4: ACTIVE"}
PHYS = {"Sleep": "1: Sleep", "Polling": "2: Polling", "Disabled": "3: Disabled",
        "PortConfigurationTraining": "4: PortConfigurationTraining", "LinkUp": "5: LinkUp",
        "LinkErrorRecovery": "6: LinkErrorRecovery"}
SPEED_NAME = {400: " NDR", 200: " HDR", 100: " EDR", 50: " HDR", 40: " QDR", 25: " EDR", 10: ""}


def ibstat_to_sysfs(text: str, tree: FakeTree) -> FakeTree:
    """Each `CA 'name'` block of ibstat -> /sys/class/infiniband/<name>/{hca_type,fw_ver,ports/<n>/...}."""
    device = port = None
    for line in text.splitlines():
        ca = re.match(r"^CA '([^']+)'", line)
        if ca:
            device, port = ca.group(1), None
            continue
        key, _, value = line.strip().partition(":")
        value = value.strip()
        base = f"/sys/class/infiniband/{device}"
        if key == "CA type":
            tree.write(f"{base}/hca_type", value + "\n")
        elif key == "Firmware version":
            tree.write(f"{base}/fw_ver", value + "\n")
        elif re.match(r"^Port \d+$", key):
            port = int(key.split()[1])
        elif port is not None and key == "State":
            tree.write(f"{base}/ports/{port}/state", STATE[value] + "\n")
        elif port is not None and key == "Physical state":
            tree.write(f"{base}/ports/{port}/phys_state", PHYS[value] + "\n")
        elif port is not None and key == "Rate":
            rate = int(value)
            tree.write(f"{base}/ports/{port}/rate", f"{rate} Gb/sec (4X{SPEED_NAME.get(rate, '')})\n")
        elif port is not None and key == "Link layer":
            tree.write(f"{base}/ports/{port}/link_layer", value + "\n")
    return tree


def pci_device_under_port(tree: FakeTree, address: str, bridge: str, speed: str, width: int, max_speed: str,
                          max_width: int, vendor: str, klass: str, bridge_speed: str, bridge_width: int) -> FakeTree:
    """A PCI function behind a real (non-virtual) port, its links in the kernel's sysfs formats."""
    real = f"/sys/devices/pci0000:00/{bridge}/{address}"
    for name, value in (("current_link_speed", speed), ("current_link_width", width), ("vendor", vendor),
                        ("max_link_speed", max_speed), ("max_link_width", max_width), ("class", klass)):
        tree.write(f"{real}/{name}", f"{value}\n")
    tree.write(f"/sys/devices/pci0000:00/{bridge}/max_link_speed", f"{bridge_speed}\n")
    tree.write(f"/sys/devices/pci0000:00/{bridge}/max_link_width", f"{bridge_width}\n")
    tree.write(f"/sys/devices/pci0000:00/{bridge}/vendor", "0x8086\n")
    for name, target in ((address, f"pci0000:00/{bridge}/{address}"), (bridge, f"pci0000:00/{bridge}")):
        if not (tree.root / f"sys/bus/pci/devices/{name}").exists():  # several devices behind one bridge
            tree.link(f"/sys/bus/pci/devices/{name}", f"../../../devices/{target}")
    return tree


def judge(report: dict, expect: Expect) -> str:
    """'' when the report reached the expected verdict, else what it said instead."""
    rows = {r["check_id"]: r for r in report.get("results", [])}
    row = rows.get(expect.check_id)
    if row is None:
        near = sorted(k for k in rows if k.startswith(expect.check_id.rsplit(".", 2)[0]))
        return f"no row {expect.check_id} (rows: {near})"
    action = (row.get("details") or {}).get("action", "")
    if row["status"] != expect.status or (expect.action and action != expect.action):
        return f"{expect.check_id}: {row['status']} {action or '-'} ({row.get('reason', '')[:160]})"
    return ""


def live(drill: Drill) -> bool:
    """Whether the drill runs on a live node (its fault is in the commands' answers only)."""
    return drill.plant_tree is None


def main(argv: list) -> int:
    if len(argv) != 1:
        print("usage: python3 -m tests.helpers.drills OUT", file=sys.stderr)
        return 2
    out = Path(argv[0])
    expected = {}
    for drill in filter(live, DRILLS):
        make(drill, out / drill.name)
        expected[drill.name] = {"why": drill.why, "expect": [vars(e) for e in drill.expect]}
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"{len(DRILLS)} drills in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
