"""The kernel-log reader on a real GPU node (issue 46 item 1): the node's own log read under every form its
tools print, the same events from each; no line left unread; the AER and driver-failure checks on the live node.

    sudo python3 tests/device/kernel_log_forms.py

For each form (dmesg, -T, --time-format iso / reltime / delta / notime, -x, -r; journalctl -k -b -o short,
short-precise, short-iso, short-iso-precise, short-full, short-monotonic, short-delta, short-unix, cat, json)
it runs the tool on this node, reads the output with verify.facts.kernel_log, and prints the number of records,
driver records, events (Xid, lost, SXid, driver failures, AER, resets), unread lines and the read time. The
events of every form must equal dmesg's (dmesg and journalctl see one ring; a form the tool does not have is
said and skipped). Then health.gpu.xid and health.aer run on the live node, with their results and timings.
Exit 1 if a form disagrees or a line is unread; 0 otherwise.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from verify.checks import run_checks  # noqa: E402
from verify.facts import aer, kernel_log  # noqa: E402
from verify.node import Node  # noqa: E402

FORMS = [["dmesg", "--kernel"], ["dmesg", "--kernel", "-T"], ["dmesg", "--kernel", "--time-format", "iso"],
         ["dmesg", "--kernel", "--time-format", "reltime"], ["dmesg", "--kernel", "--time-format", "delta"],
         ["dmesg", "--kernel", "--time-format", "notime"], ["dmesg", "--kernel", "-x"], ["dmesg", "--kernel", "-r"]]
FORMS += [["journalctl", "-k", "-b", "--no-pager", "-q", "-o", form] for form in (
    "short", "short-precise", "short-iso", "short-iso-precise", "short-full", "short-monotonic", "short-delta",
    "short-unix", "cat", "json")]


def events(log: str) -> list:
    found = [("xid", e.bus, e.code) for e in kernel_log.xid_events(log)]
    found += [("lost", bus) for bus, _, _ in kernel_log.lost_events(log)]
    found += [("sxid", e.bus, e.code) for e in kernel_log.sxid_events(log)]
    found += [("driver", f.fault.key, f.bus) for f in kernel_log.driver_faults(log)]
    found += [("aer", e.device, e.severity, tuple(e.errors)) for e in aer.aer_events(kernel_log.kernel_records(log))]
    found += [("reset", bus) for _, bus in kernel_log.resets(log)]
    return sorted(found, key=repr)


def main() -> int:
    bad, reference = 0, None
    for argv in FORMS:
        name = " ".join(argv[1:])
        try:
            out = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=60)
        except FileNotFoundError:  # the GPU VMs have no journalctl (../shared/ENVIRONMENT.md): that form is absent
            print(f"{argv[0]} {name}: {argv[0]} is not installed here: skipped")
            continue
        if out.returncode != 0:
            print(f"{argv[0]} {name}: exit {out.returncode} ({out.stderr.strip()[:100]}): skipped")
            continue
        start = time.perf_counter()
        reading = kernel_log.read_records(out.stdout)
        read_ms = (time.perf_counter() - start) * 1000
        found = events(out.stdout)
        drivers = len(kernel_log.driver_records(out.stdout))
        same = "reference" if reference is None else ("same events" if found == reference else "DIFFERENT EVENTS")
        if reference is None and argv[0] == "dmesg":
            reference = found
        bad += same == "DIFFERENT EVENTS" or bool(reading.unread)
        print(f"{argv[0]} {name}: {len(reading.records)} records, {drivers} driver, {len(found)} events, "
              f"{len(reading.unread)} unread, read in {read_ms:.1f} ms: {same}")
        for line in reading.unread[:2]:
            print(f"    unread: {line[:160]}")
    node = Node()
    timings: dict = {}
    for result in run_checks({}, node, ["health.gpu.xid", "health.aer"], timings=timings):  # neither reads the spec
        print(f"{result.check_id}: {result.status.value} {result.observed} {result.reason[:160]}")
    print("check timings (s):", timings)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
