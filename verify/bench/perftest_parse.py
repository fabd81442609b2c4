"""Pure parsers for linux-rdma/perftest output: the text table and --out_json files.

Bandwidth units follow the header: `[Gb/sec]` with --report_gbits (1e9 bits), otherwise
`[MB/sec]`, which perftest computes in MiB (2^20 bytes). Everything is returned in Gb/s.
Latencies are one-way microseconds; `t_typical` is the median.

Each parser returns its result or raises PerftestParseError naming the line or key; nothing else.
A row cut short (a killed client) is not a result: it raises, so that HCA's check is ERROR.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

MIB_TO_GBITS = (1 << 20) * 8 / 1e9
_LAT_COLUMNS = ("t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p99_9")


@dataclass
class PerftestRow:
    size_bytes: int
    iterations: int
    bw_peak_gbits: Optional[float] = None
    bw_avg_gbits: Optional[float] = None
    msg_rate_mpps: Optional[float] = None
    latency_us: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PerftestResult:
    kind: str  # "bw" or "lat"
    test: str = ""
    device: str = ""
    link_type: str = ""
    rows: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    @property
    def largest(self) -> Optional[PerftestRow]:
        return max(self.rows, key=lambda r: r.size_bytes) if self.rows else None


class PerftestParseError(ValueError):
    """perftest output that cannot be read; the message names the line or the JSON key."""


def _float(text: str) -> Optional[float]:
    try:
        return float(text) if text.isascii() else None
    except ValueError:
        return None


def _count(text: str) -> Optional[int]:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None


def parse_text(text: str) -> PerftestResult:
    """The table after the ` #bytes` header; warnings between header and rows are kept aside."""
    found = PerftestResult(kind="bw")
    header = None
    scale = 1.0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        title = re.match(r"^([\w ]+?(?:BW|Latency) Test)$", line)
        if title:
            found.test = title.group(1)
            continue
        device = re.search(r"Device\s*:\s*(\S+)", line)
        if device and not found.device:
            found.device = device.group(1)
        link = re.match(r"Link type\s*:\s*(\S+)", line)
        if link:
            found.link_type = link.group(1)
        if line.startswith("#bytes"):
            header = line
            found.kind = "lat" if "t_min" in line else "bw"
            scale = 1.0 if "Gb/sec" in line else MIB_TO_GBITS
            continue
        if header is None or not line or line.startswith("-"):
            continue
        values = line.split()
        if _count(values[0]) is None:
            found.warnings.append(line)
            continue
        numbers = [_float(v) for v in values]
        wanted = 4 if found.kind == "bw" else 3
        if len(values) < wanted or _count(values[1]) is None:
            raise PerftestParseError(f"line {number}: result row cut short: {line[:80]!r}")
        row = PerftestRow(size_bytes=_count(values[0]) or 0, iterations=_count(values[1]) or 0)
        if found.kind == "bw":
            row.bw_peak_gbits = numbers[2] * scale if numbers[2] is not None else None
            row.bw_avg_gbits = numbers[3] * scale if numbers[3] is not None else None
            row.msg_rate_mpps = numbers[4] if len(numbers) > 4 else None
        elif found.kind == "lat":
            row.latency_us = {k: v for k, v in zip(_LAT_COLUMNS, numbers[2:]) if v is not None}
        found.rows.append(row)
    return found


def _lenient_json(text: str) -> dict:
    """perftest before 2023 wrote JSON with bare words and trailing commas (linux-rdma/perftest#216)."""
    from verify.bounded_load import BoundedLoadError, loads_json_bounded

    try:
        return loads_json_bounded(text, "perftest --out_json", max_depth=8, allow_nan=True)
    except BoundedLoadError as exc:
        if "nested deeper" in str(exc):
            raise PerftestParseError(str(exc)) from None
    fixed = re.sub(r"([{,]\s*)([A-Za-z_][\w.%]*)\s*:", r'\1"\2":', text)
    fixed = re.sub(r":\s*([A-Za-z_][\w\-]*)\s*([,}\n])", r': "\1"\2', fixed)
    fixed = re.sub(r",\s*([}\]])", r"\1", fixed)
    try:
        return loads_json_bounded(fixed, "perftest --out_json", max_depth=8, allow_nan=True)
    except BoundedLoadError as exc:
        raise PerftestParseError(str(exc)) from None


def _mapping(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise PerftestParseError(f"perftest --out_json: {where} is {type(value).__name__}, not an object")
    return value


def _whole(value, where: str) -> int:
    """MsgSize / n_iterations: a whole number >= 0 (JSON may hold it as 65536 or "65536")."""
    number = _num(value)
    if number is None or not number.is_integer() or number < 0 or number > 1 << 62:
        raise PerftestParseError(f"perftest --out_json: {where} is {value!r:.40}, not a count")
    return int(number)


def parse_json(text: str) -> PerftestResult:
    data = _mapping(_lenient_json(text), "the document")
    info = _mapping(data.get("test_info", {}), "test_info")
    results = data.get("results", data.get("results_local", {}))
    rows_data = results if isinstance(results, list) else [results]
    rows_data = [_mapping(r, f"results[{i}]") for i, r in enumerate(rows_data)]
    kind = "lat" if any("t_min" in r for r in rows_data) else "bw"
    found = PerftestResult(
        kind=kind,
        test=str(info.get("test", "")),
        device=str(info.get("Device", "")),
        link_type=str(info.get("Link_type", "")),
    )
    # JSON carries no unit: perftest writes Gb/s when run with --report_gbits (always, from tunefleet).
    for index, item in enumerate(rows_data):
        row = PerftestRow(size_bytes=_whole(item.get("MsgSize", 0), f"results[{index}].MsgSize"),
                          iterations=_whole(item.get("n_iterations", 0), f"results[{index}].n_iterations"))
        if kind == "bw":
            row.bw_peak_gbits = _num(item.get("BW_peak"))
            row.bw_avg_gbits = _num(item.get("BW_average"))
            row.msg_rate_mpps = _num(item.get("MsgRate"))
        else:
            keys = {
                "t_min": "t_min",
                "t_max": "t_max",
                "t_typical": "t_typical",
                "t_avg": "t_avg",
                "t_stdev": "t_stdev",
                "percentile_99": "p99",
                "percentile_99.9": "p99_9",
            }
            row.latency_us = {ours: _num(item[theirs]) for theirs, ours in keys.items() if theirs in item}
        found.rows.append(row)
    return found


def _num(value) -> Optional[float]:
    """A JSON figure as a float (NaN and inf kept: judging refuses them); None when not a number."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str) and not value.isascii():
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None
