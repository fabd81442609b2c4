"""The node's links as its tools and sysfs describe them: RDMA ports under /sys/class/infiniband and
NVLink speeds from `nvidia-smi nvlink --status`. Parsers and readers only: what a link should be is
judged elsewhere (verify.judging, the health checks and the benchmarks)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

from verify.safe_io import is_host_root, read_capped


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


def _read(path: str, root: str) -> str:
    """A port file: on the live node as sysfs has it; under --root only inside the tree, never a link."""
    live = is_host_root(root)
    try:
        return read_capped(path, 4096, follow_symlinks=live, within=None if live else root).decode(
            "utf-8", errors="replace").strip()
    except OSError:  # TooLargeError included: a port file is a few bytes
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
                    parse_port_rate(_read(os.path.join(here, "rate"), root)),
                    _read(os.path.join(here, "link_layer"), root),
                    _read(os.path.join(here, "state"), root),
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


# `nvidia-smi nvlink -s` heads each GPU's block with "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)": the
# name the GPU model table matches. A GPU whose every link is down prints no Link line but NVML's message
# "Unable to retrieve NVLink information as all links are inActive" (spelled so by the driver: see
# tests/fixtures/node/health/public/README.md).
_NVLINK_GPU_HEAD = re.compile(r"^GPU\s+(\d{1,6}):\s*(.*?)\s*(?:\(UUID:[^)]*\))?\s*$", re.ASCII)
_ALL_INACTIVE = re.compile(r"all links are inactive", re.IGNORECASE)


def parse_nvlink_gpu_names(text: str) -> dict:
    """`nvidia-smi nvlink -s` -> {GPU index: the GPU's name as printed} ('' where none is printed)."""
    names: dict = {}
    for line in text.splitlines():
        head = _NVLINK_GPU_HEAD.match(line)
        if head:
            names[int(head.group(1))] = head.group(2)
    return names


def parse_nvlink_all_inactive(text: str) -> set:
    """GPU indices whose block says that all its links are inactive (NVML prints no Link line then)."""
    gpus: set = set()
    gpu = None
    for line in text.splitlines():
        head = _NVLINK_GPU_HEAD.match(line)
        if head:
            gpu = int(head.group(1))
        elif gpu is not None and _ALL_INACTIVE.search(line):
            gpus.add(gpu)
    return gpus


@dataclass(frozen=True)
class BandwidthNotice:
    """The kernel's pcie_print_link_status() notice that a link up the path caps a device's bandwidth."""
    address: str
    available_gbits: float
    limit_gts: float
    limit_width: int
    upstream: str
    capable_gbits: float
    capable_gts: float
    capable_width: int
    line: str


_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# drivers/pci/pci.c __pcie_print_link_status(): "%u.%03u Gb/s available PCIe bandwidth, limited by %s x%d
# link at %s (capable of %u.%03u Gb/s with %s x%d link)"; the speed string is "16.0 GT/s PCIe" since Linux
# 5.x and "16 GT/s" before (both are in the public fixtures).
_NOTICE = re.compile(
    r"(?P<address>" + _BDF + r"): (?P<available>\d{1,6}\.\d{1,3}) Gb/s available PCIe bandwidth, limited by "
    r"(?P<gts>\d{1,3}(?:\.\d{1,2})?) GT/s(?: PCIe)? x(?P<width>\d{1,2}) link at (?P<upstream>" + _BDF + r") "
    r"\(capable of (?P<capable>\d{1,6}\.\d{1,3}) Gb/s with (?P<cgts>\d{1,3}(?:\.\d{1,2})?) GT/s(?: PCIe)? "
    r"x(?P<cwidth>\d{1,2}) link\)", re.ASCII)


def is_bandwidth_notice(message: str) -> bool:
    """Whether a kernel message is a 'limited by' notice (the scheduler hook keeps these with the driver's)."""
    return _NOTICE.search(message) is not None


def parse_bandwidth_notices(log: str) -> dict:
    """Kernel log text -> {PCI address (lower case): the LAST 'limited by' notice for it} (a device
    re-probed, e.g. after a driver reload, prints it again; the last one is today's link)."""
    found: dict = {}
    for line in log.splitlines():
        match = _NOTICE.search(line)
        if not match:
            continue
        address = match.group("address").lower()
        found[address] = BandwidthNotice(
            address, float(match.group("available")), float(match.group("gts")), int(match.group("width")),
            match.group("upstream").lower(), float(match.group("capable")), float(match.group("cgts")),
            int(match.group("cwidth")), line.strip()[:300])
    return found
