"""Physical peaks of the links a benchmark runs over: the one home for link maths.

A measured figure above the peak of its link cannot be real (a 1-rank all-reduce, a timer that
never started), so judged() turns it into ERROR. Floors for hardware no profile describes are
derived from the same peaks. Every figure is GB/s (1e9 bytes) in ONE direction unless named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

# PCIe transfer rate per lane (GT/s) and line-code efficiency by generation: gen1/2 8b/10b,
# gen3-5 128b/130b, gen6 FLIT mode 242/256 (PCI-SIG base specifications).
PCIE_GT_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
_GT_S = re.compile(r"([\d.]+)\s*GT/s")


@dataclass
class Peak:
    """A link's physical peak and where it was read, for the report."""

    gbps: float
    source: str

    def to_dict(self) -> dict:
        return {"gbps": round(self.gbps, 3), "source": self.source}


def pcie_gbps(gen: Optional[int], width: Optional[int]) -> Optional[float]:
    """GB/s per direction of a PCIe link: GT/s x lanes x encoding / 8 bits; None when unknown."""
    if not gen or not width or gen not in PCIE_GT_S or width < 1:
        return None
    return PCIE_GT_S[gen] * width * PCIE_ENCODING[gen] / 8


def pcie_gen_from_speed(text: Optional[str]) -> Optional[int]:
    """sysfs current_link_speed / max_link_speed ("32.0 GT/s PCIe", "8 GT/s") -> generation."""
    match = _GT_S.search(text or "")
    if not match:
        return None
    rate = float(match.group(1))
    for gen, gt_s in PCIE_GT_S.items():
        if abs(gt_s - rate) < 0.05:
            return gen
    return None


def pcie_peak(links: Iterable[tuple]) -> Optional[Peak]:
    """The fastest of several (gen, width, who-said-so) readings of one link.

    NVML and sysfs can disagree inside a VM (an emulated root port may claim Gen1 x1), and a
    false peak would call a real measurement broken, so the highest reading is the bound.
    """
    best: Optional[Peak] = None
    for gen, width, origin in links:
        rate = pcie_gbps(gen, width)
        if rate is not None and (best is None or rate > best.gbps):
            best = Peak(rate, f"PCIe Gen{gen} x{width} = {rate:.1f} GB/s per direction ({origin})")
    return best


def nvlink_gbps(link_speeds: Iterable[float]) -> float:
    """One GPU's NVLink bandwidth per direction: the sum of its active links (nvidia-smi per-link GB/s)."""
    return float(sum(link_speeds))


def ib_gbps(rate_gbits: Optional[float]) -> Optional[float]:
    """An HCA port's data rate (Gb/s, /sys/class/infiniband/*/ports/*/rate) in GB/s per direction."""
    return None if not rate_gbits else rate_gbits / 8


def allreduce_peak(
    nvlink_per_gpu: Optional[float], pcie: Optional[Peak], nvls: bool = False
) -> Optional[Peak]:
    """Upper bound of an intra-node all-reduce's busbw.

    busbw = bytes each GPU sends / time for ring and tree algorithms, and a GPU sends only over its
    NVLinks and its PCIe link, so their sum bounds it. NVLS reduces inside the NVSwitch and can
    reach up to twice that (478.87 GB/s measured on 8x H100 over 450 GB/s NVLink, nccl-tests#212).
    Unknown links (no NVLink count and no PCIe reading): None, no bound.
    """
    if not nvlink_per_gpu and pcie is None:
        return None
    parts, total = [], 0.0
    if nvlink_per_gpu:
        total += nvlink_per_gpu
        parts.append(f"NVLink {nvlink_per_gpu:.1f} GB/s per GPU")
    if pcie is not None:
        total += pcie.gbps
        parts.append(pcie.source)
    source = " + ".join(parts)
    if nvls:
        total *= 2
        source = f"2 x ({source}): NVLS reduces in the switch"
    return Peak(total, f"busbw bound {total:.1f} GB/s = {source}")
