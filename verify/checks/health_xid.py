"""Xid errors from the kernel log: one result per GPU that logged any, judged by NVIDIA's Xid catalog.

`dmesg --kernel` is read whole; `journalctl -k -b` is the fallback where dmesg is absent or refused
(verify.facts.kernel_log, which keeps only the driver's own records). The ring buffer can wrap on a
long-lived node: then only the Xids still in it are seen (the result says which source was read).

Each code gets its action class from verify.judging.xid_catalog (NVIDIA's catalog, 172 codes); the class
sets the status (verify.judging.verdicts). An unknown code is WARN naming it; a code too long to be one
(a damaged line) is WARN "unreadable". Xid 154 carries the driver's own recovery action. Xid 74 and the
NVLink5 codes name their link in the message ("link 3").

Incidents are counted as the vendor counts them: one failure is one incident however many lines it prints
(Xid 48 + 63 + a 94 per channel, or a GSP timeout repeated every few seconds), and a reset-gpu fault
RECURS only when it is seen again after the GPU was reset or the driver reloaded
(verify.facts.kernel_log.resets: the driver's load banner, and the GPU identity line the driver prints
before the first Xid after each (re)initialisation). A reboot starts a new log: the scheduler hook keeps
FAIL-class events open across runs until the boot id changes. A recurrence is drain-rma.

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
from verify.facts.kernel_log import (
    boot_time_utc,
    driver_faults,
    lost_events,
    read_kernel_log,
    resets,
    sxid_events,
    unread_lines,
    when_utc,
    xid_events,
)
from verify.facts.pci import gpu_indices, live_reason, nvidia_gpus_on_bus, short_bdf
from verify.judging import kernel_faults, verdicts
from verify.judging.xid_catalog import lookup, recovery_action
from verify.node import Node
from verify.result import Status

RECOVERY = 154  # "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
UNREADABLE = "unreadable"  # the key and words for an Xid line whose code is too long to be one


def classify(code: Optional[int], line: str) -> tuple:
    """(action class, what the code is) for one Xid line (code None: unreadable, a damaged line)."""
    if code is None:
        return verdicts.WATCH, "Xid code unreadable (a damaged line)"
    entry = lookup(code)
    if entry is None:
        return verdicts.WATCH, "not in NVIDIA's Xid catalog"
    if code == RECOVERY:
        action = recovery_action(line) or verdicts.WATCH
        named = re.search(r"\bto\s+(0x[0-9a-fA-F]+\s*\([^)]*\))", line)
        return action, f"recovery action {named.group(1) if named else 'unreadable'}"
    return entry.action, entry.name


def incidents(events: list, marks: list = ()) -> int:
    """How many separate incidents `events` (one GPU's) are: the number of spans between that GPU's resets
    and driver loads (`marks`: kernel_log.resets) that hold any of them; 0 for none. Lines with no reset
    between them are one failure however far apart they are."""
    if not events:
        return 0
    bus = events[0].bus
    cuts = sorted(seq for seq, marked in marks if marked is None or marked == bus)
    spans = {sum(1 for cut in cuts if cut < event.record.seq) for event in events}
    return len(spans)


def seconds(record) -> Optional[float]:
    """When a record was printed, in seconds on the log's own clock (boot-relative where the log has it,
    else its wall clock); None undated. Bursts and repeats are measured on it."""
    if record.uptime_s is not None:
        return record.uptime_s
    return record.utc.timestamp() if record.utc is not None else None


def repeats_of(events: list) -> int:
    """How many bursts of one fault (kernel_faults.bursts) the events make within the repeat window."""
    return kernel_faults.repeats([seconds(e.record) for e in events])


def repeat_words(count: int) -> str:
    return (f"repeated: {count} bursts within {kernel_faults.REPEAT_WINDOW_S / 3600:g} h with no reset between "
            f"({kernel_faults.REPEAT_SOURCE})")


def _code_key(code: Optional[int]) -> str:
    return UNREADABLE if code is None else str(code)


def judge_events(bus: str, events: list, gpu_index, source: str, lost: tuple = None,
                 earlier: list = (), since: str = "boot", marks: list = ()):
    """One GPU's Xid events since the lookback start (`earlier`: those before it, kept as history; `lost`:
    (count, message) when the driver printed it lost from the bus without an Xid 79; `marks`: the log's
    resets, kernel_log.resets) -> one result."""
    name = f"GPU {gpu_index} ({bus})" if gpu_index is not None else f"GPU at {bus}"
    index = gpu_index if gpu_index is not None else bus
    by_code: dict = {}
    for event in events:
        by_code.setdefault(event.code, []).append(event)
    resettable = [e for e in events if classify(e.code, e.record.line)[0] == verdicts.RESET_GPU]
    seen_in = incidents(resettable, marks)
    xids, parts, classes, process, bursts = {}, [], [], None, {}
    for code, seen in sorted(by_code.items(), key=lambda item: (item[0] is None, item[0] or 0)):
        last = seen[-1].record.line
        action, what = classify(code, last)
        if seen_in > 1 and action == verdicts.RESET_GPU:
            action, what = verdicts.recurred(action, seen_in), f"{what}; {verdicts.RECURS} ({seen_in} incidents)"
        if action == verdicts.RESET_GPU:
            repeated = repeats_of(seen)
            bursts[_code_key(code)] = repeated
            if repeated >= kernel_faults.REPEAT_BURSTS:
                action, what = kernel_faults.REPEAT_ACTION, f"{what}; {repeat_words(repeated)}"
        if action == verdicts.APPLICATION:
            named = next((verdicts.process_named(e.record.line) for e in reversed(seen)
                          if verdicts.process_named(e.record.line)), None)
            process = process or named
            what += f"; application {named}" if named else "; application"
        links = sorted({e.link for e in seen if e.link is not None})
        if links:
            what += f"; NVLink {', '.join(str(link) for link in links)}"
        classes.append(action)
        parts.append(f"Xid {_code_key(code)} x{len(seen)} ({what}: {action})")
        xids[_code_key(code)] = {"count": len(seen), "last": last, verdicts.ACTION_KEY: action}
        if links:
            xids[_code_key(code)]["links"] = links
    details = {"bus_id": bus, "source": source, "xids": xids}
    if resettable:
        details["incidents"] = seen_in
    if bursts:
        details["bursts"] = bursts
    if earlier:
        details["before_lookback"] = {_code_key(e.code): {"count": sum(x.code == e.code for x in earlier),
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


def judge_sxids(bus: str, events: list, source: str, since: str = "boot"):
    """One NVSwitch's SXid events -> one result. NVIDIA Fabric Manager User Guide ("NVSwitch SXid errors"):
    a fatal SXid leaves the switch's links unusable until the GPUs and switches are reset together, which on
    a baseboard means draining and restarting the node (reboot, RMA if it recurs); non-fatal ones are
    logged and counted (watch). Each event is named by switch, PCI bus id, code and link."""
    heads = [e for e in events if e.fatal is not None]
    fatal = [e for e in heads if e.fatal]
    action = verdicts.REBOOT if fatal else verdicts.WATCH
    by_code: dict = {}
    for event in heads:
        by_code.setdefault((event.code, event.fatal), set()).add(event.link)
    parts = [f"SXid {code} {'fatal' if is_fatal else 'non-fatal'} on link(s) "
             f"{', '.join(str(link) for link in sorted(links))}" for (code, is_fatal), links in sorted(by_code.items())]
    switch = events[0].switch
    details = {"bus_id": bus, "switch": switch, "source": source, verdicts.ACTION_KEY: action,
               "sxids": {str(code): {"fatal": is_fatal, "links": sorted(links)}
                         for (code, is_fatal), links in sorted(by_code.items())},
               "lines": len(events)}
    said = "; ".join(parts) or f"{len(events)} SXid detail line(s)"
    return result(f"health.nvswitch.sxid.{bus}", ROLE, verdicts.status_of(action), f"no SXid since {since}", said,
                  f"NVSwitch {switch} ({bus}): {said} since {since} ({source})", details=details,
                  fix=verdicts.remedy(action, bus, f"NVSwitch {switch} ({bus})"))


NODE = "node"  # the target of a driver failure whose lines name no GPU


def attribute(faults: list, xid_buses: dict) -> dict:
    """{bus or NODE: [DriverFault]}: a line that names no GPU joins a GPU-named line in the same burst (of its
    own family first, then the nearest; undated: within three lines); a GSP timeout on a GPU that logged Xid
    119/120 is that Xid's own line (judged in its row, never twice). xid_buses: bus -> its Xid codes."""
    named = [f for f in faults if f.bus]
    found: dict = {}
    for fault in faults:
        target = fault.bus
        if target is None:
            near = [f for f in named if _same_burst(f.record, fault.record)]
            near.sort(key=lambda f: (f.fault.family != fault.fault.family, abs(f.record.seq - fault.record.seq)))
            target = near[0].bus if near else None
        if fault.fault.key == "gsp-timeout":
            gsp_xids = [bus for bus, codes in xid_buses.items() if codes & GSP_XIDS]
            if (target and target in gsp_xids) or (target is None and gsp_xids):
                continue
        found.setdefault(target or NODE, []).append(fault)
    return found


