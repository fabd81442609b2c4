"""Pure parsers for NVIDIA GDS tools: `gdsio` result lines and `gdscheck -p` reports.

Each parser returns its result or raises GdsParseError naming the line; nothing else. A figure
that reads as a number is returned as printed (negative, NaN): judging refuses those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

GIB = float(1 << 30)
_PAIR = re.compile(r"(\w+):\s+([^\s,]+)")
# libcufile's own log (CUFILE_LOGGING_LEVEL=INFO) prints the same report with this prefix per line.
_LOG_PREFIX = re.compile(r"^\s*\d+-\d+-\d+ [\d:]+ \[pid=\d+ tid=\d+\]\s+[A-Z]+\s+\S+\s")


@dataclass
class GdsioRun:
    io_type: str
    xfer_type: str
    threads: Optional[int]
    io_size_kib: Optional[int]
    throughput_gib_s: float
    avg_latency_us: Optional[float]
    ops: Optional[int]

    @property
    def throughput_gbps(self) -> float:
        """gdsio reports GiB/s; everything else here is GB/s (1e9)."""
        return self.throughput_gib_s * GIB / 1e9

    def to_dict(self) -> dict:
        data = dict(self.__dict__)
        data["throughput_gbps"] = self.throughput_gbps
        return data


class GdsParseError(ValueError):
    """gdsio / gdscheck output that cannot be read; the message names the line."""


def _int_prefix(text: Optional[str]) -> Optional[int]:
    match = re.match(r"(\d{1,18})", text or "", re.ASCII)
    return int(match.group(1)) if match else None


def _figure(text: Optional[str], what: str, number: int, line: str) -> float:
    try:
        if text is None or not text.isascii():
            raise ValueError(text)
        return float(text)
    except ValueError:
        raise GdsParseError(f"gdsio line {number}: {what} {text!r:.30} is not a number: "
                            f"{line.strip()[:100]!r}") from None


def parse_gdsio(text: str) -> list:
    """One GdsioRun per `IoType:` line (gdsio -V prints a second READ line after verifying)."""
    runs = []
    for number, line in enumerate(text.splitlines(), 1):
        if "IoType:" not in line or "Throughput:" not in line:
            continue
        pairs = dict(_PAIR.findall(line))
        latency = re.search(r"Avg_Latency:\s+(\S+)", line)
        ops = re.search(r"ops:\s+(\d{1,18})\b", line, re.ASCII)
        runs.append(
            GdsioRun(
                io_type=pairs.get("IoType", ""),
                xfer_type=pairs.get("XferType", ""),
                threads=_int_prefix(pairs.get("Threads")),
                io_size_kib=_int_prefix(pairs.get("IOSize")),
                throughput_gib_s=_figure(pairs.get("Throughput"), "Throughput", number, line),
                avg_latency_us=_figure(latency.group(1), "Avg_Latency", number, line) if latency else None,
                ops=int(ops.group(1)) if ops else None,
            )
        )
    return runs


@dataclass
class GdsCheck:
    gds_version: Optional[str] = None
    nvidia_fs_version: Optional[str] = None
    drivers: dict = field(default_factory=dict)  # "NVMe" -> "Supported"
    properties: dict = field(default_factory=dict)  # "use_compat_mode" -> "true"
    platform_ok: Optional[bool] = None
    platform_error: Optional[str] = None

    @property
    def supported(self) -> list:
        return sorted(k for k, v in self.drivers.items() if v.lower().startswith("supported"))

    @property
    def compat_allowed(self) -> Optional[bool]:
        value = self.properties.get("use_compat_mode")
        return None if value is None else value.lower() == "true"

    @property
    def gds_possible(self) -> bool:
        """Real GPUDirect needs nvidia-fs (or P2PDMA) and at least one supported driver path."""
        return bool(self.supported) and (self.nvidia_fs_version is not None or "NVMe P2PDMA" in self.supported)

    def to_dict(self) -> dict:
        return {
            "gds_version": self.gds_version,
            "nvidia_fs_version": self.nvidia_fs_version,
            "supported": self.supported,
            "compat_allowed": self.compat_allowed,
            "platform_ok": self.platform_ok,
            "platform_error": self.platform_error,
            "gds_possible": self.gds_possible,
        }


def parse_gdscheck(text: str) -> GdsCheck:
    check = GdsCheck()
    section = ""
    for raw in text.splitlines():
        line = _LOG_PREFIX.sub("", raw).strip()
        version = re.match(r"GDS release version:\s*(\S+)", line)
        if version:
            check.gds_version = version.group(1)
            continue
        nvfs = re.match(r"nvidia_fs version:\s*(\S+)", line)
        if nvfs:
            check.nvidia_fs_version = nvfs.group(1)
            continue
        if re.match(r"=+$", line):
            continue
        if line.endswith(":") and line[:-1].isupper():
            section = line[:-1]
            continue
        if line.startswith("Platform verification succeeded"):
            check.platform_ok = True
            continue
        failed = re.match(r"Platform verification error\s*:?\s*(.*)", line)
        if failed:
            check.platform_ok = False
            check.platform_error = failed.group(1).strip() or "unknown"
            continue
        pair = re.match(r"(?:--)?([^:]+?)\s*:\s*(.+)$", line)
        if not pair:
            continue
        key, value = pair.group(1).strip(), pair.group(2).strip()
        if key.startswith("properties."):
            check.properties[key[len("properties.") :]] = value
        elif section == "DRIVER CONFIGURATION" and value.split()[0] in (
            "Supported",
            "Unsupported",
            "Enabled",
            "Disabled",
        ):
            check.drivers[key] = value
    return check
