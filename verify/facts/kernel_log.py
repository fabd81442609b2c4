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

from verify.facts.links import is_bandwidth_notice
from verify.facts.pci import short_bdf
from verify.node import Node

SOURCES = (["dmesg", "--kernel"], ["journalctl", "-k", "-b", "--no-pager", "-q"])

# The record prefixes util-linux's dmesg, journald and syslog daemons print before a kernel message, in
# the order they can stand (tests/fixtures/node/health/public/README.md cites a real line of each):
#   CRI container log   "2024-11-15T12:02:03.123456789Z stdout F "   (a node agent's log read back)
#   dmesg -r            "<4>"
#   dmesg --decode      "kern  :warn  : "                             (kernel facility only: see below)
#   a wall-clock or monotonic stamp, at most one of:
#     dmesg             "[ 8213.402117] "                             boot-relative seconds
#     dmesg -T          "[Thu Apr  4 18:03:56 2024] "                 local time
#     --time-format iso "2024-11-15T12:02:03,470068+00:00 "           (also journalctl -o short-iso[-precise])
#     journalctl -k     "Nov 15 12:02:03 " / "sep 03 13:25:15 "       syslog stamp, any locale's month
#     -o short-monotonic "[ 1843.308145] "
#   journal / syslog    "host kernel: " or "kernel: " (the stamp and host cut by the poster)
#   rsyslog kern.log    the kernel's own "[ 3224.864246] " after "kernel: "
#   CONFIG_PRINTK_CALLER "[ T1946] " / "[   C3] ": the thread or CPU that printed it
# and bare "NVRM: " at the start of a line (a log with no prefix at all). Every number is bounded.
_CRI = r"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) [FP] )"
_PRIORITY = r"(?:<\d{1,3}>)"
# dmesg --decode names the facility: only "kern" is the kernel's own; "user"/"syslog"/... were written to
# /dev/kmsg from userspace (gpud's fault injector prints "syslog:err   : ... NVRM: Xid ...")
_DECODE = r"(?:(?P<facility>[a-z]{1,8})\s{0,8}:\s{0,8}[a-z]{1,8}\s{0,8}: )"
_UPTIME = r"\[\s{0,12}(?P<uptime>\d{1,10}\.\d{1,9})\]"
_LOCAL_T = r"\[(?P<local_t>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]"
_ISO = r"(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)"
_SYSLOG = r"(?P<syslog>[^\W\d_]{3,5}\.? {1,2}\d{1,2} \d\d:\d\d:\d\d(?:\.\d{1,9})?)"
_STAMP = rf"(?:(?:{_UPTIME}|{_LOCAL_T}|{_ISO}|{_SYSLOG}) )"
_KERNEL = r"(?:(?:\S{1,255} )?kernel: )"
_KERNEL_UPTIME = r"(?:\[\s{0,12}(?P<k_uptime>\d{1,10}\.\d{1,9})\] )"
_CALLER = r"(?:\[\s{0,10}[TC]\d{1,10}\] )"
_PREFIX = re.compile(rf"^{_CRI}?{_PRIORITY}?{_DECODE}?{_STAMP}?{_KERNEL}?{_KERNEL_UPTIME}?{_CALLER}?(?P<message>.*)$")
DRIVER = "NVRM: "

MAX_CODE_DIGITS = 6  # NVIDIA's catalog ends at 172; a longer "code" is a damaged line, never an int() of it
_XID = re.compile(r"^Xid \(PCI:([0-9a-fA-F:.]{1,24})\): (\d+),?\s*(.*)")
# Lost GPUs, as open-gpu-kernel-modules prints them (tests/fixtures/node/health/README.md cites where):
# at probe, rm_is_supported_device's "NVRM: The NVIDIA GPU dddd:bb:dd.f" + "(PCI ID: ...) installed in
# this system has" + "fallen off the bus and is not responding to commands." (one printk, three lines;
# dmesg prefixes or indents each); at run time osHandleGpuLost's "NVRM: GPU dddd:bb:dd.f: GPU has
# fallen off the bus." (after its Xid 79, which already FAILs that GPU).
_BUS = r"([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_LOST_PROBE = re.compile(r"^The NVIDIA GPU " + _BUS + r"\b")
_LOST_PROBE_END = "fallen off the bus and is not responding to commands"
_LOST_RUNTIME = re.compile(r"^GPU " + _BUS + r": GPU has fallen off the bus")
# What tells that a GPU was reset or the driver reloaded, from the driver's own records:
# - the module banner "NVRM: loading NVIDIA UNIX ... Kernel Module" (a driver load: every GPU starts anew);
# - "NVRM: GPU at PCI:dddd:bb:dd: GPU-<uuid>": krcReportXid prints the GPU's identity before the FIRST Xid
#   of each KernelRc object (bGpuUuidLoggedOnce, open-gpu-kernel-modules
#   src/nvidia/src/kernel/gpu/rc/kernel_rc.c), and that object is made anew when the GPU is initialised,
#   at driver load or after a GPU reset. A second identity line for one GPU therefore means it was reset
#   (or the driver reloaded) between the Xids before and after it.
_DRIVER_LOAD = re.compile(r"^loading NVIDIA UNIX\b")
_IDENTITY = re.compile(r"^GPU at PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}): GPU-")
# Xid 74 and the NVLink5 codes name the link in their text ("... link 3 (0x...)", "Link 13 (0x...)")
_LINK = re.compile(r"\b[Ll]ink\s{0,3}(?:#\s{0,3})?(\d{1,3})\b")