GSP_XIDS = {119, 120}


def _same_burst(one, other) -> bool:
    """Two records of one failure: within the burst gap, or (undated) within three lines of each other."""
    first, second = seconds(one), seconds(other)
    if first is not None and second is not None:
        return abs(first - second) <= kernel_faults.BURST_GAP_S
    return abs(one.seq - other.seq) <= 3


def missing_gpus(node: Node, indices: dict) -> list:
    """GPUs on the PCI bus that the driver's list (NVML / nvidia-smi) lacks: a GPU that never initialised.
    [] when the driver's list is not at hand (nothing can be told missing then)."""
    if not indices:
        return []
    return [address for address in nvidia_gpus_on_bus(node) if short_bdf(address) not in indices]


def judge_driver_faults(target: str, faults: list, indices: dict, source: str, since: str, missing: list):
    """One GPU's (or the node's) driver failures that are not Xids -> one result, each class with its action
    (verify.judging.kernel_faults.DRIVER_FAULTS) and the repeat rule for reset-class faults."""
    by_class: dict = {}
    for fault in faults:
        by_class.setdefault(fault.fault.key, []).append(fault)
    parts, classes, found = [], [], {}
    for key, seen in by_class.items():
        fault = seen[0].fault
        action, what, repeated = fault.action, fault.what, repeats_of(seen)
        if fault.reset_class and repeated >= kernel_faults.REPEAT_BURSTS:
            action, what = kernel_faults.REPEAT_ACTION, f"{what}; {repeat_words(repeated)}"
        classes.append(action)
        parts.append(f"{what} x{len(seen)} ({action})")
        found[key] = {"count": len(seen), "bursts": repeated, "last": seen[-1].record.line[:300],
                      verdicts.ACTION_KEY: action, "source": fault.source}
    details = {"source": source, "faults": found}
    if target == NODE:
        name, index = "the node", "<each GPU>"
        if missing:
            details["missing_from_driver"] = missing
            parts.append(f"{len(missing)} GPU(s) on the PCI bus missing from the driver's list: {', '.join(missing)}")
            classes.append(verdicts.REBOOT)
    else:
        details["bus_id"] = target
        index = indices.get(target)
        name = f"GPU {index} ({target})" if index is not None else f"GPU at {target}"
        index = index if index is not None else target
    action = verdicts.worst(classes)
    details[verdicts.ACTION_KEY] = action
    said = "; ".join(parts)
    return result(f"health.gpu.driver.{target}", ROLE, verdicts.status_of(action),
                  f"no driver failure since {since}", said, f"{name}: {said} since {since} ({source})",
                  details=details, fix=verdicts.remedy(action, index, name))


