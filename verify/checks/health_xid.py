"""Xid errors since boot, from the kernel log: one result per GPU that logged any.

`dmesg --kernel` is read whole (no --level filter: the driver's printk level for Xid lines is not
documented, and the whole ring is a few hundred KiB); `journalctl -k -b` is the fallback where
dmesg is absent or refused. The ring buffer can wrap on a long-lived node: then only the Xids still
in it are seen (the result says which source was read).

The same log also tells of a GPU lost from the bus with no Xid line: the driver's probe finds its
registers reading all-ones and prints a three-line message instead (the GPU is then absent from
nvidia-smi, so no other check names it).
"""
from __future__ import annotations

import re

from verify.checks.common import result, skip
from verify.checks.health_common import DRAIN_RMA, REBOOT, RESEAT, RESET_GPU, ROLE
from verify.facts.kernel_log import parse_lost, parse_xids, read_kernel_log
from verify.facts.pci import gpu_indices, live_reason, nvidia_gpus_on_bus
from verify.node import Node
from verify.result import Status

# Xids that mean the GPU (or its memory / NVLink / bus) is unusable until reset, reboot or RMA:
# the list, from NVIDIA's Xid catalog resolution buckets (RESET_GPU / RESTART_BM / CONTACT_SUPPORT).
FATAL = {
    48: ("double-bit ECC error", RESET_GPU),
    63: ("ECC page retirement / row remapping event", RESET_GPU),
    64: ("ECC page retirement / row remapper failure", DRAIN_RMA),
    74: ("NVLink error", RESET_GPU),
    79: ("GPU has fallen off the bus", REBOOT),
    92: ("high single-bit ECC error rate", DRAIN_RMA),
    94: ("contained ECC error", RESET_GPU),
    95: ("uncontained ECC error", RESET_GPU),
    119: ("GSP RPC timeout", RESET_GPU),
    120: ("GSP error", RESET_GPU),
}
# Xid 154 carries the driver's own verdict: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)".
RECOVERY = 154
def _verdict(code: int, line: str) -> tuple:
    if code == RECOVERY:
        if re.search(r"to 0x0 \(None\)\s*$", line):
            return Status.WARN, "recovery action cleared", RESET_GPU
        return Status.FAIL, "the driver asks for a recovery action: " + line.rsplit(" to ", 1)[-1], RESET_GPU
    if code in FATAL:
        return Status.FAIL, FATAL[code][0], FATAL[code][1]
    return Status.WARN, "not fatal: application or driver level; watch for repeats", RESET_GPU


def judge_xids(bus: str, xids: dict, gpu_index, source: str, lost: tuple = None):
    """One GPU's Xids since boot (and `lost`: (count, message) when the driver printed it lost from the
    bus without an Xid 79) -> one result; a fatal code or a lost GPU is a FAIL."""
    name = f"GPU {gpu_index} ({bus})" if gpu_index is not None else f"GPU at {bus}"
    verdicts = {code: _verdict(code, line) for code, (_, line) in sorted(xids.items())}
    parts = [f"Xid {code} x{xids[code][0]} ({v[1]})" for code, v in verdicts.items()]
    details = {"bus_id": bus, "source": source,
               "xids": {str(code): {"count": count, "last": line} for code, (count, line) in sorted(xids.items())}}
    if lost:
        # lost with no Xid 79: at probe (the load or reboot did not bring it back), so reseat, then RMA
        parts.insert(0, f"fallen off the bus x{lost[0]} (driver message, no Xid 79)")
        details["bus_lost"] = {"count": lost[0], "last": lost[1]}
        status, fix = Status.FAIL, RESEAT
    else:
        status = Status.FAIL if any(v[0] is Status.FAIL for v in verdicts.values()) else Status.WARN
        fix = next(v[2] for v in verdicts.values() if v[0] is status)
    return result(f"health.gpu.xid.{bus}", ROLE, status, "no Xid since boot", ", ".join(parts),
                  f"{name} logged {', '.join(parts)} since boot ({source})",
                  details=details, fix=fix.format(index=gpu_index if gpu_index is not None else bus, what=name))


def run(spec: dict, node: Node) -> list:
    reason = live_reason(node, "the kernel log")
    if not reason and not node.exists("/proc/driver/nvidia/version") and not nvidia_gpus_on_bus(node):
        reason = "no NVIDIA GPU on the PCI bus and no NVIDIA driver loaded"
    if reason:
        return [skip("health.gpu.xid", ROLE, reason)]
    log, source = read_kernel_log(node)
    if log is None:
        return [skip("health.gpu.xid", ROLE, f"kernel log unreadable: {source}")]
    found = parse_xids(log)
    # a GPU lost at run time also logged Xid 79: already a FAIL (reboot, then RMA) under that code
    lost = {bus: seen for bus, seen in parse_lost(log).items() if 79 not in found.get(bus, {})}
    if not found and not lost:
        return [result("health.gpu.xid", ROLE, Status.PASS, "no Xid since boot", "none", details={"source": source})]
    indices = gpu_indices(node)
    return [judge_xids(bus, found.get(bus, {}), indices.get(bus), source, lost.get(bus))
            for bus in sorted(set(found) | set(lost))]
