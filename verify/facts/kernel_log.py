"""The NVIDIA driver's records in the kernel log: Xid events and GPUs lost from the bus, per PCI address.

`dmesg --kernel` is read whole (no --level filter: the driver's printk level for Xid lines is not
documented, and the whole ring is a few hundred KiB); `journalctl -k -b` is the fallback where
dmesg is absent or refused. What each record means is judged in verify.checks.health_xid.

Only the driver's own records count: the message must START with "NVRM: " right after the kernel
record's prefix. Another subsystem's message that quotes a user-chosen name ("usb 1-1: Product: NVRM: Xid
...") never does, so nobody can plant an Xid on a shared node by naming a device or a process.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional

from verify.facts.pci import short_bdf
from verify.node import Node

SOURCES = (["dmesg", "--kernel"], ["journalctl", "-k", "-b", "--no-pager", "-q"])

# The record prefixes seen in real logs (tests/fixtures/node/health/public/README.md, h100x1/, h200x2/):
#   dmesg                 "[ 8213.402117] "                      boot-relative seconds
#   dmesg -T              "[Thu Apr  4 18:03:56 2024] "          local time
#   dmesg --time-format iso  "2024-11-15T12:02:03,470068+00:00 "
#   dmesg --decode        "kern  :warn  : " before either stamp
#   dmesg -r              "<4>" before the stamp
#   journalctl -k         "Nov 15 12:02:03 host kernel: ", short-iso "2024-11-15T12:02:03+0000 host kernel: ",
#                         or "kernel: " alone where the stamp and host were cut
# and bare "NVRM: " at the start of a line (a log with no prefix at all).
_UPTIME = r"\[\s*(?P<uptime>\d+\.\d+)\]"
_LOCAL_T = r"\[(?P<local_t>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]"
_ISO = r"(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
_SYSLOG = r"(?P<syslog>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)"
_DMESG = rf"(?:<\d>)?(?:[a-z]+\s*:[a-z]+\s*: )?(?:(?:{_UPTIME}|{_LOCAL_T}|{_ISO}) )?"
_JOURNAL = rf"(?:(?:{_SYSLOG}|{_ISO.replace('iso', 'jiso')}) \S+ )?kernel: "
_RECORD = re.compile(rf"^(?:{_JOURNAL}|{_DMESG})NVRM: (?P<message>.*)$")
# A multi-line printk: dmesg and journalctl indent the lines after the first.
_CONTINUATION = re.compile(r"^\s+NVRM: (?P<message>.*)$")

_XID = re.compile(r"^Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),\s*(.*)")
# Lost GPUs, as open-gpu-kernel-modules prints them (tests/fixtures/node/health/README.md cites where):
# at probe, rm_is_supported_device's "NVRM: The NVIDIA GPU dddd:bb:dd.f" + "(PCI ID: ...) installed in
# this system has" + "fallen off the bus and is not responding to commands." (one printk, three lines;
# dmesg prefixes or indents each); at run time osHandleGpuLost's "NVRM: GPU dddd:bb:dd.f: GPU has
# fallen off the bus." (after its Xid 79, which already FAILs that GPU).
_BUS = r"([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_LOST_PROBE = re.compile(r"^The NVIDIA GPU " + _BUS + r"\b")
_LOST_PROBE_END = "fallen off the bus and is not responding to commands"
_LOST_RUNTIME = re.compile(r"^GPU " + _BUS + r": GPU has fallen off the bus")


@dataclass(frozen=True)
class DriverRecord:
    """One kernel log line the NVIDIA driver printed, with when it was printed where the prefix says."""
    message: str  # from "NVRM: " on
    line: str  # the whole line, stripped
    uptime_s: Optional[float] = None  # dmesg's boot-relative stamp
    utc: Optional[datetime] = None  # a wall-clock stamp, as UTC
    continuation: bool = False  # an indented line of the record above


@dataclass(frozen=True)
class XidEvent:
    bus: str
    code: int
    record: DriverRecord


def _wall_clock(match: re.Match, now: Optional[datetime] = None) -> Optional[datetime]:
    """The record's wall-clock stamp as UTC; local-time stamps are read in this host's zone."""
    iso = match.group("iso") or match.group("jiso")
    try:
        if iso:
            text = iso.replace(",", ".").replace("Z", "+00:00")
            text = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", text)  # +0000 -> +00:00 (Python 3.9's fromisoformat)
            stamp = datetime.fromisoformat(text)
            return (stamp if stamp.tzinfo else stamp.astimezone()).astimezone(timezone.utc)
        if match.group("local_t"):
            local = datetime.strptime(match.group("local_t"), "%a %b %d %H:%M:%S %Y").astimezone()
            return local.astimezone(timezone.utc)
        if match.group("syslog"):
            # syslog stamps carry no year: this year, or last year if that would be in the future
            now = now or datetime.now(timezone.utc)
            stamp = datetime.strptime(f"{now.year} {match.group('syslog')}", "%Y %b %d %H:%M:%S").astimezone()
            if stamp.astimezone(timezone.utc) > now + timedelta(days=1):
                stamp = stamp.replace(year=now.year - 1)
            return stamp.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None
    return None


def driver_records(log: str) -> list:
    """The NVIDIA driver's lines of a kernel log, in order; every other subsystem's line is left out."""
    records: list = []
    previous_was_driver = False
    for line in log.splitlines():
        match = _RECORD.match(line)
        if match:
            uptime = match.group("uptime")
            records.append(DriverRecord(match.group("message"), line.strip(),
                                        float(uptime) if uptime else None, _wall_clock(match)))
            previous_was_driver = True
            continue
        follow = _CONTINUATION.match(line) if previous_was_driver else None
        if follow:
            last = records[-1]
            records.append(DriverRecord(follow.group("message"), line.strip(), last.uptime_s, last.utc, True))
            continue
        previous_was_driver = False
    return records


def _bus(text: str) -> Optional[str]:
    try:
        return short_bdf(text)
    except ValueError:
        return None  # a malformed address: not a record we can place on a GPU


def xid_events(log: str) -> list:
    """Kernel log text -> [XidEvent] for each Xid the driver printed (its own record, never a quote)."""
    events = []
    for record in driver_records(log):
        match = None if record.continuation else _XID.match(record.message)
        bus = _bus(match.group(1)) if match else None
        if bus:
            events.append(XidEvent(bus, int(match.group(2)), record))
    return events


def parse_xids(log: str) -> dict:
    """Kernel log text -> {bus id: {xid: (count, last line)}}."""
    found: dict = defaultdict(dict)
    for event in xid_events(log):
        count, _ = found[event.bus].get(event.code, (0, ""))
        found[event.bus][event.code] = (count + 1, event.record.line)
    return dict(found)


def lost_events(log: str) -> list:
    """Kernel log text -> [(bus id, the message on one line, DriverRecord)] for "fallen off the bus" messages."""
    found = []
    records = driver_records(log)
    for i, record in enumerate(records):
        if record.continuation:
            continue
        probe, runtime = _LOST_PROBE.match(record.message), _LOST_RUNTIME.match(record.message)
        if probe:
            # the message's own three lines only (continuations, or lines of the same stamp): the next record
            # may be about another GPU
            lines = [record.line] + [r.line for r in records[i + 1:i + 3]
                                     if r.continuation or (r.uptime_s, r.utc) == (record.uptime_s, record.utc)]
            message = " ".join(lines)
            if _LOST_PROBE_END not in message:
                continue
            bus = _bus(probe.group(1))
        elif runtime:
            bus, message = _bus(runtime.group(1)), record.line
        else:
            continue
        if bus:
            found.append((bus, message, record))
    return found


def parse_lost(log: str) -> dict:
    """Kernel log text -> {bus id: (count, the message on one line)} for "fallen off the bus" messages."""
    found: dict = {}
    for bus, message, _ in lost_events(log):
        count, _ = found.get(bus, (0, ""))
        found[bus] = (count + 1, message)
    return found


def boot_time_utc(node: Node, now: datetime) -> Optional[datetime]:
    """When this boot started (now minus /proc/uptime), to place dmesg's boot-relative stamps; None unreadable."""
    text = node.read("/proc/uptime") or ""
    try:
        return now - timedelta(seconds=float(text.split()[0]))
    except (ValueError, IndexError, OverflowError):
        return None


def when_utc(record: DriverRecord, boot_utc: Optional[datetime]) -> Optional[datetime]:
    """When the driver printed the record, as UTC; None where neither its stamp nor the boot time tells."""
    if record.utc is not None:
        return record.utc
    if record.uptime_s is not None and boot_utc is not None:
        return boot_utc + timedelta(seconds=record.uptime_s)
    return None


MEMO_KEY = "kernel_log"


def read_kernel_log(node: Node, fresh: bool = False) -> tuple:
    """(text, source) or (None, why not); read once per run (node.memo) unless `fresh` (a burn's after-reading)."""
    if not fresh and MEMO_KEY in node.memo:
        return node.memo[MEMO_KEY]
    node.memo[MEMO_KEY] = found = _read_kernel_log(node)
    return found


def _read_kernel_log(node: Node) -> tuple:
    failures = []
    for argv in SOURCES:
        out = node.run(argv, timeout_s=10.0)
        if out.ok:
            return out.stdout, " ".join(argv)
        if not out.missing:
            failures.append(f"{argv[0]}: {(out.stderr.strip() or f'exit {out.returncode}').splitlines()[0][:120]}")
    return None, "; ".join(failures) or "neither dmesg nor journalctl is installed"
