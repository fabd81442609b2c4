"""irqbalance leaves the pinned NIC IRQs alone (network_irqbalance_mode: ban / stop / leave).

ban: a running irqbalance must have a --policyscript that bans every tuned NIC's PCI address;
stop: no irqbalance process may run. Read from /proc, so it also works under --root.

Any user can name a process "irqbalance" (comm) and pass it any arguments, and this check runs as
root: the daemon is told by what a user cannot fake (the process belongs to root, and its
executable is named irqbalance), and the policy script it names is read only when it is a
regular root-owned file of bounded size (verify.safe_io.read_trusted_file: no FIFO, no /dev/zero).
"""
from __future__ import annotations

import os
import shlex
from typing import Optional

from verify.checks.common import result, role_disabled, section, skip
from verify.checks.interfaces import interface_pci, select_interfaces
from verify.node import Node
from verify.result import Status
from verify.safe_io import read_trusted_file

ROLE = "network"
CHECK_ID = "network.irqbalance"
POLICY_MAX_BYTES = 64 * 1024  # the role's script is a few hundred bytes per NIC


def is_irqbalance(node: Node, pid: str) -> bool:
    """Root's irqbalance: /proc/PID belongs to root and its executable is named irqbalance. The
    comm decides only where the executable link cannot be read (verify not run as root, a fake
    tree): a process root owns got its name from root."""
    try:
        if os.stat(node.path(f"/proc/{pid}")).st_uid != 0:
            return False
    except OSError:
        return False
    try:
        exe = os.readlink(node.path(f"/proc/{pid}/exe"))
    except OSError:
        return (node.read_value(f"/proc/{pid}/comm") or "") == "irqbalance"
    return os.path.basename(exe.removesuffix(" (deleted)")) == "irqbalance"


def irqbalance_pids(node: Node) -> list:
    return [pid for pid in node.listdir("/proc") if pid.isdigit() and is_irqbalance(node, pid)]


def irqbalance_cmdline(node: Node) -> Optional[list]:
    """argv of a running irqbalance, or None when none runs."""
    for pid in irqbalance_pids(node):
        raw = node.read(f"/proc/{pid}/cmdline") or ""
        return [part for part in raw.split("\0") if part]
    return None


def read_policy(node: Node, script: str) -> tuple:
    """(text or None, why it was not read): only a regular, root-owned, bounded file (see above)."""
    try:
        return read_trusted_file(node.path(script), POLICY_MAX_BYTES), ""
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, exc.strerror or str(exc)


def policy_script(argv: list) -> Optional[str]:
    for index, arg in enumerate(argv):
        if arg.startswith("--policyscript="):
            return arg.split("=", 1)[1]
        if arg in ("--policyscript", "-l") and index + 1 < len(argv):
            return argv[index + 1]
    return None


def judge_ban(argv: Optional[list], script_text: Optional[str], script: Optional[str], pci_addresses: list,
              unreadable: str = ""):
    expected = f"irqbalance bans {', '.join(pci_addresses)}"
    if argv is None:
        return result(CHECK_ID, ROLE, Status.PASS, expected, "irqbalance not running",
                      "irqbalance is not running: nothing moves the pinned IRQs")
    command = " ".join(shlex.quote(a) for a in argv)
    if not script:
        return result(CHECK_ID, ROLE, Status.FAIL, expected, command,
                      "irqbalance runs without --policyscript: it will move the pinned NIC IRQs",
                      "network_irqbalance_mode")
    if script_text is None and unreadable:
        return result(CHECK_ID, ROLE, Status.FAIL, expected, command,
                      f"irqbalance's policy script cannot be trusted: {unreadable}", "network_irqbalance_mode")
    if script_text is None:
        return result(CHECK_ID, ROLE, Status.FAIL, expected, command,
                      f"irqbalance's policy script {script} does not exist", "network_irqbalance_mode")
    unbanned = [pci for pci in pci_addresses if pci not in script_text]
    if unbanned:
        return result(CHECK_ID, ROLE, Status.FAIL, expected, command,
                      f"policy script {script} does not ban {', '.join(unbanned)}", "network_irqbalance_mode")
    return result(CHECK_ID, ROLE, Status.PASS, expected, command)


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, CHECK_ID)
    if disabled:
        return [disabled]
    network = section(spec, ROLE)
    mode = network.get("irqbalance_mode") or "leave"
    if not network.get("irq_affinity"):
        return [skip(CHECK_ID, ROLE, "network_irq_affinity is false: no pinned IRQs to protect")]
    if mode == "leave":
        return [skip(CHECK_ID, ROLE, "network_irqbalance_mode is leave")]
    if mode == "stop":
        if irqbalance_cmdline(node) is None:
            return [result(CHECK_ID, ROLE, Status.PASS, "irqbalance stopped", "not running")]
        return [result(CHECK_ID, ROLE, Status.FAIL, "irqbalance stopped", "running",
                       "irqbalance is running and will move the pinned NIC IRQs", "network_irqbalance_mode")]
    pci_addresses = [p for p in (interface_pci(node, n) for n in select_interfaces(network, node).present) if p]
    if not pci_addresses:
        return [skip(CHECK_ID, ROLE, "no tuned PCI NIC: nothing for irqbalance to ban")]
    argv = irqbalance_cmdline(node)
    script = policy_script(argv) if argv else None
    text, unreadable = read_policy(node, script) if script else (None, "")
    return [judge_ban(argv, text, script, pci_addresses, unreadable)]
