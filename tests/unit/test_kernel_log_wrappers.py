"""One kernel-record reader for every wrapper (issue 46 item 1): a metamorphic property. Every message body of
the project's kernel-log corpus (every kernel-log fixture under tests/fixtures/node/health, real captures),
wrapped by every prefix util-linux's dmesg, journald, syslog (RFC 3164, RFC 5424), container runtimes, Talos,
pdsh and log shippers print, gives the same events (Xids, GPUs lost, SXids, driver failures, AER records,
resets) as the bare bodies. Each wrapper's layout is a real line cited in
tests/fixtures/node/health/public/README.md ("Round 5: wrappers"). A line under an unknown prefix is counted,
never dropped in silence; a stamp without a year is dated by the module's stated rule."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verify.facts import aer, kernel_log

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health"
CORPUS = sorted([*HEALTH.glob("kernel*log*.txt"), *HEALTH.glob("public/kernel-log_*.txt"),
                 *HEALTH.glob("h*/cmd/dmesg-kernel.stdout"), *HEALTH.glob("h*/cmd/journalctl-k.stdout")])
BOOT = datetime(2024, 11, 15, 10, 0, 0, tzinfo=timezone.utc)


def bodies(path: Path) -> list:
    """(message, is a continuation line) of every kernel record of one fixture."""
    return [(r.message if not r.continuation else r.line, r.continuation) for r in kernel_log.kernel_records(
        path.read_text(encoding="utf-8", errors="replace"))]


BODIES = [(path.name, bodies(path)) for path in CORPUS]


def events(log: str) -> list:
    """What the checks judge from a log, without where or when it was printed."""
    found = [("xid", e.bus, e.code) for e in kernel_log.xid_events(log)]
    found += [("lost", bus) for bus, _, _ in kernel_log.lost_events(log)]
    found += [("sxid", e.bus, e.code, e.fatal, e.link) for e in kernel_log.sxid_events(log)]
    found += [("driver", f.fault.key, f.bus) for f in kernel_log.driver_faults(log)]
    found += [("aer", e.device, e.severity, tuple(e.errors), e.recovery, e.source)
              for e in aer.aer_events(kernel_log.kernel_records(log))]
    found += [("reset", bus) for _, bus in kernel_log.resets(log)]
    return found


def iso(when: datetime, sep: str = ".") -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f"{sep}{when.microsecond:06d}+00:00"


def _json(**fields) -> str:
    return json.dumps(fields)


# Each wrapper: (uptime seconds, wall clock, message) -> one line, as the tool prints it.
WRAPPERS = {
    "dmesg": lambda up, at, m: f"[{up:12.6f}] {m}",
    "dmesg -r": lambda up, at, m: f"<4>[{up:12.6f}] {m}",
    "dmesg --decode": lambda up, at, m: f"kern  :warn  : [{up:12.6f}] {m}",
    "dmesg -T": lambda up, at, m: f"[{at:%a %b %e %H:%M:%S %Y}] {m}",
    "dmesg --time-format iso": lambda up, at, m: f"{iso(at, ',')} {m}",
    "dmesg -d": lambda up, at, m: f"[{up:12.6f} <    0.000123>] {m}",
    "dmesg --time-format delta": lambda up, at, m: f"[<    0.000123>] {m}",
    # util-linux's "%b%e %H:%M": a one-digit day is space-padded ("[Dec 7 04:35]", read on the H100)
    "dmesg -H (reltime)": lambda up, at, m: f"[{at:%b}{at.day:2d} {at:%H:%M}] {m}" if int(up) % 2
    else f"[  +0.000123] {m}",
    "dmesg --notime": lambda up, at, m: m,
    "dmesg, CONFIG_PRINTK_CALLER": lambda up, at, m: f"[{up:12.6f}] [  T1946] {m}",
    "journalctl -o short": lambda up, at, m: f"{at:%b %d %H:%M:%S} gpu-node-7 kernel: {m}",
    "journalctl -o short (localised month)": lambda up, at, m: f"sep {at:%d %H:%M:%S} gpu-node-7 kernel: {m}",
    "journalctl --no-hostname": lambda up, at, m: f"{at:%b %d %H:%M:%S} kernel: {m}",
    "journalctl -o short-precise": lambda up, at, m: f"{at:%b %d %H:%M:%S}.{at.microsecond:06d} gpu-node-7 kernel: {m}",
    "journalctl -o short-iso": lambda up, at, m: f"{at:%Y-%m-%dT%H:%M:%S}+0000 gpu-node-7 kernel: {m}",
    "journalctl -o short-iso-precise": lambda up, at, m: f"{iso(at)} gpu-node-7 kernel: {m}",
    "journalctl -o short-full": lambda up, at, m: f"{at:%a %Y-%m-%d %H:%M:%S} UTC gpu-node-7 kernel: {m}",
    "journalctl -o short-monotonic": lambda up, at, m: f"[{up:12.6f}] gpu-node-7 kernel: {m}",
    "journalctl -o short-delta": lambda up, at, m: f"[{up:12.6f} <    0.000123>] gpu-node-7 kernel: {m}",
    "journalctl -o short-unix": lambda up, at, m: f"{at.timestamp():.6f} gpu-node-7 kernel: {m}",
    "journalctl -o cat": lambda up, at, m: m,
    "journalctl -o json": lambda up, at, m: _json(
        __REALTIME_TIMESTAMP=str(int(at.timestamp() * 1e6)), _SOURCE_MONOTONIC_TIMESTAMP=str(int(up * 1e6)),
        _TRANSPORT="kernel", SYSLOG_FACILITY="0", SYSLOG_IDENTIFIER="kernel", _HOSTNAME="gpu-node-7", MESSAGE=m),
    "rsyslog kern.log (RFC 3164 file)": lambda up, at, m: f"{at:%b %e %H:%M:%S} gpu-node-7 kernel: [{up:12.6f}] {m}",
    "rsyslog RFC 3339 file": lambda up, at, m: f"{iso(at)} gpu-node-7 kernel: [{up:12.6f}] {m}",
    "syslog RFC 3164": lambda up, at, m: f"<4>{at:%b %e %H:%M:%S} gpu-node-7 kernel: {m}",
    "syslog RFC 3164 with the kernel stamp": lambda up, at, m: f"<4>{at:%b %e %H:%M:%S} gpu-node-7 kernel: "
                                                                f"[{up:12.6f}] {m}",
    "syslog RFC 5424": lambda up, at, m: f"<4>1 {iso(at)} gpu-node-7 kernel - - - {m}",
    "syslog RFC 5424 with SD and the kernel stamp": lambda up, at, m: (
        f'<4>1 {iso(at)} gpu-node-7 kernel - - [timeQuality tzKnown="1" isSynced="1"] [{up:12.6f}] {m}'),
    "CRI (containerd / CRI-O)": lambda up, at, m: f"{iso(at)} stdout F [{up:12.6f}] {m}",
    "kubectl logs --timestamps": lambda up, at, m: f"{at:%Y-%m-%dT%H:%M:%S}.123456789Z [{up:12.6f}] {m}",
    "kubectl logs --prefix --timestamps": lambda up, at, m: (
        f"[pod/npd-x7k2p/node-problem-detector] {at:%Y-%m-%dT%H:%M:%S}.123456789Z [{up:12.6f}] {m}"),
    "docker json-file": lambda up, at, m: _json(log=f"[{up:12.6f}] {m}\n", stream="stdout",
                                                time=f"{at:%Y-%m-%dT%H:%M:%S}.123456789Z"),
    "Talos talosctl dmesg": lambda up, at, m: (
        f"192.168.11.119: kern: warning: [{at:%Y-%m-%dT%H:%M:%S}.291660856Z]: {m}"),
    "Loki logcli": lambda up, at, m: f'{at:%Y-%m-%dT%H:%M:%S}Z {{host="gpu-node-7", job="kmsg"}} {m}',
    "fluent-bit kmsg input (JSON lines)": lambda up, at, m: _json(priority=4, sequence=1, sec=int(up),
                                                                  usec=int(up * 1e6) % 1000000, msg=m),
    "Cloud Logging export (COS journald)": lambda up, at, m: _json(
        jsonPayload={"MESSAGE": m, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0"}, timestamp=iso(at)),
    "pdsh / clush": lambda up, at, m: f"gpu-node-7: [{up:12.6f}] {m}",
}


def wrap(name: str, body: list, start_s: float) -> str:
    """The bodies as `name` prints them; a continuation line keeps its record's stamp and, in the layouts
    that indent it (dmesg, journalctl), stays indented; elsewhere it is its own record of the same stamp."""
    lines, up = [], start_s
    for message, continuation in body:
        if not continuation:
            up += 0.25
        at = BOOT + timedelta(seconds=up)
        lines.append(WRAPPERS[name](up, at, message))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_every_wrapper_gives_the_bodies_events_for_the_whole_corpus(name):
    assert len(CORPUS) >= 25  # the corpus is the fixtures, not a sample typed here
    seen = 0
    for fixture, body in BODIES:
        bare = events("\n".join(m for m, _ in body) + "\n")
        wrapped = wrap(name, body, 100.0)
        assert events(wrapped) == bare, (name, fixture)
        assert kernel_log.unread_lines(wrapped) == [], (name, fixture)
        seen += len(bare)
    assert seen > 120  # Xids, lost GPUs, SXids, driver failures, AER records, resets: the corpus has them all


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(sorted(WRAPPERS)), st.sampled_from(range(len(BODIES))), st.floats(0.5, 9e5))
def test_a_wrapper_is_read_at_any_uptime(name, index, start_s):
    fixture, body = BODIES[index]
    assert events(wrap(name, body, start_s)) == events("\n".join(m for m, _ in body) + "\n"), (name, fixture)


def test_each_wrapper_dates_its_records():
    xid = "NVRM: Xid (PCI:0000:2b:00): 31, pid=1942, name=llama-bench, channel 0x00000002"
    undated = {"dmesg --time-format delta", "dmesg --notime", "journalctl -o cat", "dmesg -H (reltime)",
               "journalctl -o short (localised month)"}  # "sep" is no month strptime reads in the C locale
    for name in sorted(set(WRAPPERS) - undated):
        (event,) = kernel_log.xid_events(wrap(name, [(xid, False)], 8213.15))
        record = event.record
        assert record.uptime_s is not None or record.utc is not None, name
        if record.uptime_s is not None:
            assert abs(record.uptime_s - 8213.4) < 1e-3, name


def test_a_stamp_without_a_year_is_dated_by_the_stated_rule():
    xid = "Dec 31 23:59:58 gpu-node-7 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
    on_new_year = kernel_log.read_records(xid, now=datetime(2027, 1, 2, 8, 0, tzinfo=timezone.utc)).records[0]
    assert on_new_year.utc.year == 2026  # December's line read on 2 January: last year
    in_december = kernel_log.read_records(xid, now=datetime(2026, 12, 31, 23, 59, 59, tzinfo=timezone.utc))
    assert in_december.records[0].utc.year == 2026
    early = kernel_log.read_records(xid.replace("Dec 31", "Jan  1"), now=datetime(2026, 12, 31, tzinfo=timezone.utc))
    assert early.records[0].utc.year == 2026  # within a day after now (time zones): this year


def test_reltime_deltas_count_from_the_last_full_stamp():
    log = "[Nov15 12:02] NVRM: loading NVIDIA UNIX x\n[  +2.500000] NVRM: GPU at PCI:0000:2b:00: GPU-1\n"
    first, second = kernel_log.read_records(log, now=datetime(2026, 12, 7, tzinfo=timezone.utc)).records
    assert (second.utc - first.utc).total_seconds() == 2.5


# ---- a prefix nobody reads is counted, never dropped ------------------------------------------------------------

UNKNOWN = ["gpu-node-7 | NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
           "kern.warning<4>: Nov 15 12:02:03 NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
           '{"log": "[  8213.402117] NVRM: Xid (PCI:0000:2b:00): 79, GPU', "@@ 12:02:03 pcieport 0000:00:01.0: AER: x"]


def test_a_line_under_an_unknown_prefix_is_counted_with_its_text():
    log = "\n".join(UNKNOWN) + "\n"
    assert kernel_log.unread_lines(log) == UNKNOWN
    assert kernel_log.xid_events(log) == []  # not read, so not judged: reported instead (health_xid)


def test_another_subsystems_quote_is_placed_not_unread():
    planted = "[ 5.100000] usb 1-1: Product: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"
    assert kernel_log.unread_lines(planted) == [] and kernel_log.xid_events(planted) == []


def test_records_another_facility_wrote_are_left_out_in_every_wrapper_that_names_it():
    xid = "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
    for line in (f"<12>[ 8213.402117] {xid}", f"<12>1 2024-11-15T12:02:03Z h kernel - - - {xid}",
                 _json(MESSAGE=xid, _TRANSPORT="syslog", SYSLOG_FACILITY="1"),
                 f"192.168.11.119: user: warning: [2026-04-22T21:27:51.291660856Z]: {xid}"):
        assert kernel_log.xid_events(line) == [], line


def test_reltime_with_a_space_padded_day_is_read():
    # `dmesg --kernel --time-format reltime` on the 1x H100 (tests/fixtures/device_runs, 2026-12-07): before,
    # this line was "could not be read" (the reader knew only the two-digit day, "[Nov15 12:02]").
    line = ("[Dec 7 04:35] NVRM: Persistence mode is deprecated and will be removed in a future release. "
            "Please use nvidia-persistenced instead.\n[  +1.500000] NVRM: GPU at PCI:0000:00:06: GPU-1\n")
    reading = kernel_log.read_records(line, now=datetime(2026, 12, 7, 5, 0, tzinfo=timezone.utc))
    assert not reading.unread
    first, second = reading.records
    assert first.message.startswith("NVRM: Persistence mode")
    assert second.utc - first.utc == timedelta(seconds=1.5) and first.utc.year == 2026