# The NVSwitch driver's errors (NVSWITCH_PRINT_SXID, open-gpu-kernel-modules src/common/nvswitch/kernel/inc/
# common_nvswitch.h): "nvidia-nvswitchN: SXid (PCI:dddd:bb:dd.f): NNNNN, <text>", the first line of an event
# saying "Fatal" or "Non-fatal" and the link, the next ones its "Severity ... Engine instance" and "Data {...}".
_SXID = re.compile(r"^nvidia-(nvswitch\d{1,3}): SXid \(PCI:([0-9a-fA-F:.]{1,24})\): (\d{1,6}), (.{0,300})")
_SXID_KIND = re.compile(r"^(Fatal|Non-fatal), Link (\d{1,3})\b", re.I)


@dataclass(frozen=True)
class SxidEvent:
    switch: str  # "nvswitch0"
    bus: str
    code: int
    fatal: Optional[bool]  # None on a detail line ("Severity 1 Engine instance 60", "Data {...}")
    link: Optional[int]
    record: KernelRecord


@dataclass(frozen=True)
class KernelRecord:
    """One kernel log line with its prefix read: the message and when it was printed where the prefix says."""
    message: str  # after the prefix
    line: str  # the whole line, stripped
    uptime_s: Optional[float] = None  # dmesg's boot-relative stamp
    utc: Optional[datetime] = None  # a wall-clock stamp, as UTC
    continuation: bool = False  # an indented line of the record above


@dataclass(frozen=True)
class DriverRecord:
    """One kernel log line the NVIDIA driver printed, with when it was printed where the prefix says."""
    message: str  # from "NVRM: " on
    line: str  # the whole line, stripped
    uptime_s: Optional[float] = None  # dmesg's boot-relative stamp
    utc: Optional[datetime] = None  # a wall-clock stamp, as UTC
    continuation: bool = False  # an indented line of the record above
    seq: int = 0  # its place among the driver's records of the log (resets are placed by it)


@dataclass(frozen=True)
class XidEvent:
    bus: str
    code: Optional[int]  # None: the line's code is unreadable (more than MAX_CODE_DIGITS digits)
    record: DriverRecord

    @property
    def link(self) -> Optional[int]:
        """The NVLink the driver names in the line (Xid 74, 144-150), else None."""
        match = _LINK.search(self.record.message)
        return int(match.group(1)) if match else None


def _wall_clock(match: re.Match, now: Optional[datetime] = None) -> Optional[datetime]:
    """The record's wall-clock stamp as UTC; local-time stamps are read in this host's zone."""
    iso = match.group("iso")
    try:
        if iso:
            text = iso.replace(",", ".").replace("Z", "+00:00")
            text = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", text)  # +0000 -> +00:00 (Python 3.9's fromisoformat)
            text = re.sub(r"\.(\d{6})\d+", r".\1", text)  # nanoseconds: fromisoformat reads up to microseconds
            stamp = datetime.fromisoformat(text)
            return (stamp if stamp.tzinfo else stamp.astimezone()).astimezone(timezone.utc)
        if match.group("local_t"):
            local = datetime.strptime(match.group("local_t"), "%a %b %d %H:%M:%S %Y").astimezone()
            return local.astimezone(timezone.utc)
        if match.group("syslog"):
            # syslog stamps carry no year: this year, or last year if that would be in the future
            now = now or datetime.now(timezone.utc)
            text = match.group("syslog").split(".")[0]
            stamp = datetime.strptime(f"{now.year} {text}", "%Y %b %d %H:%M:%S").astimezone()
            if stamp.astimezone(timezone.utc) > now + timedelta(days=1):
                stamp = stamp.replace(year=now.year - 1)
            return stamp.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None  # e.g. a month name in another locale ("sep", "sie"): the record stays, undated
    return None


