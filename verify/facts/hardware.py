"""What the benchmarks need to know about the node's hardware: GPUs, their NVLink and PCIe links, HCAs.

Read once per run through the Node (memoised in node.memo) so the quick-set choice, the auto
profile and the physical peaks all see the same facts. Every read is best effort: an unknown
link is None, never an exception; what could not be read is said in `gpu_reason` / `nvlink_reason`
(issue 27: the benchmark phase must not end on an `nvidia-smi nvlink --status` it cannot parse).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from verify.facts.gpu_query import query_gpus
from verify.facts.links import LinkParseError, discover_ports, parse_nvlink_status
from verify.judging import peaks
from verify.runner import which

MEMO_KEY = "bench_hardware"


@dataclass
class GpuLinks:
    index: int
    name: str
    bus_id: str
    nvlink_links: int = 0
    nvlink_gbps: float = 0.0  # per direction, sum of active links
    pcie_gen: Optional[int] = None  # current, from sysfs
    pcie_width: Optional[int] = None
    pcie_gen_max: Optional[int] = None
    pcie_width_max: Optional[int] = None

    def pcie_peak(self) -> Optional[peaks.Peak]:
        return peaks.pcie_peak([(self.pcie_gen_max, self.pcie_width_max, f"sysfs max_link of {self.bus_id}")])


@dataclass
class Hca:
    device: str
    port: int
    rate_gbits: Optional[float]
    link_layer: str
    active: bool


@dataclass
class Hardware:
    gpus: list = field(default_factory=list)
    hcas: list = field(default_factory=list)
    perftest: bool = False  # ib_write_bw on PATH
    gpu_reason: str = ""  # why no GPU is listed
    nvlink_reason: str = ""  # why the NVLinks are unknown (then 0 links means "unread", not "none")

    @property
    def active_hcas(self) -> list:
        return [h for h in self.hcas if h.active]

    def nvlink_per_gpu(self) -> Optional[float]:
        """The slowest GPU's NVLink bandwidth per direction (a ring runs at its slowest link), or None."""
        speeds = [g.nvlink_gbps for g in self.gpus]
        return min(speeds) if speeds and min(speeds) > 0 else None

    def pcie_peak(self) -> Optional[peaks.Peak]:
        """The fastest GPU PCIe link sysfs reports (an upper bound for any one GPU's traffic)."""
        found = [g.pcie_peak() for g in self.gpus]
        found = [p for p in found if p is not None]
        return max(found, key=lambda p: p.gbps) if found else None

    def describe(self) -> str:
        """One line for the report: "2x NVIDIA H200, NVLink 18 links (478.1 GB/s) per GPU, PCIe Gen5 x16, no HCA"."""
        if not self.gpus:
            parts = ["no GPU"] + ([self.gpu_reason] if self.gpu_reason else [])  # the reason's own () stay unnested
        else:
            names = sorted({g.name for g in self.gpus})
            parts = [f"{len(self.gpus)}x {' + '.join(names)}"]
            first = self.gpus[0]
            if self.nvlink_reason:
                parts.append(f"NVLink unknown ({self.nvlink_reason})")
            else:
                parts.append(
                    f"NVLink {first.nvlink_links} links ({first.nvlink_gbps:.1f} GB/s) per GPU"
                    if first.nvlink_links else "no NVLink"
                )
            if first.pcie_gen_max:
                parts.append(f"PCIe Gen{first.pcie_gen_max} x{first.pcie_width_max}")
        active = self.active_hcas
        if active:
            rates = sorted({f"{h.rate_gbits:g} Gb/s" for h in active if h.rate_gbits})
            parts.append(f"{len(active)} active HCA port(s) {', '.join(rates)}".rstrip())
        else:
            parts.append("no active HCA")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {
            "gpus": [asdict(g) for g in self.gpus],
            "hcas": [asdict(h) for h in self.hcas],
            "perftest": self.perftest,
            "gpu_reason": self.gpu_reason,
            "nvlink_reason": self.nvlink_reason,
            "summary": self.describe(),
        }


def sysfs_bdf(bus_id: str) -> str:
    """NVML's 00000000:00:06.0 -> sysfs' 0000:00:06.0."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return bus_id.lower()


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def read_pcie(node, gpu: GpuLinks) -> None:
    base = f"/sys/bus/pci/devices/{sysfs_bdf(gpu.bus_id)}"
    gpu.pcie_gen = peaks.pcie_gen_from_speed(node.read_value(f"{base}/current_link_speed"))
    gpu.pcie_width = _int(node.read_value(f"{base}/current_link_width"))
    gpu.pcie_gen_max = peaks.pcie_gen_from_speed(node.read_value(f"{base}/max_link_speed"))
    gpu.pcie_width_max = _int(node.read_value(f"{base}/max_link_width"))


def _hcas(node) -> list:
    return [Hca(p.device, p.port, p.rate_gbits, p.link_layer, p.active) for p in discover_ports(node.root)]


def read_nvlinks(node, found: Hardware) -> None:
    """Each GPU's active NVLinks from `nvidia-smi nvlink --status`; what cannot be read is nvlink_reason."""
    out = node.run(["nvidia-smi", "nvlink", "--status"], timeout_s=30)
    if out.missing:
        found.nvlink_reason = "nvidia-smi is not installed"
        return
    if not out.ok:
        message = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[0]
        found.nvlink_reason = f"nvidia-smi nvlink --status failed: {message[:160]}"
        return
    try:
        links = parse_nvlink_status(out.stdout)
    except LinkParseError as exc:
        found.nvlink_reason = str(exc)
        return
    for gpu in found.gpus:
        speeds = links.get(gpu.index) or []
        gpu.nvlink_links, gpu.nvlink_gbps = len(speeds), peaks.nvlink_gbps(speeds)


def detect(node) -> Hardware:
    """The node's benchmark-relevant hardware (memoised for the run). Total: a read that fails is a
    reason in the result, never an exception."""
    if MEMO_KEY in node.memo:
        return node.memo[MEMO_KEY]
    found = Hardware()
    try:
        inventory = query_gpus(node)
        found.gpu_reason = inventory.unavailable_reason
        found.gpus = [GpuLinks(g.index, g.name, g.bus_id) for g in inventory.gpus]
    except ValueError as exc:
        found.gpu_reason = str(exc)
    if found.gpus and node.is_live:
        read_nvlinks(node, found)
    for gpu in found.gpus:
        try:
            read_pcie(node, gpu)
        except (OSError, ValueError):
            gpu.pcie_gen = gpu.pcie_width = gpu.pcie_gen_max = gpu.pcie_width_max = None  # unknown link
    try:
        found.hcas = _hcas(node)
    except (OSError, ValueError):
        found.hcas = []
    found.perftest = which("ib_write_bw", node.root) is not None
    node.memo[MEMO_KEY] = found
    return found
