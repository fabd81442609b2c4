"""PCIe AER on the path of every GPU and RDMA NIC: the kernel's AER records (kernel log) and its AER counters
(sysfs aer_dev_fatal / aer_dev_nonfatal / aer_dev_correctable), each attributed to the GPU or NIC behind the
device or port that reported it, through the PCI path verify.facts.pci_path reads (root port, switch ports,
the device itself). One result per GPU / NIC: `health.aer.<address>`.

Verdicts (verify.judging.kernel_faults, cited there): an uncorrectable error, fatal or not, on the device or on
a port of its path, in the log since the lookback start or counted in sysfs since boot, is FAIL (reboot: the
link or the device is in an unknown state; "can't recover" and "device recovery failed" are named; a surprise
link down or a completion timeout is the GPU lost from the bus: reseat, RMA if it recurs). Corrected errors are
a rate: since the last run where one is known (node.memo["previous_counters"], the run's history or the
scheduler's state), else since boot (/proc/uptime); above DCGM's 8 a minute a WARN (watch), never a FAIL; one
corrected error is nothing. A node whose kernel keeps no AER counters and whose log cannot be read: SKIP.
The sysfs counts are since boot, so an uncorrectable count keeps failing until the node reboots (the action).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from verify.checks.common import result, skip
from verify.checks.health_common import (
    PREVIOUS_COUNTERS,
    RESEAT,
    ROLE,
    interval_min,
)
from verify.checks.health_xid import lookback, seconds
from verify.facts import aer
from verify.facts.kernel_log import boot_time_utc, kernel_records, read_kernel_log, when_utc
from verify.facts.pci import gpu_indices, short_bdf
from verify.facts.pci_path import read_paths
from verify.judging import kernel_faults, verdicts
from verify.node import Node
from verify.result import Status

JUDGED_DRIVERS = ("nvidia", "mlx5_core")  # a log read without sysfs paths: the devices these drivers name
# Either driver loaded (the NVIDIA driver's own proc file, or the module in sysfs)
DRIVER_MARKERS = ("/proc/driver/nvidia/version", *(f"/sys/module/{driver}" for driver in JUDGED_DRIVERS))


def _uptime_min(node: Node) -> Optional[float]:
    text = node.read("/proc/uptime") or ""
    try:
        value = float(text.split()[0]) / 60.0
    except (ValueError, IndexError):
        return None
    return value if value > 0 else None


def watched_hops(paths: list, events: list) -> dict:
    """{endpoint address: (its name's role, [addresses on its path: the device and its bridges])}; from the
    log alone (no sysfs path) each device the GPU / NIC drivers name, with the ports that reported in the same
    burst."""
    if paths:
        return {p.address: (p.role, [hop.address for hop in p.hops if hop.kind != "root complex"]) for p in paths}
    found: dict = {}
    for event in events:
        if event.driver in JUDGED_DRIVERS:
            role = "GPU" if event.driver == "nvidia" else "NIC"
            hops = found.setdefault(event.device, (role, [event.device]))[1]
            when = seconds(event)
            for other in events:  # undated records cannot be told apart: one burst (kernel_faults.bursts)
                other_when = seconds(other)
                near = (when is None and other_when is None) or (
                    when is not None and other_when is not None and abs(other_when - when) <= kernel_faults.BURST_GAP_S)
                if other.driver == "pcieport" and (near or other.source == event.device) and other.device not in hops:
                    hops.append(other.device)
    return found


def _counters(node: Node, hops: list) -> dict:
    """{"<hop> <severity>": total since boot} over the path's devices that keep AER statistics."""
    found = {}
    for hop in hops:
        counts = aer.read_counters(node, hop)
        for severity in counts:
            found[f"{hop} {severity}"] = aer.total(counts, severity)
        for severity in (aer.FATAL, aer.NONFATAL):
            for named in aer.nonzero(counts, severity):
                found.setdefault("_named", []).append(f"{hop}: {named} ({severity})")
    return found


def corrected_rate(node: Node, check_id: str, counters: dict) -> tuple:
    """(errors per minute or None, words) of the corrected counters: since the last run where its reading is
    known, else since boot."""
    now = sum(v for k, v in counters.items() if k.endswith(f" {aer.CORRECTED}"))
    before = (node.memo.get(PREVIOUS_COUNTERS) or {}).get(check_id) or {}
    earlier = sum(v for k, v in before.items() if k.endswith(f" {aer.CORRECTED}") and isinstance(v, int))
    minutes = interval_min(node)
    if before and minutes is not None and 0 <= earlier <= now:
        rate = (now - earlier) / max(minutes, 1.0)
        return rate, f"{now - earlier} corrected in {minutes:.1f} min since the last run ({now} since boot)"
    uptime = _uptime_min(node)
    if uptime is None:
        return None, f"{now} corrected since boot"
    return now / max(uptime, 1.0), f"{now} corrected since boot ({uptime:.0f} min)"


def judge_endpoint(address: str, name: str, hops: list, events: list, counters: dict, rate: Optional[float],
                   rate_words: str, since: str, source: str):
    check_id = f"health.aer.{address}"
    events = aer.distinct(events)
    named = counters.pop("_named", [])
    parts, classes, lost = [], [], False
    uncorrectable = [e for e in events if e.uncorrectable]
    if uncorrectable:
        said: dict = {}
        for event in uncorrectable:
            what = event.recovery or f"{event.severity} error"
            errors = f" [{', '.join(event.errors)}]" if event.errors else ""
            key = f"{what} at {event.device} ({event.driver}){errors}"
            said[key] = said.get(key, 0) + 1
            lost = lost or any(e in kernel_faults.AER_LOST_ERRORS for e in event.errors)
        parts.extend(f"{key} x{count}" if count > 1 else key for key, count in said.items())
        classes.append(kernel_faults.AER_UNCORRECTABLE_ACTION)
    uncorrected_counts = {k: v for k, v in counters.items() if not k.endswith(f" {aer.CORRECTED}") and v}
    if uncorrected_counts:
        listed = named or [f"{k} {v}" for k, v in uncorrected_counts.items()]
        parts.append("sysfs counts since boot: " + ", ".join(listed))
        lost = lost or any(any(e in n for e in kernel_faults.AER_LOST_ERRORS) for n in named)
        classes.append(kernel_faults.AER_UNCORRECTABLE_ACTION)
    corrected_lines = [e for e in events if e.severity == aer.CORRECTED]
    if rate is None and corrected_lines:  # no counters: the log's corrected records over their span
        times = [seconds(e) for e in corrected_lines if seconds(e) is not None]
        span_min = (max(times) - min(times)) / 60.0 if len(times) > 1 else 0.0
        rate = len(corrected_lines) / max(span_min, 1.0)
        rate_words = f"{len(corrected_lines)} corrected record(s) in the log over {span_min:.1f} min"
    storm = rate is not None and kernel_faults.AER_CORRECTED_PER_MIN.judge(rate)[0] is Status.FAIL
    if storm:
        parts.append(f"corrected-error storm: {rate:.1f}/min ({rate_words})")
        classes.append(kernel_faults.AER_STORM_ACTION)
    action = verdicts.worst(classes)
    details = {"address": address, "path": hops, "source": source, "counters": counters,
               "corrected_per_min": round(rate, 3) if rate is not None else None,
               "threshold": kernel_faults.AER_CORRECTED_PER_MIN.to_dict(), verdicts.ACTION_KEY: action,
               "records": [e.line for e in events][:20]}
    expected = (f"no uncorrectable AER error since {since}; "
                f"corrected {kernel_faults.AER_CORRECTED_PER_MIN.describe()}/min")
    if not parts:
        observed = rate_words if rate is not None else "no AER record"
        return result(check_id, ROLE, Status.PASS, expected, observed, details=details)
    fix = verdicts.remedy(action, short_bdf(address), name)
    if lost:
        fix += "; " + RESEAT.format(what=name)
    said = "; ".join(parts)
    return result(check_id, ROLE, verdicts.status_of(action), expected, said,
                  f"{name}: PCIe AER {said} since {since} ({source})", details=details, fix=fix)


def run(spec: dict, node: Node) -> list:
    paths = read_paths(node)
    if not paths and not any(node.exists(marker) for marker in DRIVER_MARKERS):
        # No GPU or RDMA NIC on the bus and neither driver loaded: no device the log could name was ever here
        # (a GPU lost from the bus leaves its driver loaded, and the log is read then).
        return [skip("health.aer", ROLE, "no NVIDIA GPU and no RDMA NIC on the PCI bus, and neither driver loaded")]
    log, source = read_kernel_log(node)
    since, since_what = lookback(node)
    boot = boot_time_utc(node, datetime.now(timezone.utc)) if since else None
    events = []
    if log:
        for event in aer.aer_events(kernel_records(log)):
            when = when_utc(event, boot)
            if since is None or when is None or when >= since:
                events.append(event)
    endpoints = watched_hops(paths, events)
    if not endpoints:
        return [skip("health.aer", ROLE, "no NVIDIA GPU and no RDMA NIC on the PCI bus")]
    indices = gpu_indices(node) if any(role == "GPU" for role, _ in endpoints.values()) else {}
    results = []
    for address, (role, hops) in sorted(endpoints.items()):
        counters = _counters(node, hops) if paths else {}
        if log is None and not counters:
            results.append(skip(f"health.aer.{address}", ROLE,
                                f"the kernel log is unreadable ({source}) and sysfs keeps no AER counters"))
            continue
        index = indices.get(short_bdf(address)) if role == "GPU" else None
        name = f"GPU {index} ({address})" if index is not None else f"{role} {address}"
        mine = [e for e in events if e.device in hops or e.source in hops]
        check_id = f"health.aer.{address}"
        rate, words = corrected_rate(node, check_id, counters) if any(
            k.endswith(f" {aer.CORRECTED}") for k in counters) else (None, "")
        results.append(judge_endpoint(address, name, hops, mine, counters, rate, words, since_what,
                                      source if log is not None else "sysfs"))
    return results
