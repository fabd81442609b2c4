"""The NVIDIA driver's records in the kernel log: Xid events and GPUs lost from the bus, per PCI address.

`dmesg --kernel` is read whole (no --level filter: the driver's printk level for Xid lines is not
documented, and the whole ring is a few hundred KiB); `journalctl -k -b` is the fallback where
dmesg is absent or refused. What each record means is judged in verify.checks.health_xid.
"""
from __future__ import annotations

import re
from collections import defaultdict

from verify.facts.pci import short_bdf
from verify.node import Node

SOURCES = (["dmesg", "--kernel"], ["journalctl", "-k", "-b", "--no-pager", "-q"])
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
