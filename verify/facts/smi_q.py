"""`nvidia-smi -q` text (the form every bug report pastes) read into the readings the health checks judge.

One parser for every section the checks judge: ECC mode and errors (SRAM and DRAM apart, the "SRAM
Threshold Exceeded" flag), retired pages, remapped rows, clocks event (throttle) reasons, temperatures,
power, the PCIe link and the fabric with its health summary. Its output is keyed by the `--query-gpu` field
names (verify.facts.health_smi.FIELDS), so a pasted report, an `--inject` capture and the live node's CSV
meet the same judges and get the same verdict.

The text is a tree by indentation (4 spaces a level): "Key : value" lines, and section headers ("ECC
Errors", "Volatile") with no value. The parser is total: a line it cannot place is skipped, a value it
cannot read is left as text for the judge's own unreadable answer; nothing raises.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

MAX_LINES = 200_000  # an 8-GPU node prints about 2,500; this only bounds a damaged capture
_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_COUNT = re.compile(r"^\d{1,20}$", re.ASCII)

# --query-gpu field -> the -q paths that hold it, newest driver first ("Clocks Event Reasons" since R535,
# "Clocks Throttle Reasons" before; "GPU Power Readings" since R530, "Power Readings" before).
_REASONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
_PATHS = {
    "name": ("Product Name",),
    "vbios_version": ("VBIOS Version",),
    "ecc.mode.current": ("ECC Mode/Current",),
    "retired_pages.pending": ("Retired Pages/Pending Page Blacklist", "Retired Pages/Pending"),
    "remapped_rows.correctable": ("Remapped Rows/Correctable Error",),
    "remapped_rows.uncorrectable": ("Remapped Rows/Uncorrectable Error",),
    "remapped_rows.pending": ("Remapped Rows/Pending",),
    "remapped_rows.failure": ("Remapped Rows/Remapping Failure Occurred",),
    "clocks_throttle_reasons.hw_slowdown": tuple(f"{r}/HW Slowdown" for r in _REASONS),
    "clocks_throttle_reasons.hw_thermal_slowdown": tuple(f"{r}/HW Thermal Slowdown" for r in _REASONS),
    "clocks_throttle_reasons.hw_power_brake_slowdown": tuple(f"{r}/HW Power Brake Slowdown" for r in _REASONS),
    "clocks_throttle_reasons.sw_thermal_slowdown": tuple(f"{r}/SW Thermal Slowdown" for r in _REASONS),
    "clocks_throttle_reasons.sw_power_cap": tuple(f"{r}/SW Power Cap" for r in _REASONS),
    "temperature.gpu": ("Temperature/GPU Current Temp",),
    "temperature.gpu.tlimit": ("Temperature/GPU T.Limit Temp",),
    "temperature.memory": ("Temperature/Memory Current Temp",),
    "power.draw": ("GPU Power Readings/Instantaneous Power Draw", "GPU Power Readings/Power Draw",
                   "Power Readings/Power Draw"),
    "enforced.power.limit": ("GPU Power Readings/Current Power Limit", "Power Readings/Enforced Power Limit"),
    "pcie.link.gen.current": ("PCI/GPU Link Info/PCIe Generation/Current",),
    "pcie.link.gen.max": ("PCI/GPU Link Info/PCIe Generation/Max",),
    "pcie.link.width.current": ("PCI/GPU Link Info/Link Width/Current",),
    "pcie.link.width.max": ("PCI/GPU Link Info/Link Width/Max",),
    # not --query-gpu fields: the flag and the fabric's health, read only here (and NVML)
    "ecc.sram_threshold_exceeded": ("ECC Errors/Aggregate/SRAM Threshold Exceeded",),
    "fabric.state": ("Fabric/State",),
    "fabric.status": ("Fabric/Status",),
    "fabric.health.summary": ("Fabric/Health/Summary",),
    "fabric.health.bandwidth": ("Fabric/Health/Bandwidth",),
    "fabric.health.route_recovery": ("Fabric/Health/Route Recovery in progress",),
    "fabric.health.route_unhealthy": ("Fabric/Health/Route Unhealthy",),
    "fabric.health.access_timeout_recovery": ("Fabric/Health/Access Timeout Recovery",),
    "fabric.health.incorrect_configuration": ("Fabric/Health/Incorrect Configuration",),
}
# The uncorrectable counters: SRAM is split by protection since R535 ("SRAM Uncorrectable Parity" + "SRAM
# Uncorrectable SEC-DED"), one "SRAM Uncorrectable" before; pre-Ampere GPUs print "Double Bit / Total".
_SRAM = ("SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "SRAM Uncorrectable")
_DRAM = ("DRAM Uncorrectable",)
_DOUBLE_BIT = ("Double Bit/Total",)


@dataclass
class SmiQGpu:
    """One "GPU <bus id>" block: every "Key : value" line by its path ("ECC Errors/Volatile/DRAM Uncorrectable")."""
    index: int  # the order printed (nvidia-smi -q prints in index order)
    bus_id: str
    values: dict = field(default_factory=dict)

    def get(self, *paths: str) -> Optional[str]:
        return next((self.values[p] for p in paths if p in self.values), None)


def parse(text: str) -> list:
    """`nvidia-smi -q` text -> [SmiQGpu], in the order printed; [] when it holds no GPU block. Total."""
    gpus: list = []
    stack: list = []  # (indent, section name) of the open sections
    for number, line in enumerate(text.splitlines()):
        if number >= MAX_LINES:
            break
        head = _GPU.match(line)
        if head:
            gpus.append(SmiQGpu(len(gpus), head.group(1)))
            stack = []
            continue
        if not gpus or not line.strip() or not line[:1].isspace():
            continue
        indent = len(line) - len(line.lstrip())
        key, colon, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([name for _, name in stack] + [key])
        if not colon or not value:
            stack.append((indent, key))  # a section header ("ECC Errors", "Fabric", "Health")
            continue
        gpus[-1].values.setdefault(path, value)
    return gpus


def _count(value: Optional[str]) -> Optional[int]:
    """A counter as printed ("0", "12"), bounded; None for N/A or anything else."""
    return int(value) if value is not None and _COUNT.match(value) else None


def _sum(gpu: SmiQGpu, scope: str, names: tuple) -> Optional[int]:
    counts = [_count(gpu.values.get(f"ECC Errors/{scope}/{name}")) for name in names]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _text(count: Optional[int]) -> str:
    return "[N/A]" if count is None else str(count)


def health_fields(gpu: SmiQGpu) -> dict:
    """The GPU's readings keyed by --query-gpu field names (values as nvidia-smi prints them; N/A kept)."""
    fields = {"index": str(gpu.index), "pci.bus_id": gpu.bus_id}
    for name, paths in _PATHS.items():
        value = gpu.get(*paths)
        if value is not None:
            fields[name] = value
    for scope in ("volatile", "aggregate"):
        sram, dram = _sum(gpu, scope.title(), _SRAM), _sum(gpu, scope.title(), _DRAM)
        if sram is not None or dram is not None:
            fields[f"ecc.errors.uncorrected.{scope}.sram"] = _text(sram)
            fields[f"ecc.errors.uncorrected.{scope}.dram"] = _text(dram)
            fields[f"ecc.errors.uncorrected.{scope}.total"] = _text((sram or 0) + (dram or 0))
        else:
            old = _sum(gpu, scope.title(), _DOUBLE_BIT)
            if old is not None:
                fields[f"ecc.errors.uncorrected.{scope}.total"] = _text(old)
    fields.setdefault("name", "")
    return fields


