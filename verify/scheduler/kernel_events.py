"""The NVIDIA driver's kernel-log records since the last check, from a saved cursor instead of from boot.

On the live node the records come straight from /dev/kmsg (no subprocess; only records newer than the
cursor are formatted), elsewhere (a --root tree, a drill's captured `dmesg --kernel`) from
verify.facts.kernel_log's reader. The cursor is (boot id, dmesg's boot-relative stamp of the last record):
a new boot starts from its beginning. Only kernel-facility records are read (userspace cannot write
those to /dev/kmsg), and only what the kernel-log checks judge is kept: the driver's own "NVRM: " records
and the kernel's PCIe "limited by" notices, by the same filter verify uses (verify.facts.kernel_log.judged).

The Xid check then reads exactly these records (node.memo[kernel_log.MEMO_KEY] is set to them), so an
event is judged once, in the interval it appeared, except FAIL-class events (Xid 79, a GPU lost from the
bus, a row-remap failure...): those are kept in the state as open events until the node reboots, so a
drain for them is not lifted by the next quiet interval. The same holds for the driver's FAIL-class failures
that are not Xids and uncorrectable PCIe AER records (verify.checks.health_aer reads them from the same
primed text). A line no reader places (verify.facts.kernel_log.read_records' unread) goes on to the check,
which reports it, never dropped by the cursor's filter.
"""
from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from typing import Optional

from verify.checks.health_xid import classify
from verify.facts import aer
from verify.facts.kernel_log import (
    MEMO_KEY,
    driver_faults,
    judged,
    kernel_records,
    lost_events,
    read_kernel_log,
    read_records,
    sxid_events,
    xid_events,
)
from verify.judging import verdicts
from verify.node import Node
from verify.result import Status

KMSG = "/dev/kmsg"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
MAX_RECORDS = 200_000  # a ring buffer holds a few thousand; this only bounds a misbehaving device


@dataclass
class Since:
    text: str  # the driver's records since the cursor, in dmesg's "[uptime] NVRM: ..." form
    source: str
    last_uptime_s: Optional[float]  # the new cursor
    records: int  # kernel records read (all facilities' kernel records after the cursor)


def boot_id(node: Node) -> str:
    return node.read_value(BOOT_ID) or ""


# "prio,seq,usec,flags;": prio is facility << 3 | level (at most 3 digits), seq and usec are u64 (20 digits)
_KMSG_HEAD = re.compile(r"^(\d{1,3}),(\d{1,20}),(\d{1,20})(?:,[^;]*)?$", re.ASCII)


def parse_kmsg_record(raw: bytes) -> Optional[tuple]:
    """One /dev/kmsg record ("prio,seq,usec,flags;message\\n KEY=value...") -> (facility, uptime_s, message);
    None for anything else (total: every number is bounded before it is converted)."""
    text = raw.decode("utf-8", errors="replace")
    head, sep, rest = text.partition(";")
    match = _KMSG_HEAD.match(head) if sep else None
    if match is None:
        return None
    message = rest.split("\n", 1)[0]
    # the kernel escapes non-printable bytes as \xNN; only the driver's records matter and they print none
    return int(match.group(1)) >> 3, int(match.group(3)) / 1e6, message


def passed_over(raw: bytes, after_s: Optional[float]) -> bool:
    """True for a record read_kmsg would drop anyway, told from its header's bytes alone: another facility's
    (prio >= 8 is two digits or more) or no newer than the cursor. A ring buffer holds thousands of records
    and every hook start reads them all; decoding and matching each cost the prolog ~0.1 s on a GPU node."""
    if raw[1:2] != b",":
        return True  # prio of two digits or more: not the kernel facility (or no record: the full parse drops it)
    if after_s is None:
        return False
    head_end = raw.find(b";", 0, 64)  # the header is at most 3 + 20 + 20 digits and flags: never split the message
    fields = raw[:head_end].split(b",", 3) if head_end > 0 else []
    stamp = fields[2] if len(fields) > 2 else b""
    return stamp.isdigit() and len(stamp) <= 20 and int(stamp) / 1e6 <= after_s


