"""One `nvidia-smi --query-gpu` call for every per-GPU health reading, shared by the GPU health checks.

Fields are named with the aliases old and new drivers both accept (`clocks_throttle_reasons.*`
exists in every driver; R535+ also call it `clocks_event_reasons.*`). A driver that rejects a field
(`Field "x" is not a valid field to query`) is asked again without it, so one missing reading
costs that reading, not the whole check.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from typing import Optional

from verify.facts import smi_q
from verify.node import Node

FIELDS = (
    "index", "pci.bus_id", "name",
    "ecc.mode.current", "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure", "remapped_rows.uncorrectable",
    "clocks_throttle_reasons.active", "clocks_throttle_reasons.hw_slowdown",
    "clocks_throttle_reasons.hw_thermal_slowdown", "clocks_throttle_reasons.hw_power_brake_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown", "clocks_throttle_reasons.sw_power_cap",
    "temperature.gpu", "temperature.gpu.tlimit", "temperature.memory",
    "power.draw", "enforced.power.limit",
    "vbios_version",  # for the fleet's uniformity report (node facts: firmware)
    # SRAM and DRAM apart (nvidia-smi --help-query-gpu: "ecc.errors.uncorrected.volatile.sram" / ".dram",
    # volatile = since the driver loaded, aggregate = the GPU's lifetime); drivers without them drop them
    "ecc.errors.uncorrected.volatile.sram", "ecc.errors.uncorrected.volatile.dram",
    "ecc.errors.uncorrected.aggregate.sram", "ecc.errors.uncorrected.aggregate.dram",
)
REQUIRED = ("index", "pci.bus_id", "name")
SPLIT_ECC_FIELDS = FIELDS[-4:]
SRAM_THRESHOLD = "ecc.sram_threshold_exceeded"  # from nvidia-smi -q only (verify.facts.smi_q)
# ECC mode and counters, retired pages, remapped rows, the SRAM split and its RMA flag
MEMORY_FIELDS = FIELDS[3:10] + SPLIT_ECC_FIELDS + (SRAM_THRESHOLD,)
_INVALID = re.compile(r'Field "([^"]+)" is not a valid field to query')
_NOT_A_VALUE = ("n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "")


class HealthParseError(ValueError):
    pass


@dataclass
class GpuHealth:
    index: int
    bus_id: str
    name: str
    fields: dict = field(default_factory=dict)  # field name -> text as nvidia-smi printed it (units removed)

    def text(self, name: str) -> Optional[str]:
        """The value, or None when the driver does not report it (N/A, [Not Supported], not asked)."""
        value = self.fields.get(name)
        return None if value is None or value.strip().lower() in _NOT_A_VALUE else value.strip()

    def number(self, name: str) -> Optional[float]:
        value = self.text(name)
        if value is None:
            return None
        try:
            return float(value.split()[0])
        except ValueError:
            raise HealthParseError(f"GPU {self.index} {name} = {value!r} is not a number") from None

    def number_or_none(self, name: str) -> Optional[float]:
        """number(), with an unreadable value as None (for deciding whether to ask more, not for judging)."""
        try:
            return self.number(name)
        except HealthParseError:
            return None

    def active(self, name: str) -> Optional[bool]:
        """'Active'/'Yes' -> True, 'Not Active'/'No' -> False, N/A -> None."""
        value = self.text(name)
        if value is None:
            return None
        lowered = value.lower()
        if lowered in ("active", "yes", "enabled"):
            return True
        if lowered in ("not active", "no", "disabled"):
            return False
        raise HealthParseError(f"GPU {self.index} {name} = {value!r} is neither Active/Yes nor Not Active/No")

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.bus_id})"


Q_ARGV = ["nvidia-smi", "-q"]
Q_ECC_ARGV = ["nvidia-smi", "-q", "-d", "ECC"]  # the SRAM threshold flag: in -q only, not in --query-gpu


def from_smi_q(text: str) -> list:
    """`nvidia-smi -q` text -> [GpuHealth] with the same field names as the CSV (verify.facts.smi_q)."""
    return [GpuHealth(gpu.index, gpu.bus_id, fields["name"], fields)
            for gpu, fields in ((gpu, smi_q.health_fields(gpu)) for gpu in smi_q.parse(text))]


def _with_sram_threshold(node: Node, gpus: list) -> list:
    """Where a GPU counts SRAM uncorrectable errors, the driver's "SRAM Threshold Exceeded" flag (NVIDIA's
    RMA criterion for SRAM) from `nvidia-smi -q -d ECC`, asked only then."""
    if not any(gpu.number_or_none(name) for gpu in gpus for name in
               ("ecc.errors.uncorrected.aggregate.sram", "ecc.errors.uncorrected.volatile.sram")):
        return gpus
    out = node.run(Q_ECC_ARGV, timeout_s=20.0)
    if not out.ok:
        return gpus
    flags = {gpu.bus_id.lower(): gpu.get("ECC Errors/Aggregate/SRAM Threshold Exceeded")
             for gpu in smi_q.parse(out.stdout)}
    for gpu in gpus:
        flag = flags.get(gpu.bus_id.lower())
        if flag is not None:
            gpu.fields.setdefault(SRAM_THRESHOLD, flag)
    return gpus


def argv(fields=FIELDS) -> list:
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv"]


def _header_name(column: str) -> str:
    name = column.split(" [")[0].strip()  # "power.draw [W]" -> "power.draw"
    return name.replace("clocks_event_reasons.", "clocks_throttle_reasons.")  # new name -> the alias asked


def parse(text: str) -> list:
    """`nvidia-smi --query-gpu=... --format=csv` (header first) -> [GpuHealth]; columns by header name,
    so wider captures (and the R535+ clocks_event_reasons names) parse the same."""
    try:
        rows = [row for row in csv.reader(text.splitlines(), skipinitialspace=True) if row]
    except csv.Error as exc:
        raise HealthParseError(f"nvidia-smi output is not CSV: {exc}") from None
    if not rows:
        raise HealthParseError("nvidia-smi printed nothing")
    header = [_header_name(column) for column in rows[0]]
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        raise HealthParseError(f"nvidia-smi header lacks {', '.join(missing)}: {text.strip()[:80]!r}")
    gpus = []
    for row in rows[1:]:
        if len(row) != len(header):
            raise HealthParseError(f"a row has {len(row)} fields, the header {len(header)}")
        values = dict(zip(header, (value.strip() for value in row)))
        if not values["index"].isdigit():
            raise HealthParseError(f"GPU index {values['index']!r} is not a number")
        gpus.append(GpuHealth(int(values["index"]), values["pci.bus_id"], values["name"], values))
    return gpus


def query(node: Node) -> tuple:
    """(gpus, reason): the readings, or [] and why none could be had. Memoised for the run. Where the CSV
    query is not answered (an old driver, or a capture of `nvidia-smi -q` alone through --inject), the
    same readings come from `nvidia-smi -q`."""
    if "health_smi" in node.memo:
        return node.memo["health_smi"]
    gpus, reason = _query_csv(node)
    if gpus:
        gpus = _with_sram_threshold(node, gpus)
    elif reason:
        out = node.run(Q_ARGV, timeout_s=60.0)
        from_q = from_smi_q(out.stdout) if out.ok else []
        if from_q:
            gpus, reason = from_q, ""
    node.memo["health_smi"] = answer = (gpus, reason)
    return answer


def _query_csv(node: Node) -> tuple:
    fields, invalid = list(FIELDS), None
    for _ in range(8):  # at most seven unknown fields dropped (drivers older than R535)
        out = node.run(argv(fields), timeout_s=20.0)
        if out.missing:
            return [], "nvidia-smi is not installed"
        invalid = _INVALID.search(out.stdout + out.stderr)
        if invalid and invalid.group(1) in fields and invalid.group(1) not in REQUIRED:
            fields.remove(invalid.group(1))
            continue
        if not out.ok:
            message = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[0]
            return [], f"nvidia-smi failed: {message[:160]}"
        return parse(out.stdout), ""
    return [], f"nvidia-smi rejected the health fields (last: {invalid.group(1) if invalid else '?'})"
