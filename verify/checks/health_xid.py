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
from collections import defaultdict

from verify.checks.common import result, skip
from verify.checks.health_common import (
    DRAIN_RMA,
    REBOOT,
    RESEAT,
    RESET_GPU,
    ROLE,
    gpu_indices,
    live_reason,
    nvidia_gpus_on_bus,
    short_bdf,
)
from verify.node import Node
from verify.result import Status

SOURCES = (["dmesg", "--kernel"], ["journalctl", "-k", "-b", "--no-pager", "-q"])
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
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),\s*(.*)")
# Lost GPUs, as open-gpu-kernel-modules prints them (tests/fixtures/node/health/README.md cites where):
# at probe, rm_is_supported_device's "NVRM: The NVIDIA GPU dddd:bb:dd.f" + "(PCI ID: ...) installed in
# this system has" + "fallen off the bus and is not responding to commands." (one printk, three lines;
# dmesg prefixes or indents each); at run time osHandleGpuLost's "NVRM: GPU dddd:bb:dd.f: GPU has
# fallen off the bus." (after its Xid 79, which already FAILs that GPU).
_BUS = r"([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_LOST_PROBE = re.compile(r"NVRM: The NVIDIA GPU " + _BUS + r"\b")
_LOST_PROBE_END = "fallen off the bus and is not responding to commands"
_LOST_RUNTIME = re.compile(r"NVRM: GPU " + _BUS + r": GPU has fallen off the bus")


def parse_xids(log: str) -> dict:
    """Kernel log text -> {bus id: {xid: (count, last line)}}."""
    found: dict = defaultdict(dict)
    for line in log.splitlines():
        match = _XID.search(line)
        if not match:
            continue
        bus, code = short_bdf(match.group(1)), int(match.group(2))
        count, _ = found[bus].get(code, (0, ""))
        found[bus][code] = (count + 1, line.strip())
    return dict(found)


def parse_lost(log: str) -> dict:
    """Kernel log text -> {bus id: (count, the message on one line)} for "fallen off the bus" messages."""
    found: dict = {}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        probe, runtime = _LOST_PROBE.search(line), _LOST_RUNTIME.search(line)
        if probe:
            # the message's own three lines only: the next NVRM message may be about another GPU
            message = " ".join(part.strip() for part in lines[i:i + 3])
            if _LOST_PROBE_END not in message:
                continue
            bus = short_bdf(probe.group(1))
        elif runtime:
            bus, message = short_bdf(runtime.group(1)), line.strip()
        else:
            continue
        count, _ = found.get(bus, (0, ""))
        found[bus] = (count + 1, message)
    return found


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


def read_kernel_log(node: Node) -> tuple:
    """(text, source) or (None, why not)."""
    failures = []
    for argv in SOURCES:
        out = node.run(argv, timeout_s=10.0)
        if out.ok:
            return out.stdout, " ".join(argv)
        if not out.missing:
            failures.append(f"{argv[0]}: {(out.stderr.strip() or f'exit {out.returncode}').splitlines()[0][:120]}")
    return None, "; ".join(failures) or "neither dmesg nor journalctl is installed"


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
