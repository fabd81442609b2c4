"""Xid errors from the kernel log: one result per GPU that logged any, judged by NVIDIA's Xid catalog.

`dmesg --kernel` is read whole; `journalctl -k -b` is the fallback where dmesg is absent or refused
(verify.facts.kernel_log, which keeps only the driver's own records). The ring buffer can wrap on a
long-lived node: then only the Xids still in it are seen (the result says which source was read).

Each code gets its action class from verify.judging.xid_catalog (NVIDIA's catalog, 172 codes); the class
sets the status (verify.judging.verdicts). An unknown code is WARN naming it. Xid 154 carries the
driver's own recovery action. A reset-gpu fault seen in more than one incident since the lookback start
was not cured by a reset: drain-rma.

Lookback: `node.memo["lookback"]` = {"since_utc": ISO-8601 or None, "source": "last verify run <stamp>" |
"operator ack <stamp>: <reason>" | "boot"} (set by the run that knows the node's history). Events before
since_utc stay in the result as history (`details["before_lookback"]`) and never fail; without it,
everything since boot is judged.

The same log also tells of a GPU lost from the bus with no Xid line: the driver's probe finds its
registers reading all-ones and prints a three-line message instead (the GPU is then absent from
nvidia-smi, so no other check names it).
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Optional

from verify.checks.common import result, skip
from verify.checks.health_common import RESEAT, ROLE
from verify.facts.kernel_log import XidEvent, boot_time_utc, lost_events, read_kernel_log, when_utc, xid_events
from verify.facts.pci import gpu_indices, live_reason, nvidia_gpus_on_bus
from verify.judging import verdicts
from verify.judging.xid_catalog import lookup, recovery_action
from verify.node import Node
from verify.result import Status

RECOVERY = 154  # "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
# One fault prints several lines within a second (Xid 48 + 63 + a 94 per channel); lines further apart
# than this are separate incidents, so a second incident means the fault came back.
INCIDENT_GAP_S = 60.0


def classify(code: int, line: str) -> tuple:
    """(action class, what the code is) for one Xid line."""
    entry = lookup(code)
    if entry is None:
        return verdicts.WATCH, "not in NVIDIA's Xid catalog"
    if code == RECOVERY:
        action = recovery_action(line) or verdicts.WATCH
        named = re.search(r"\bto\s+(0x[0-9a-fA-F]+\s*\([^)]*\))", line)
        return action, f"recovery action {named.group(1) if named else 'unreadable'}"
    return entry.action, entry.name


def _moment(event: XidEvent) -> Optional[float]:
    record = event.record
    if record.uptime_s is not None:
        return record.uptime_s
    return record.utc.timestamp() if record.utc is not None else None


def incidents(events: list) -> int:
    """Separate incidents among events (more than INCIDENT_GAP_S apart); undated lines count as one."""
    moments = sorted(m for m in (_moment(e) for e in events) if m is not None)
    count = 1 if moments or events else 0
    for before, after in zip(moments, moments[1:]):
        count += after - before > INCIDENT_GAP_S
    return count


def judge_events(bus: str, events: list, gpu_index, source: str, lost: tuple = None,
                 earlier: list = (), since: str = "boot"):
    """One GPU's Xid events since the lookback start (`earlier`: those before it, kept as history; `lost`:
    (count, message) when the driver printed it lost from the bus without an Xid 79) -> one result."""
    name = f"GPU {gpu_index} ({bus})" if gpu_index is not None else f"GPU at {bus}"
    index = gpu_index if gpu_index is not None else bus
    by_code: dict = {}
    for event in events:
        by_code.setdefault(event.code, []).append(event)
    resets = [e for e in events if classify(e.code, e.record.line)[0] == verdicts.RESET_GPU]
    recurring = incidents(resets) > 1
    xids, parts, classes, process = {}, [], [], None
    for code, seen in sorted(by_code.items()):
        last = seen[-1].record.line
        action, what = classify(code, last)
        if recurring and action == verdicts.RESET_GPU:
            action, what = verdicts.recurred(action, incidents(resets)), f"{what}; {verdicts.RECURS}"
        if action == verdicts.APPLICATION:
            named = next((verdicts.process_named(e.record.line) for e in reversed(seen)
                          if verdicts.process_named(e.record.line)), None)
            process = process or named
            what += f"; application {named}" if named else "; application"
        classes.append(action)
        parts.append(f"Xid {code} x{len(seen)} ({what}: {action})")
        xids[str(code)] = {"count": len(seen), "last": last, verdicts.ACTION_KEY: action}
    details = {"bus_id": bus, "source": source, "xids": xids}
    if earlier:
        details["before_lookback"] = {str(e.code): {"count": sum(x.code == e.code for x in earlier),
                                                    "last": e.record.line} for e in earlier}
    if lost:
        # lost with no Xid 79: at probe (the load or reboot did not bring it back), so reseat, then RMA
        parts.insert(0, f"fallen off the bus x{lost[0]} (driver message, no Xid 79: {verdicts.DRAIN_RMA})")
        details["bus_lost"] = {"count": lost[0], "last": lost[1]}
        classes.append(verdicts.DRAIN_RMA)
    action = verdicts.worst(classes)
    details[verdicts.ACTION_KEY] = action
    expected = f"no Xid since {since}"
    if not parts:  # only history before the lookback start
        return result(f"health.gpu.xid.{bus}", ROLE, Status.PASS, expected, "none",
                      f"{name}: {len(earlier)} Xid line(s) before the lookback start only", details=details)
    fix = RESEAT.format(what=name) if lost else verdicts.remedy(action, index, name, process)
    return result(f"health.gpu.xid.{bus}", ROLE, verdicts.status_of(action), expected, ", ".join(parts),
                  f"{name} logged {', '.join(parts)} since {since} ({source})", details=details, fix=fix)


def lookback(node: Node) -> tuple:
    """(since as UTC or None, what it is) from node.memo["lookback"]; (None, "boot") when none is given."""
    given = node.memo.get("lookback") or {}
    stamp = given.get("since_utc") if isinstance(given, dict) else None
    if not stamp:
        return None, "boot"
    try:
        since = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None, f"boot (lookback {str(stamp)[:40]!r} unreadable)"
    since = since if since.tzinfo else since.replace(tzinfo=timezone.utc)
    return since, str(given.get("source") or f"lookback {stamp}")


def run(spec: dict, node: Node) -> list:
    reason = live_reason(node, "the kernel log")
    if not reason and not node.exists("/proc/driver/nvidia/version") and not nvidia_gpus_on_bus(node):
        reason = "no NVIDIA GPU on the PCI bus and no NVIDIA driver loaded"
    if reason:
        return [skip("health.gpu.xid", ROLE, reason)]
    log, source = read_kernel_log(node)
    if log is None:
        return [skip("health.gpu.xid", ROLE, f"kernel log unreadable: {source}")]
    since, since_what = lookback(node)
    boot = boot_time_utc(node, datetime.now(timezone.utc)) if since else None

    def is_history(record) -> bool:
        when = when_utc(record, boot)
        return since is not None and when is not None and when < since  # undated: judged (cannot prove it old)

    judged, earlier = {}, {}
    for event in xid_events(log):
        (earlier if is_history(event.record) else judged).setdefault(event.bus, []).append(event)
    lost: dict = {}
    for bus, message, record in lost_events(log):
        if not is_history(record):
            lost[bus] = (lost.get(bus, (0, ""))[0] + 1, message)
    # a GPU lost at run time also logged Xid 79: already a FAIL (reboot, then RMA) under that code
    lost = {bus: seen for bus, seen in lost.items() if not any(e.code == 79 for e in judged.get(bus, []))}
    buses = sorted(set(judged) | set(lost) | set(earlier))
    if not buses:
        results = [result("health.gpu.xid", ROLE, Status.PASS, f"no Xid since {since_what}", "none",
                          details={"source": source})]
    else:
        indices = gpu_indices(node)
        results = [judge_events(bus, judged.get(bus, []), indices.get(bus), source, lost.get(bus),
                                earlier.get(bus, []), since_what) for bus in buses]
    if since:
        for each in results:
            each.details["lookback"] = {"since_utc": since.isoformat(), "source": since_what}
    return results