_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(\d{1,4})\s*$", re.M)
_FIELD_LINE = re.compile(r"^\s+\S[^:]*?\s:\s")


def unreadable(text: str, gpus: list, lost: int = 0) -> str:
    """Why a present `nvidia-smi -q` text cannot be judged as a whole, or '' when it can: no "GPU <bus id>" block
    (a paste without its header, a foreign text), fewer blocks than its own "Attached GPUs" line counts (cut
    short; `lost` GPUs that nvidia-smi reported it could not reach are not missing), a block with no reading, or
    a last block with under half the readings of the first (cut mid-GPU)."""
    if not (text or "").strip():
        return "it printed nothing"
    attached = _ATTACHED.search(text)
    if not gpus:
        if attached and int(attached.group(1)) == 0:
            return ""
        fields = sum(1 for line in text.splitlines()[:MAX_LINES] if _FIELD_LINE.match(line))
        if fields:
            return f"{fields} field line(s) but no 'GPU <bus id>' line they belong to (a cut or edited paste)"
        return "no 'GPU <bus id>' block: not nvidia-smi -q output"
    if attached and len(gpus) + lost < int(attached.group(1)):
        return f"'Attached GPUs : {attached.group(1)}' but {len(gpus)} GPU block(s) printed (cut short)"
    empty = [gpu.bus_id for gpu in gpus if not gpu.values]
    if empty:
        return f"GPU {empty[0]} block holds no reading"
    if len(gpus) > 1 and len(gpus[-1].values) * 2 < len(gpus[0].values):
        return (f"the last GPU block ({gpus[-1].bus_id}) holds {len(gpus[-1].values)} readings, the first "
                f"{len(gpus[0].values)} (cut short)")
    return ""


def looks_like_q(text: str) -> bool:
    """Whether a text is `nvidia-smi -q` output, whole or in part: its log banner, or indented "Key : value"
    lines (a paste that lost its "GPU <bus id>" line)."""
    lines = (text or "").splitlines()[:MAX_LINES]
    return any("NVSMI LOG" in line for line in lines[:20]) or sum(1 for line in lines if _FIELD_LINE.match(line)) >= 2
