"""PCIe Advanced Error Reporting: the kernel's AER records in the kernel log and the AER counters in sysfs.

The kernel log (drivers/pci/pcie/aer.c; every form below is in a real published log, tests/fixtures/node/
health/public/README.md "Round 5"). Each record starts with the reporting driver and the device,
"<driver> <dddd:bb:dd.f>: ", then (4.x-6.x wordings, with or without "AER: " before the text):
  "AER: Corrected error received: 0000:01:00.0" / "AER: Multiple Uncorrected (Fatal) error received: ..." /
  "AER: Correctable error message received from 0000:00:00.0" / "... id=00e5" (the root port's view)
  "PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)" (the device's;
      severity Corrected/Correctable, Uncorrected/Uncorrectable (Non-Fatal), Uncorrected/Uncorrectable (Fatal))
  "  device [8086:6f08] error status/mask=00004020/00000000", then one line per error bit:
  "   [ 5] SDES                  ", "   [14] CmpltTO                (First)", "[ 0] Receiver Error"
  "AER: can't recover (no error_detected callback)", "AER: device recovery failed",
  "AER: device recovery successful", "DPC: containment event, status:0x1f01 source:0x0000"
The parser is pure over records (verify.facts.kernel_log.read_records gives them, whatever wraps the log).

sysfs (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats): /sys/bus/pci/devices/<bdf>/aer_dev_fatal,
aer_dev_nonfatal and aer_dev_correctable hold one "<error name> <count>" per line and a TOTAL_ERR_FATAL /
TOTAL_ERR_NONFATAL / TOTAL_ERR_COR line, counted since boot. Root ports add aer_rootport_total_err_*.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from verify.node import Node

FATAL, NONFATAL, CORRECTED = "fatal", "nonfatal", "corrected"
SYSFS_FILES = {FATAL: "aer_dev_fatal", NONFATAL: "aer_dev_nonfatal", CORRECTED: "aer_dev_correctable"}
TOTALS = {FATAL: "TOTAL_ERR_FATAL", NONFATAL: "TOTAL_ERR_NONFATAL", CORRECTED: "TOTAL_ERR_COR"}
MAX_COUNT_DIGITS = 20  # the kernel prints u64 counters

_DEVICE = r"(?P<driver>[\w.-]{1,40}) (?P<device>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): "
_HEAD = re.compile(_DEVICE)
_SEVERITY = re.compile(r"(?:AER: )?PCIe Bus Error: severity=(?P<severity>[A-Za-z]{1,16}(?: \((?:Non-)?Fatal\))?)"
                       r", type=(?P<type>[^,]{1,40})")
_RECEIVED = re.compile(r"AER: (?:Multiple )?(?P<severity>Corrected|Correctable|Uncorrected|Uncorrectable)"
                       r"(?: \((?P<kind>Non-Fatal|Fatal)\))? error (?:message )?received:? (?:from )?"
                       r"(?P<source>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]|id=[0-9a-fA-F]{1,4})?")
_BIT = re.compile(r"^\s{0,12}(?:AER: )?\s{0,8}\[\s?(?P<bit>\d{1,2})\] (?P<name>[A-Za-z][A-Za-z0-9 ()/-]{0,48}?)"
                  r"\s*(?:\(First\))?\s*$")
_CANT_RECOVER = re.compile(r"AER: can't recover")
_RECOVERY_FAILED = re.compile(r"AER: device recovery failed")
_DPC = re.compile(r"DPC: containment event")
# What judged() keeps for the checks (and the scheduler hook): every AER and DPC record
_ANY = re.compile(r"^" + _DEVICE + r"(?:AER: |PCIe Bus Error: |DPC: |\s{0,12}\[\s?\d{1,2}\] |\s{1,4}device \[)")


def is_aer_message(message: str) -> bool:
    """Whether a kernel message is an AER or DPC record (after its prefix)."""
    return _ANY.match(message) is not None


def severity_of(text: str) -> Optional[str]:
    """'Uncorrected (Fatal)' / 'Uncorrectable (Non-Fatal)' / 'Corrected' -> FATAL / NONFATAL / CORRECTED."""
    lowered = text.lower()
    if lowered.startswith("correct"):
        return CORRECTED
    if "non-fatal" in lowered:
        return NONFATAL
    if "fatal" in lowered:
        return FATAL
    return None


@dataclass
class AerEvent:
    """One AER record of one device: its severity, the error bits named under it, what recovery said."""
    device: str  # the device the record is about (lower case)
    driver: str  # "pcieport", "nvidia", "mlx5_core"
    severity: Optional[str]  # FATAL / NONFATAL / CORRECTED; None for a recovery line alone
    errors: list = field(default_factory=list)  # ["SDES", "CmpltTO"]
    recovery: str = ""  # "can't recover", "device recovery failed", "DPC containment"
    source: str = ""  # the device a root port says sent it ("received from 0000:00:00.0")
    received: bool = False  # a root port's "error received" line: the notice, the record follows it
    line: str = ""
    uptime_s: Optional[float] = None
    utc: object = None

    @property
    def uncorrectable(self) -> bool:
        return self.severity in (FATAL, NONFATAL) or bool(self.recovery)


def aer_events(records: list) -> list:
    """Kernel records (kernel_log.read_records) -> [AerEvent], in order. A bit line joins the last severity
    record of its device. Total on any text."""
    found: list = []
    last_by_device: dict = {}
    for record in records:
        text = record.message if not record.continuation else record.line
        head = _HEAD.match(text)
        if head is None:
            continue
        device, driver, rest = head.group("device").lower(), head.group("driver"), text[head.end():]
        base = dict(device=device, driver=driver, line=record.line[:300], uptime_s=record.uptime_s, utc=record.utc)
        severity, received, bit = _SEVERITY.match(rest), _RECEIVED.match(rest), _BIT.match(rest)
        if severity:
            event = AerEvent(severity=severity_of(severity.group("severity")), **base)
            found.append(event)
            last_by_device[device] = event
        elif received:
            words = received.group("severity") + (f" ({received.group('kind')})" if received.group("kind") else "")
            source = (received.group("source") or "").lower()
            found.append(AerEvent(severity=severity_of(words), source=source if not source.startswith("id=") else "",
                                  received=True, **base))
        elif bit and device in last_by_device:
            last_by_device[device].errors.append(" ".join(bit.group("name").split()))
        elif _CANT_RECOVER.match(rest) or _RECOVERY_FAILED.match(rest) or _DPC.match(rest):
            words = ("can't recover" if _CANT_RECOVER.match(rest) else
                     "device recovery failed" if _RECOVERY_FAILED.match(rest) else "DPC containment")
            found.append(AerEvent(severity=None, recovery=words, **base))
    return found


def distinct(events: list) -> list:
    """The events less the root ports' "received" notices whose severity a record of the same failure gives
    (one error, one event): a notice alone (no record followed it) is kept."""
    recorded = {e.severity for e in events if not e.received}
    return [e for e in events if not e.received or e.severity not in recorded]


def parse_counters(text: str) -> Optional[dict]:
    """An aer_dev_* file -> {error name: count}; None when no line of it reads as '<name> <count>'."""
    found = {}
    for line in (text or "").splitlines():
        parts = line.split()
        # ASCII digits only: str.isdigit() takes '²', which int() refuses (make fuzz, seed 682014737)
        if len(parts) == 2 and parts[1].isascii() and parts[1].isdigit() and len(parts[1]) <= MAX_COUNT_DIGITS:
            found[parts[0]] = int(parts[1])
    return found or None


def read_counters(node: Node, address: str) -> dict:
    """{FATAL / NONFATAL / CORRECTED: {error name: count}} of one device, for the files it has; {} when the
    kernel keeps no AER statistics for it (no AER capability, or a kernel before 5.2)."""
    found = {}
    for severity, name in SYSFS_FILES.items():
        counts = parse_counters(node.read(f"/sys/bus/pci/devices/{address}/{name}") or "")
        if counts is not None:
            found[severity] = counts
    return found


def total(counts: dict, severity: str) -> int:
    """The TOTAL_ERR_* line of one severity, else the sum of its error lines."""
    named = counts.get(severity) or {}
    if TOTALS[severity] in named:
        return named[TOTALS[severity]]
    return sum(named.values())


def nonzero(counts: dict, severity: str) -> list:
    """'SDES 1' for each error of a severity that counted any (totals left out)."""
    return [f"{name} {count}" for name, count in sorted((counts.get(severity) or {}).items())
            if count and name != TOTALS[severity]]
