"""Which processes hold each GPU right now: `nvidia-smi --query-compute-apps`, read before the benchmarks.

A GPU another process computes on is not the GPU to benchmark: its figures would measure someone's job,
and an engine started beside it may take memory that job needs (verify.bench.engine_session hides such
GPUs from CUDA). The reader runs the command through node.run (captures replay it in drills and tests);
`parse_compute_apps` is pure.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from typing import Optional

from verify.engine import normal_bus
from verify.node import Node

ARGV = ["nvidia-smi", "--query-compute-apps=gpu_bus_id,pid,process_name,used_memory", "--format=csv"]
# A pid of thousands of digits is not a pid: numbers from a tool are bounded before int().
_MAX_DIGITS = 12


class AppsParseError(ValueError):
    pass


@dataclass
class GpuProcess:
    bus_id: str  # as nvidia-smi prints it: 00000000:18:00.0
    pid: int
    name: str
    used_mib: Optional[int]

    def describe(self) -> str:
        memory = f", {self.used_mib} MiB" if self.used_mib is not None else ""
        return f"pid {self.pid} ({self.name}{memory})"


@dataclass
class GpuProcesses:
    by_bus: dict = field(default_factory=dict)  # normal bus id -> [GpuProcess]
    unknown_reason: str = ""  # why nothing could be read (then no GPU counts as busy: said in the report)


def _number(text: str) -> Optional[int]:
    text = text.strip().split(" ")[0]
    return int(text) if text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS else None


def parse_compute_apps(text: str) -> dict:
    """`nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv` (header first)
    -> {bus id: [GpuProcess]}; "No running processes found" and a bare header are {}."""
    try:
        rows = [row for row in csv.reader(text.splitlines(), skipinitialspace=True) if row and any(row)]
    except csv.Error as exc:  # a field past csv's limit, a NUL byte: not nvidia-smi's listing
        raise AppsParseError(f"not CSV: {exc}") from None
    if not rows or rows[0][0].startswith("No running"):
        return {}
    header = [name.split(" [")[0].strip() for name in rows[0]]
    if header[:2] != ["gpu_bus_id", "pid"]:
        raise AppsParseError(f"not a --query-compute-apps header: {', '.join(header)[:80]!r}")
    found: dict = {}
    for row in rows[1:]:
        if len(row) != len(header):
            raise AppsParseError(f"a row has {len(row)} fields, the header {len(header)}")
        fields = dict(zip(header, (value.strip() for value in row)))
        pid = _number(fields["pid"])
        if pid is None:
            raise AppsParseError(f"pid {fields['pid'][:20]!r} is not a number")
        memory = _number(fields.get("used_gpu_memory", fields.get("used_memory", "")))
        process = GpuProcess(normal_bus(fields["gpu_bus_id"]), pid, fields.get("process_name") or "?", memory)
        found.setdefault(process.bus_id, []).append(process)
    return found


def read_gpu_processes(node: Node) -> GpuProcesses:
    """The compute processes on every GPU of the live node; unknown_reason says why none could be read."""
    if not node.is_live:
        return GpuProcesses(unknown_reason="GPU processes are read on the live node only (--root is set)")
    out = node.run(ARGV, timeout_s=20.0)
    if out.missing:
        return GpuProcesses(unknown_reason="nvidia-smi is not installed")
    if not out.ok:
        first = (out.stderr or out.stdout or f"exit {out.returncode}").strip().splitlines()[:1] or ["no output"]
        return GpuProcesses(unknown_reason=f"nvidia-smi --query-compute-apps failed: {first[0][:160]}")
    try:
        return GpuProcesses(parse_compute_apps(out.stdout))
    except AppsParseError as exc:
        return GpuProcesses(unknown_reason=f"nvidia-smi --query-compute-apps: {exc}")