def read_kmsg(after_s: Optional[float], path: str = KMSG) -> Since:
    """The kernel records newer than `after_s` from /dev/kmsg, formatted as `dmesg` prints them; OSError
    when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    lines, last, count = [], after_s, 0
    try:
        for _ in range(MAX_RECORDS):
            try:
                raw = os.read(fd, 16384)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: the next read resumes
                    continue
                raise
            if not raw:
                break
            if passed_over(raw, after_s):
                continue
            parsed = parse_kmsg_record(raw)
            if parsed is None or parsed[0] != 0:  # facility 0: the kernel's own records
                continue
            _, uptime, message = parsed
            if after_s is not None and uptime <= after_s:
                continue
            count += 1
            last = uptime if last is None else max(last, uptime)
            if judged(message):
                lines.append(f"[{uptime:12.6f}] {message}")
    finally:
        os.close(fd)
    return Since("\n".join(lines) + ("\n" if lines else ""), KMSG, last, count)


def from_text(log: str, source: str, after_s: Optional[float]) -> Since:
    """The judged records of a whole log (kernel_log.judged, with the driver's continuation lines) newer than
    `after_s` (records with no boot-relative stamp are always new: nothing places them before the cursor)."""
    lines, last, count = [], after_s, 0
    keep = False
    reading = read_records(log)
    for record in reading.records:
        if not record.continuation:
            keep = judged(record.message) and not (
                after_s is not None and record.uptime_s is not None and record.uptime_s <= after_s)
        if not keep:
            continue
        count += 1
        if record.uptime_s is not None:
            last = record.uptime_s if last is None else max(last, record.uptime_s)
        lines.append(("    " if record.continuation else "") + record.line)
    lines += reading.unread  # a line no reader places goes on to the check, which reports it (never dropped)
    return Since("\n".join(lines) + ("\n" if lines else ""), source, last, count)


def read_since(node: Node, after_s: Optional[float], use_kmsg: bool) -> tuple:
    """(Since or None, why not): /dev/kmsg when use_kmsg and readable, else the facts' reader."""
    if use_kmsg:
        try:
            return read_kmsg(after_s), ""
        except OSError:
            pass  # e.g. kernel.dmesg_restrict for a non-root test run: dmesg / journalctl below
    log, source = read_kernel_log(node)
    if log is None:
        return None, source
    return from_text(log, source, after_s), ""


def failing_lines(text: str) -> list:
    """The lines of FAIL-class events in `text` (Xid codes whose class FAILs, GPUs lost from the bus, fatal
    NVSwitch SXids, the driver's FAIL-class failures that are not Xids, uncorrectable PCIe AER records)."""
    kept = [e.record.line for e in xid_events(text)
            if verdicts.status_of(classify(e.code, e.record.line)[0]) is Status.FAIL]
    kept += [message for _, message, _ in lost_events(text)]
    kept += [e.record.line for e in sxid_events(text) if e.fatal]  # a fatal SXid: reboot-class until the reboot
    # the driver's failures that are not Xids, of a FAIL class (a GPU that never initialised: reboot)
    kept += [f.record.line for f in driver_faults(text) if verdicts.status_of(f.fault.action) is Status.FAIL]
    # uncorrectable PCIe AER records and recovery failures (FAIL: reboot)
    kept += [e.line for e in aer.aer_events(kernel_records(text)) if e.uncorrectable]
    return kept


def prime(node: Node, since: Since, open_events: list) -> None:
    """Make the Xid check judge these records (and the events still open) instead of the whole log."""
    text = "".join(line + "\n" for line in open_events) + since.text
    held = f" (+{len(open_events)} open event line(s) from earlier this boot)" if open_events else ""
    node.memo[MEMO_KEY] = (text, f"{since.source}, since the last check{held}")
