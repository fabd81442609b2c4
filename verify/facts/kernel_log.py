"""The kernel log, read whole: every kernel record's message found under whatever wraps it, then the NVIDIA
driver's records (Xid events, GPUs lost from the bus, failures that are not Xids), the NVSwitch driver's
SXid records and the records verify.facts.aer reads, per PCI address.

`dmesg --kernel` is read whole (no --level filter: the driver's printk level for Xid lines is not
documented, and the whole ring is a few hundred KiB); `journalctl -k -b` is the fallback where
dmesg is absent or refused. What each record means is judged in verify.checks.health_xid (the driver's)
and verify.checks.health_aer (PCIe AER).

Only the driver's own records count: the message must START with "NVRM: " right after the kernel
record's prefix. Another subsystem's message that quotes a user-chosen name ("usb 1-1: Product: NVRM: Xid
...") never does, so nobody can plant an Xid on a shared node by naming a device or a process.

One reader for every wrapper (read_records): the prefixes are peeled in the order they can stand, each at
most once (tests/fixtures/node/health/public/README.md cites a real line of each; test_kernel_log_wrappers
proves every one gives the same events for every message body of the fixtures):
  container runtime   CRI "2024-11-15T12:02:03.123456789Z stdout F ", `kubectl logs --timestamps`
                      "2024-11-15T12:02:03.123456789Z ", `kubectl logs --prefix` "[pod/NAME/CONTAINER] ",
                      docker json-file {"log":"...","stream":"stdout","time":"..."}
  log shippers        JSON lines whose message is "MESSAGE" (journalctl -o json, Cloud Logging's jsonPayload),
                      "log", "message", "msg" (fluent-bit's kmsg input with "sec"/"usec"), "textPayload";
                      Loki logcli "2024-11-15T12:02:03Z {host="n1"} ", pdsh / clush "node01: " before a stamp
  syslog              RFC 3164 "<4>Nov 15 12:02:03 host kernel: ", RFC 5424 "<4>1 2024-11-15T12:02:03.470068Z host
                      kernel - - - " (structured data "-" or "[...]", a BOM), rsyslog's file forms with or
                      without the kernel's own "[ 3224.864246] " after "kernel: "
  dmesg               -r "<4>", --decode "kern  :warn  : ", the stamps below, CONFIG_PRINTK_CALLER "[ T1946] "
  Talos (talosctl dmesg) "172.20.0.2: kern: warning: [2026-04-22T21:27:51.291660856Z]: "
  stamps (one)        "[ 8213.402117]" (dmesg, -o short-monotonic), "[ 8213.402117 <    0.000123>]" (dmesg -d,
                      -o short-delta), "[<    0.000123>]" (--time-format delta), "[Nov15 12:02]" / "[Dec 7 04:35]" and
                      "[  +0.000123]" (-H / --time-format reltime), "[Thu Apr  4 18:03:56 2024]" (-T),
                      ISO-8601 (--time-format iso, -o short-iso[-precise]), "Nov 15 12:02:03[.470068]" (-o short,
                      short-precise, syslog; any locale's month), "Fri 2024-11-15 12:02:03 UTC" (-o short-full,
                      with-unit), "1731672123.470068" (-o short-unix)
  journal             "host kernel: " or "kernel: " (--no-hostname, or the poster cut the host); -o cat and
                      dmesg --notime print the message alone.
  a pasted block      every line indented by the same margin (a forum post, a mail quote): the margin goes.
Container-OS exports (Bottlerocket's logdog, COS, Flatcar) are journalctl's and dmesg's forms above. A record
whose wrapper names another facility than the kernel's (dmesg --decode "syslog", a syslog priority of
facility 1 and up, a journal entry with SYSLOG_FACILITY other than 0 or _TRANSPORT other than "kernel") was
written from userspace and is left out. Every number is bounded.

A line that names what the checks judge (the driver, an SXid, a PCIe AER record) under a prefix none of the
above reads is not dropped: it is counted with the log (`KernelReading.unread`), and the check reports it
(WARN "N lines could not be read", two examples).

A stamp without a year (syslog and journal "Nov 15 12:02:03", dmesg's reltime "[Nov15 12:02]") is dated in
the latest year that does not put it more than one day after the reading time (now): December's lines read
on 2 January belong to last year; the day of slack covers time zones. Such stamps are read in this host's
time zone, as journalctl and syslog print them.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Optional

from verify.facts.aer import is_aer_message
from verify.facts.links import is_bandwidth_notice
from verify.facts.pci import short_bdf
from verify.judging import kernel_faults
from verify.node import Node

SOURCES = (["dmesg", "--kernel"], ["journalctl", "-k", "-b", "--no-pager", "-q"])
DRIVER = "NVRM: "
MAX_LINE = 65536  # a longer line is not a kernel record (printk's records are at most 1 KiB); read no further
MAX_JSON_DEPTH = 2  # a docker json-file line holding a dmesg line: peeled twice at most

_ISO_TEXT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_CRI = re.compile(rf"(?P<iso>{_ISO_TEXT}) (?:stdout|stderr) [FP] ")
_KUBECTL_PREFIX = re.compile(r"\[(?:pod/)?[\w.-]{1,253}/[\w.-]{1,253}\] ")
# kubectl --timestamps and Loki's logcli put the reader's stamp (and logcli its labels) before the line
_OUTER_STAMP = re.compile(rf"(?P<iso>{_ISO_TEXT})(?: \{{[^{{}}]{{0,2000}}\}})? (?=\S)")
# pdsh / clush name the host before each line ("node01: [ 8213.402117] ..."): peeled only before a stamp
_HOST_COLUMN = re.compile(r"[\w.-]{1,253}: (?=\[\s{0,12}[\d+<]|\[[A-Z][a-z]{2}[ \d]|<\d{1,3}>|\d{4}-\d\d-\d\dT|"
                          r"[^\W\d_]{3,5}\.? {1,2}\d{1,2} \d\d:)")
_PRIORITY = re.compile(r"<(?P<prio>\d{1,3})>")
# RFC 5424 after its PRI: VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID SP SD [SP] [BOM]
_RFC5424 = re.compile(rf"1 (?:(?P<iso>{_ISO_TEXT})|-) \S{{1,255}} (?P<app>\S{{1,48}}) \S{{1,128}} \S{{1,32}} "
                      r"(?:-|(?:\[(?:[^\]\\]|\\.){0,2000}\]){1,16}) ?\ufeff?")
_DECODE = re.compile(r"(?P<facility>[a-z]{1,8})\s{0,8}:\s{0,8}[a-z]{1,8}\s{0,8}: ")
_TALOS = re.compile(rf"(?:\S{{1,255}}: )?(?P<facility>[a-z]{{1,8}}): {{0,8}}[a-z]{{1,8}}: \[(?P<iso>{_ISO_TEXT})\]: ")
_MONTH_DAY = r"[^\W\d_]{3,5}\.? {1,2}\d{1,2}"
_STAMPS = (
    ("uptime", re.compile(r"\[\s{0,12}(?P<uptime>\d{1,10}\.\d{1,9})(?:\s{1,4}<\s{0,12}\d{1,10}\.\d{1,9}>)?\] ")),
    ("delta", re.compile(r"\[<\s{0,12}\d{1,10}\.\d{1,9}>\] ")),
    # util-linux pads a one-digit day with a space ("[Dec 7 04:35]", seen on the H100: Ubuntu 24.04's dmesg)
    ("reltime", re.compile(r"\[(?P<reltime>[^\W\d_]{3} ?\d{1,2} \d\d:\d\d)\] ")),
    ("rel_delta", re.compile(r"\[\s{0,12}\+(?P<rel_delta>\d{1,10}\.\d{1,9})\] ")),
    ("local_t", re.compile(r"\[(?P<local_t>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\] ")),
    ("iso", re.compile(rf"(?P<iso>{_ISO_TEXT}) ")),
    ("full", re.compile(r"[A-Z][a-z]{2} (?P<full>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,9})?) "
                        r"(?P<zone>[A-Za-z]{1,6}|[+-]\d\d:?\d\d) ")),
    ("syslog", re.compile(rf"(?P<syslog>{_MONTH_DAY} \d\d:\d\d:\d\d(?:\.\d{{1,9}})?) ")),
    # -o short-unix: seconds since the epoch, only before "[host] kernel: " (a bare number is a message)
    ("unix", re.compile(r"(?P<unix>\d{9,11}\.\d{1,9}) (?=(?:\S{1,255} )?kernel: )")),
)
_BRACKETED = frozenset({"uptime", "delta", "reltime", "rel_delta", "local_t"})  # the stamps that start with "["
_NUMERIC = frozenset({"iso", "unix"})  # and those that start with a digit
_KERNEL = re.compile(r"(?:\S{1,255} )?kernel: ")
_KERNEL_UPTIME = re.compile(r"\[\s{0,12}(?P<uptime>\d{1,10}\.\d{1,9})\] ")
_CALLER = re.compile(r"\[\s{0,10}[TC]\d{1,10}\] ")
# What a judged message starts with (after its prefix); seen later in a line, it is a record not placed
_MARKERS = re.compile(r"NVRM: |SXid \(PCI:|PCIe Bus Error|\bAER: |fallen off the bus")
# Another subsystem's own head ("usb 1-1: ", "pcieport 0000:00:01.0: ", "audit: ", "python3[4242]: "): a quote in its
# message is that subsystem's record, read and placed, not an unread prefix
_SUBSYSTEM_HEAD = re.compile(r"^[A-Za-z][\w.:\[\]-]{0,63}(?: [^\s]{1,64})?: ")
KERNEL_FACILITY = 0


@dataclass(frozen=True)
class KernelRecord:
    """One kernel log line with its prefix read: the message and when it was printed where the prefix says."""
    message: str  # after the prefix
    line: str  # the whole line, stripped
    uptime_s: Optional[float] = None  # the kernel's boot-relative stamp
    utc: Optional[datetime] = None  # a wall-clock stamp, as UTC
    continuation: bool = False  # an indented line of the record above


@dataclass
class KernelReading:
    """A kernel log read: its records in order, and the lines that name a judged record under a prefix the
    reader does not know (never dropped in silence: the checks report them)."""
    records: list = field(default_factory=list)
    unread: list = field(default_factory=list)


@dataclass
class _Clock:
    """What one line's stamp depends on from the lines before it (dmesg's reltime deltas), and now; the
    stamps of second resolution already read (a log repeats each second over many lines: strptime once)."""
    now: datetime
    reltime: Optional[datetime] = None
    seen: dict = field(default_factory=dict)


def _iso_utc(text: str) -> datetime:
    """An ISO-8601 / RFC 3339 stamp as UTC (Python 3.9's fromisoformat: no "Z", no "+0000", at most six
    digits of fraction; a stamp with no zone is this host's time)."""
    text = text.replace(",", ".")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    elif len(text) > 5 and text[-5] in "+-" and text[-4:].isdigit():
        text = text[:-2] + ":" + text[-2:]  # +0000 -> +00:00
    dot = text.find(".", 19)
    if dot != -1:
        end = dot + 1
        while end < len(text) and text[end].isdigit():
            end += 1
        text = text[:dot + 1] + text[dot + 1:end][:6].ljust(6, "0") + text[end:]
    stamp = datetime.fromisoformat(text)
    return (stamp if stamp.tzinfo else stamp.astimezone()).astimezone(timezone.utc)


def _yearless(text: str, form: str, now: datetime) -> datetime:
    """A stamp with no year, in this host's zone: the latest year that does not put it more than a day
    after now (the module docstring states the rule)."""
    stamp = datetime.strptime(f"{now.year} {text}", f"%Y {form}").astimezone()
    if stamp.astimezone(timezone.utc) > now + timedelta(days=1):
        stamp = stamp.replace(year=now.year - 1)
    return stamp.astimezone(timezone.utc)


def _stamp_utc(kind: str, match: re.Match, clock: _Clock) -> Optional[datetime]:
    """The wall-clock time one stamp names, as UTC; None for a boot-relative or unreadable one."""
    try:
        if kind == "iso":
            return _iso_utc(match.group("iso"))
        if kind in ("local_t", "syslog"):
            text = match.group(kind)
            whole, _, fraction = text.partition(".") if kind == "syslog" else (text, "", "")
            if whole not in clock.seen:
                clock.seen[whole] = (
                    datetime.strptime(whole, "%a %b %d %H:%M:%S %Y").astimezone().astimezone(timezone.utc)
                    if kind == "local_t" else _yearless(" ".join(whole.split()), "%b %d %H:%M:%S", clock.now))
            stamp = clock.seen[whole]
            return stamp + timedelta(seconds=float("0." + fraction)) if fraction else stamp
        if kind == "reltime":
            clock.reltime = _yearless(match.group("reltime"), "%b%d %H:%M", clock.now)
            return clock.reltime
        if kind == "rel_delta":
            if clock.reltime is None:
                return None
            clock.reltime += timedelta(seconds=float(match.group("rel_delta")))
            return clock.reltime
        if kind == "full":
            zone = match.group("zone")
            stamp = datetime.strptime(match.group("full").split(".")[0], "%Y-%m-%d %H:%M:%S")
            if zone in ("UTC", "GMT", "Z"):
                return stamp.replace(tzinfo=timezone.utc)
            if zone[0] in "+-":
                return _iso_utc(stamp.isoformat() + zone)
            return stamp.astimezone().astimezone(timezone.utc)  # a zone name (CET): this host's zone
        if kind == "unix":
            return datetime.fromtimestamp(float(match.group("unix")), timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None  # e.g. a month name in another locale ("sep", "sie"): the record stays, undated
    return None


@dataclass
class _Peeled:
    message: str
    uptime_s: Optional[float] = None
    utc: Optional[datetime] = None
    kernel: bool = True  # False: the wrapper names another facility (written from userspace)
    lines: tuple = ()  # a JSON record's further lines (a multi-line message)


def _facility_of(prio: str) -> int:
    return int(prio) >> 3


def _peel_text(line: str, clock: _Clock, depth: int = 0) -> _Peeled:
    """Peel the prefixes of one line, in the order they can stand (module docstring). Each layer is tried
    only where the next character can start it (a ring buffer holds thousands of lines: most of them are
    "[uptime] message", and a layer that cannot match is not asked)."""
    peeled = _Peeled(line)
    pos, utc = 0, None

    def wall(match: re.Match, kind: str = "iso") -> Optional[datetime]:
        stamp = _stamp_utc(kind, match, clock)
        return stamp if stamp is not None else utc

    first = line[:1]
    if first.isdigit():
        match = _CRI.match(line) or _OUTER_STAMP.match(line)
        if match:
            pos, utc = match.end(), wall(match)
    elif first == "[":
        match = _KUBECTL_PREFIX.match(line)
        if match:
            pos = match.end()
            stamp = _OUTER_STAMP.match(line, pos)
            if stamp:
                pos, utc = stamp.end(), wall(stamp)
    first = line[pos:pos + 1]
    if first.isalnum() or first in ("_", ".", "-"):
        match = _HOST_COLUMN.match(line, pos)
        if match:
            pos = match.end()
            first = line[pos:pos + 1]
    if first == "{" and depth < MAX_JSON_DEPTH:
        inner = _peel_json(line[pos:], clock, depth + 1)
        if inner is not None:
            inner.utc = inner.utc or utc
            return inner
    if first == "<":
        priority = _PRIORITY.match(line, pos)
        if priority:
            peeled.kernel = _facility_of(priority.group("prio")) == KERNEL_FACILITY
            pos = priority.end()
            header = _RFC5424.match(line, pos)
            if header:
                pos = header.end()
                if header.group("iso"):
                    utc = wall(header)
            first = line[pos:pos + 1]
    decode = _TALOS.match(line, pos) if "]: " in line[pos:pos + 320] else None
    if decode is None and first.isalpha():
        decode = _DECODE.match(line, pos)
    if decode:
        pos = decode.end()
        peeled.kernel = peeled.kernel and decode.group("facility") == "kern"
        if "iso" in decode.groupdict() and decode.group("iso"):
            utc = wall(decode)
        first = line[pos:pos + 1]
    bracketed = first == "["
    for kind, pattern in _STAMPS:
        if bracketed != (kind in _BRACKETED) or (kind in _NUMERIC and not first.isdigit()):
            continue
        match = pattern.match(line, pos)
        if match:
            pos = match.end()
            if kind == "uptime":
                peeled.uptime_s = float(match.group("uptime"))  # bounded digits: always a finite float
            else:
                utc = wall(match, kind)
            break
    if "kernel: " in line[pos:pos + 270]:
        match = _KERNEL.match(line, pos)
        pos = match.end() if match else pos
    if line[pos:pos + 1] == "[":
        match = _KERNEL_UPTIME.match(line, pos)
        if match:
            pos, peeled.uptime_s = match.end(), float(match.group("uptime"))
        match = _CALLER.match(line, pos)
        pos = match.end() if match else pos
    peeled.message, peeled.utc = line[pos:], utc
    return peeled


def _number(value: object, scale: float = 1.0) -> Optional[float]:
    """A journal field's count ("8213402117" microseconds) as a float; None unless it is a bounded number."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    text = str(value)
    return int(text) / scale if text.isascii() and text.isdigit() and len(text) <= 20 else None


def _json_text(value: object) -> Optional[str]:
    """A journal MESSAGE is a string, or a list of byte values where it is not UTF-8."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) <= MAX_LINE and all(isinstance(b, int) and 0 <= b < 256
                                                                 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    return None


_MESSAGE_KEYS = ("MESSAGE", "log", "message", "msg", "textPayload")


def _peel_json(text: str, clock: _Clock, depth: int) -> Optional[_Peeled]:
    """A JSON line's message (the journal's, docker's, a shipper's), its stamps and its facility."""
    try:
        found = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(found, dict):
        return None
    if isinstance(found.get("jsonPayload"), dict):  # Cloud Logging keeps the journal's fields under jsonPayload
        found = dict(found, **found["jsonPayload"])
    message = next((m for m in (_json_text(found.get(key)) for key in _MESSAGE_KEYS) if m is not None), None)
    if message is None:
        return None
    facility = found.get("SYSLOG_FACILITY", found.get("facility"))
    transport = found.get("_TRANSPORT")
    kernel = facility in (None, 0, "0", "kern") and transport in (None, "kernel")
    first, *more = message.rstrip("\n").split("\n")
    inner = _peel_text(first, clock, depth)
    inner.kernel = inner.kernel and kernel
    inner.lines = tuple(line.strip() for line in more if line.strip())
    if inner.uptime_s is None:
        inner.uptime_s = _number(found.get("_SOURCE_MONOTONIC_TIMESTAMP"), 1e6)
    if inner.uptime_s is None and _number(found.get("sec")) is not None:  # fluent-bit's kmsg input
        inner.uptime_s = _number(found.get("sec")) + (_number(found.get("usec")) or 0) / 1e6
    if inner.utc is None:
        realtime = _number(found.get("__REALTIME_TIMESTAMP"), 1e6)
        try:
            if realtime is not None:
                inner.utc = datetime.fromtimestamp(realtime, timezone.utc)
            else:
                stamp = next((found[k] for k in ("time", "timestamp", "@timestamp") if isinstance(found.get(k), str)),
                             None)
                inner.utc = _iso_utc(stamp[:40]) if stamp else None
        except (ValueError, OverflowError, OSError):
            pass
    return inner


_MARKER_WORDS = ("NVRM: ", "SXid (", "PCIe Bus Error", "AER: ", "fallen off the bus")


def _unread(message: str) -> bool:
    """A message that names a judged record after a head no reader placed (an unknown prefix)."""
    if not any(word in message for word in _MARKER_WORDS):  # substring tests first: most lines name none
        return False
    marker = _MARKERS.search(message)
    if marker is None or marker.start() == 0:
        return False
    return _SUBSYSTEM_HEAD.match(message[:marker.start()]) is None


def _dedented(lines: list) -> list:
    """A log pasted as an indented block (a forum post, a mail quote): every line's common margin removed, so
    its first line is a record and not a continuation; a log whose first line is not indented is as it is."""
    if not lines or not lines[0][:1].isspace():
        return lines
    margin = lines[0][:len(lines[0]) - len(lines[0].lstrip())]
    for line in lines:
        if line.strip():
            while margin and not line.startswith(margin):
                margin = margin[:-1]
    return [line[len(margin):] for line in lines] if margin else lines


def read_records(log: str, now: Optional[datetime] = None) -> KernelReading:
    """Every kernel-facility line of a kernel log with its prefix read, in order (one reader for every check
    and the scheduler hook), and the lines it could not place. A record its wrapper marks as another
    facility's (written from userspace) is left out."""
    clock = _Clock(now or datetime.now(timezone.utc))
    reading = KernelReading()
    records = reading.records
    for line in _dedented(log.splitlines()):
        if records and line[:1].isspace() and line.strip():
            last = records[-1]  # dmesg and journalctl indent a multi-line record's later lines
            records.append(KernelRecord(line.strip(), line.strip(), last.uptime_s, last.utc, True))
            continue
        if not line.strip():
            continue
        if len(line) > MAX_LINE:
            if _MARKERS.search(line[:MAX_LINE]):
                reading.unread.append(line[:300])
            continue
        peeled = _peel_text(line, clock)
        if not peeled.kernel:
            continue
        if _unread(peeled.message):
            reading.unread.append(line.strip()[:300])
        records.append(KernelRecord(peeled.message, line.strip(), peeled.uptime_s, peeled.utc))
        records.extend(KernelRecord(more, more, peeled.uptime_s, peeled.utc, True) for more in peeled.lines)
    return reading


@lru_cache(maxsize=4)
def _reading(log: str) -> KernelReading:
    """read_records of one log text, once: every reader below (Xids, lost GPUs, SXids, driver failures, AER,
    resets) starts from the same records, and a check reads the run's one log text (pure: the text is the key;
    its records are frozen)."""
    return read_records(log)


def kernel_records(log: str) -> list:
    """Every kernel-facility record of a kernel log with its prefix read, in order (read_records' records)."""
    return list(_reading(log).records)


def unread_lines(log: str) -> list:
    """The lines of a kernel log that name a judged record under a prefix no reader places."""
    return list(_reading(log).unread)


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
# the message's own later lines, whatever stamps a wrapper that splits them gave them
_LOST_PROBE_LINES = ("(PCI ID: ", "fallen off the bus and is not responding")
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


def judged(message: str) -> bool:
    """The one filter of what the kernel-log checks judge: the driver's records, the NVSwitch driver's SXid
    records, the kernel's PCIe "limited by" notices (health_pcie) and its AER / DPC records (health_aer). The
    scheduler hook keeps exactly these, so it sees what verify does."""
    return (message.startswith(DRIVER) or _SXID.match(message) is not None or is_bandwidth_notice(message)
            or is_aer_message(message))


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


@dataclass(frozen=True)
class DriverFault:
    """One driver record of a class in verify.judging.kernel_faults.DRIVER_FAULTS (not an Xid)."""
    fault: kernel_faults.FaultClass
    bus: Optional[str]  # None: the line names no GPU (the node's, unless its burst names one)
    record: DriverRecord


def driver_faults(log: str) -> list:
    """Kernel log text -> [DriverFault] for the driver's failures that are not Xids (initialisation failures,
    reset-required assertions, GSP timeouts with or without an Xid line), each with the GPU its line names."""
    found = []
    for record in driver_records(log):
        if record.continuation:
            continue
        matched = kernel_faults.driver_fault(record.message)
        if matched:
            fault, bus = matched
            found.append(DriverFault(fault, _bus(bus) if bus else None, record))
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
                                     if r.continuation or (r.uptime_s, r.utc) == (record.uptime_s, record.utc)
                                     or r.message.startswith(_LOST_PROBE_LINES)]
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