def unread_result(lines: list, source: str):
    """WARN naming how many lines that name a judged record could not be read, with two of them: a log the
    reader cannot place is never judged healthy in silence."""
    examples = [line[:160] for line in lines[:2]]
    return result("health.kernel_log.unread", ROLE, Status.WARN, "every kernel record read",
                  f"{len(lines)} line(s) unread",
                  f"{len(lines)} lines could not be read ({source}): their prefix is none the reader knows, e.g. "
                  + "; ".join(repr(e) for e in examples),
                  details={"count": len(lines), "examples": examples, "source": source,
                           verdicts.ACTION_KEY: verdicts.WATCH},
                  fix="the Xid / AER checks did not read these lines: read the log with dmesg or journalctl, or "
                      "report its format to tunefleet")


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
        marks = resets(log)
        results = [judge_events(bus, judged.get(bus, []), indices.get(bus), source, lost.get(bus),
                                earlier.get(bus, []), since_what, marks) for bus in buses]
    switches: dict = {}
    for event in sxid_events(log):
        if not is_history(event.record):
            switches.setdefault(event.bus, []).append(event)
    results += [judge_sxids(bus, events, source, since_what) for bus, events in sorted(switches.items())]
    faults = [f for f in driver_faults(log) if not is_history(f.record)]
    if faults:
        indices = gpu_indices(node)
        codes = {bus: {e.code for e in events} for bus, events in judged.items()}
        targets = attribute(faults, codes)
        missing = missing_gpus(node, indices) if NODE in targets else []
        results += [judge_driver_faults(target, found, indices, source, since_what, missing)
            for target, found in sorted(targets.items())]
    unread = unread_lines(log)
    if unread:
        results.append(unread_result(unread, source))
    if since:
        for each in results:
            each.details["lookback"] = {"since_utc": since.isoformat(), "source": since_what}
    return results