def _uptime(match: re.Match) -> Optional[float]:
    text = match.group("uptime") or match.group("k_uptime")
    return float(text) if text else None  # bounded digits: always a finite float


def kernel_records(log: str) -> list:
    """Every kernel-facility line of a kernel log with its prefix read, in order (one reader for every
    check and the scheduler hook). A record `dmesg --decode` marks as another facility (written to
    /dev/kmsg from userspace) is left out."""
    records: list = []
    for line in log.splitlines():
        if records and line[:1].isspace() and line.strip():
            last = records[-1]  # dmesg and journalctl indent a multi-line record's later lines
            records.append(KernelRecord(line.strip(), line.strip(), last.uptime_s, last.utc, True))
            continue
        match = _PREFIX.match(line)
        if match is None or match.group("facility") not in (None, "kern"):
            continue
        records.append(KernelRecord(match.group("message"), line.strip(), _uptime(match), _wall_clock(match)))
    return records


def judged(message: str) -> bool:
    """The one filter of what the kernel-log checks judge: the driver's records, the NVSwitch driver's SXid
    records and the kernel's PCIe "limited by" notices (health_pcie). The scheduler hook keeps exactly these,
    so it sees what verify does."""
    return message.startswith(DRIVER) or _SXID.match(message) is not None or is_bandwidth_notice(message)


def driver_records(log: str) -> list:
    """The NVIDIA driver's lines of a kernel log, in order; every other subsystem's line is left out.

    Only the driver's own records count: the message must START with "NVRM: " right after the record's
    prefix, so another subsystem's message quoting a user-chosen name never does."""
    records: list = []
    previous_was_driver = False
    for record in kernel_records(log):
        if record.continuation:
            if previous_was_driver and record.line.startswith(DRIVER):
                last = records[-1]
                records.append(DriverRecord(record.line[len(DRIVER):], record.line, last.uptime_s, last.utc, True,
                                            len(records)))
            continue
        previous_was_driver = record.message.startswith(DRIVER)
        if previous_was_driver:
            records.append(DriverRecord(record.message[len(DRIVER):], record.line, record.uptime_s, record.utc,
                                        False, len(records)))
    return records


def _bus(text: str) -> Optional[str]:
    try:
        return short_bdf(text)
    except ValueError:
        return None  # a malformed address: not a record we can place on a GPU


def xid_events(log: str) -> list:
    """Kernel log text -> [XidEvent] for each Xid the driver printed (its own record, never a quote). Total:
    a code of more than MAX_CODE_DIGITS digits is kept with code None (unreadable), never int() of it."""
    events = []
    for record in driver_records(log):
        match = None if record.continuation else _XID.match(record.message)
        bus = _bus(match.group(1)) if match else None
        if bus:
            digits = match.group(2)
            events.append(XidEvent(bus, int(digits) if len(digits) <= MAX_CODE_DIGITS else None, record))
    return events


def parse_xids(log: str) -> dict:
    """Kernel log text -> {bus id: {xid: (count, last line)}} (xid None: an unreadable code)."""
    found: dict = defaultdict(dict)
    for event in xid_events(log):
        count, _ = found[event.bus].get(event.code, (0, ""))
        found[event.bus][event.code] = (count + 1, event.record.line)
    return dict(found)


def sxid_events(log: str) -> list:
    """Kernel log text -> [SxidEvent] for each line the NVSwitch driver printed (its own record). Total."""
    events = []
    for record in kernel_records(log):
        match = None if record.continuation else _SXID.match(record.message)
        bus = _bus(match.group(2)) if match else None
        if bus:
            kind = _SXID_KIND.match(match.group(4))
            fatal = None if kind is None else kind.group(1).lower() == "fatal"
            events.append(SxidEvent(match.group(1), bus, int(match.group(3)), fatal,
                                    int(kind.group(2)) if kind else None, record))
    return events


def resets(log: str) -> list:
    """[(seq, bus or None)]: where the driver's records show a GPU re-initialised: None for a driver load
    (every GPU), a bus for that GPU's identity line (printed before its first Xid after a reset or load)."""
    found = []
    for record in driver_records(log):
        if record.continuation:
            continue
        if _DRIVER_LOAD.match(record.message):
            found.append((record.seq, None))
            continue
        identity = _IDENTITY.match(record.message)
        bus = _bus(identity.group(1)) if identity else None
        if bus:
            found.append((record.seq, bus))
    return found


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
