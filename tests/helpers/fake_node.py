"""Fake /proc, /sys and /etc trees for the checks, built file by file in a pytest tmp_path."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from verify.node import Node

SPEC_FILE = Path(__file__).resolve().parent.parent / "fixtures" / "node" / "desired_state.json"


def desired_state(**section_overrides) -> dict:
    """The test desired state; `network={"mtu": 1500}` updates keys inside a section."""
    spec = json.loads(SPEC_FILE.read_text(encoding="utf-8"))
    for name, values in section_overrides.items():
        spec[name] = dict(copy.deepcopy(spec[name]), **values)
    return spec


class FakeTree:
    def __init__(self, root: Path):
        self.root = Path(root)

    def write(self, absolute: str, text: str) -> FakeTree:
        path = self.root / absolute.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return self

    def mkdir(self, absolute: str) -> FakeTree:
        (self.root / absolute.lstrip("/")).mkdir(parents=True, exist_ok=True)
        return self

    def link(self, absolute: str, target: str) -> FakeTree:
        path = self.root / absolute.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
        return self

    def nic(self, name: str, mtu: int = 9000, numa: int = 0, local_cpus: str = "0-3", irqs: dict = None,
            driver: str = "mlx5_core", pci: str = "0000:17:00.0") -> FakeTree:
        """A PCI NIC with MSI IRQs; irqs maps irq number -> smp_affinity_list text."""
        device = f"/sys/devices/pci0000:00/{pci}"
        self.write(f"{device}/numa_node", f"{numa}\n").write(f"{device}/local_cpulist", f"{local_cpus}\n")
        self.link(f"{device}/driver", f"../../../bus/pci/drivers/{driver}")
        self.write(f"/sys/class/net/{name}/mtu", f"{mtu}\n")
        self.link(f"/sys/class/net/{name}/device", f"../../../devices/pci0000:00/{pci}")
        for irq, affinity in (irqs or {}).items():
            self.write(f"{device}/msi_irqs/{irq}", "msix\n")
            self.write(f"/proc/irq/{irq}/smp_affinity_list", f"{affinity}\n")
        return self

    def node(self, runner=None, live=None) -> Node:
        if runner is None:
            return Node(root=str(self.root), live=live)
        return Node(root=str(self.root), runner=runner, live=live)


def sysctl_node(tmp_path: Path, host: str) -> tuple:
    """(desired state file, tree) of a node named `host` whose sysctl values meet a desired state that checks
    sysctl only (every other role off): a run over it has nothing of its own to FAIL."""
    off = {"enabled": False}
    spec = Path(tmp_path) / "desired.json"
    spec.write_text(json.dumps(desired_state(network=off, storage=off, gpu=off, memory=off, limits=off, cpu=off)))
    tree = FakeTree(Path(tmp_path) / "root").write("/etc/hostname", f"{host}\n")
    tree.write("/proc/sys/net/core/rmem_max", "536870912\n").write("/proc/sys/vm/swappiness", "0\n")
    tree.write("/proc/sys/net/ipv4/tcp_rmem", "4096\t87380\t268435456\n")
    return spec, tree
