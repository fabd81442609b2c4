"""The node's links as its tools and sysfs describe them: RDMA ports under /sys/class/infiniband and
NVLink speeds from `nvidia-smi nvlink --status`. Parsers and readers only: what a link should be is
judged elsewhere (verify.judging, the health checks and the benchmarks)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional


class LinkParseError(ValueError):
    """A link tool printed something that is not its documented format."""


@dataclass
class Port:
    device: str
    port: int
    rate_gbits: Optional[float]
    link_layer: str
    state: str

    @property
    def active(self) -> bool:
        return "ACTIVE" in self.state


def parse_port_rate(text: str) -> Optional[float]:
    """`/sys/class/infiniband/<dev>/ports/<n>/rate`, e.g. '400 Gb/sec (4X NDR)' -> 400.0."""
    match = re.match(r"\s*(\d{1,6}(?:\.\d{1,6})?)\s*Gb/sec", text, re.ASCII)
    return float(match.group(1)) if match else None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(4096).strip()
    except OSError:
        return ""


def discover_ports(root: str) -> list:
    base = os.path.join(root, "sys", "class", "infiniband")
    ports = []
    for device in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        port_dir = os.path.join(base, device, "ports")
        for number in sorted(os.listdir(port_dir)) if os.path.isdir(port_dir) else []:
            if not (number.isascii() and number.isdigit() and len(number) <= 4):
                continue  # sysfs names ports 1, 2, ...; anything else is not a port
            here = os.path.join(port_dir, number)
            ports.append(
                Port(
                    device,
                    int(number),
                    parse_port_rate(_read(os.path.join(here, "rate"))),
                    _read(os.path.join(here, "link_layer")),
                    _read(os.path.join(here, "state")),
                )
            )
    return ports


def parse_nvlink_status(text: str) -> dict:
    """`nvidia-smi nvlink --status`: GPU index -> list of per-link GB/s (inactive links omitted)."""
    links: dict = {}
    gpu = None
    for number, line in enumerate(text.splitlines(), 1):
        head = re.match(r"^GPU\s+(\d{1,6}):", line, re.ASCII)
        if head:
            gpu = int(head.group(1))
            links[gpu] = []
            continue
        speed = re.match(r"^\s+Link\s+\d+:\s+(\d{1,9}(?:\.\d{1,9})?)\s+GB/s", line, re.ASCII)
        if speed and gpu is not None:
            links[gpu].append(float(speed.group(1)))
        elif speed is None and re.match(r"^\s+Link\s+\d+:\s+[^<\s]*\s+GB/s", line) and gpu is not None:
            raise LinkParseError(f"nvidia-smi nvlink --status line {number}: unreadable speed: {line.strip()[:80]!r}")
    return links
