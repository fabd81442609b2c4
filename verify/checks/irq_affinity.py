"""NIC interrupts pinned to CPUs of the NIC's own NUMA node (network_irq_affinity)."""
from __future__ import annotations

from verify.checks.common import result, role_disabled, section, skip
from verify.checks.interfaces import nothing_selected_reason, select_interfaces
from verify.kernel_rules import format_cpulist
from verify.node import Node, parse_cpulist
from verify.result import Status

ROLE = "network"


def judge(name: str, numa_node: int, local_cpus: set, irq_cpus: dict):
    """irq_cpus: irq number -> set of CPUs it may run on."""
    check_id = f"network.irq_affinity.{name}"
    off_node = {irq: cpus - local_cpus for irq, cpus in irq_cpus.items() if cpus - local_cpus}
    expected = f"NUMA node {numa_node} CPUs {format_cpulist(local_cpus)}"
    details = {"irqs": {str(irq): format_cpulist(cpus) for irq, cpus in sorted(irq_cpus.items())}}
    if not off_node:
        return result(check_id, ROLE, Status.PASS, expected, f"{len(irq_cpus)} IRQs on node {numa_node}",
                      details=details)
    sample = ", ".join(f"{irq}->{format_cpulist(cpus)}" for irq, cpus in sorted(off_node.items())[:4])
    return result(
        check_id, ROLE, Status.FAIL, expected, f"{len(off_node)} of {len(irq_cpus)} IRQs off node",
        f"{name}: IRQs may run on CPUs outside NUMA node {numa_node} ({sample})",
        "network_irq_affinity", details,
    )


def check_interface(node: Node, name: str):
    check_id = f"network.irq_affinity.{name}"
    device = f"/sys/class/net/{name}/device"
    numa_text = node.read_value(f"{device}/numa_node")
    if numa_text is None:
        return skip(check_id, ROLE, f"{name} has no PCI device NUMA information (virtual NIC?)")
    numa_node = int(numa_text)
    if numa_node < 0:
        return skip(check_id, ROLE, f"{name}: the firmware reports no NUMA node (numa_node = -1)")
    local_text = node.read_value(f"{device}/local_cpulist")
    if local_text is None:
        local_text = node.read_value(f"/sys/devices/system/node/node{numa_node}/cpulist") or ""
    local_cpus = parse_cpulist(local_text)
    irqs = [int(n) for n in node.listdir(f"{device}/msi_irqs") if n.isdigit()]
    if not irqs:
        return skip(check_id, ROLE, f"{name} has no MSI interrupts to pin")
    irq_cpus = {}
    for irq in irqs:
        text = node.read_value(f"/proc/irq/{irq}/smp_affinity_list")
        if text is not None:
            irq_cpus[irq] = parse_cpulist(text)
    if not irq_cpus:
        return skip(check_id, ROLE, f"{name}: /proc/irq/N/smp_affinity_list is not readable")
    return judge(name, numa_node, local_cpus, irq_cpus)


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, "network.irq_affinity")
    if disabled:
        return [disabled]
    network = section(spec, ROLE)
    if not network.get("irq_affinity"):
        return [skip("network.irq_affinity", ROLE, "network_irq_affinity is false: IRQs are not pinned")]
    selection = select_interfaces(network, node)
    if not selection.present:
        return [skip("network.irq_affinity", ROLE, nothing_selected_reason(selection))]
    return [check_interface(node, name) for name in selection.present]
