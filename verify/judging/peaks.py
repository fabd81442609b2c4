"""Physical peaks of the links a benchmark runs over: the one home for link maths.

A measured figure above the peak of its link cannot be real (a 1-rank all-reduce, a timer that
never started), so judged() turns it into ERROR. Floors for hardware no profile describes are
derived from the same peaks. Every figure is GB/s (1e9 bytes) in ONE direction unless named.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Optional

# PCIe transfer rate per lane (GT/s) and line-code efficiency by generation: gen1/2 8b/10b,
# gen3-5 128b/130b, gen6 FLIT mode 242/256 (PCI-SIG base specifications).
PCIE_GT_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
# ASCII digits, bounded (sysfs writes "32.0 GT/s PCIe"): "1.2.3 GT/s", a superscript digit or a 5000-digit
# run read from a damaged tree is no rate, never a ValueError, and cannot make the search backtrack.
_GT_S = re.compile(r"(?<![0-9.])([0-9]{1,3}(?:\.[0-9]{1,4})?)[ \t]*GT/s")


@dataclass
class Peak:
    """A link's physical peak and where it was read, for the report."""

    gbps: float
    source: str
    # A bound used because the link could not be read (the fastest link there is): it keeps an impossible
    # figure ERROR, but it is not this node's peak, and reports do not show a percentage of it.
    fallback: bool = False

    def to_dict(self) -> dict:
        return {"gbps": round(self.gbps, 3), "source": self.source, **({"fallback": True} if self.fallback else {})}


def finite_peak(rate, source: str) -> Optional[Peak]:
    """The one gate every computed bound passes: a peak is a finite number above zero, or there is none
    (facts that carry NaN, infinity or nonsense make no bound, and the caller's fallback bound applies,
    so a NaN peak can never make a NaN floor that a 1e8 GB/s figure passes)."""
    try:
        value = float(rate)
    except (TypeError, ValueError, OverflowError):
        return None
    return Peak(value, source) if math.isfinite(value) and value > 0 else None


def pcie_gbps(gen: Optional[int], width: Optional[int]) -> Optional[float]:
    """GB/s per direction of a PCIe link: GT/s x lanes x encoding / 8 bits; None when unknown."""
    if not gen or not width or gen not in PCIE_GT_S or width < 1:
        return None
    return PCIE_GT_S[gen] * width * PCIE_ENCODING[gen] / 8


def pcie_gen_from_speed(text: Optional[str]) -> Optional[int]:
    """sysfs current_link_speed / max_link_speed ("32.0 GT/s PCIe", "8 GT/s") -> generation; None for any text
    that names no known rate ("Unknown", garbage, not a string)."""
    match = _GT_S.search(text) if isinstance(text, str) else None
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


# When a node's links cannot be read (no NVML, a tree under --root, gloo on CPUs) a figure is still
# bounded by the fastest GPU interconnect that exists: NVLink 5 at 900 GB/s per direction per GPU
# (NVIDIA Blackwell: 1.8 TB/s bidirectional), plus PCIe Gen6 x16, twice over for NVLS reduction.
FASTEST_NVLINK_GBPS = 900.0


def unknown_links_bound() -> Peak:
    """The busbw bound when the node's links are unknown: no real all-reduce exceeds it."""
    total = 2 * (FASTEST_NVLINK_GBPS + pcie_gbps(6, 16))
    return Peak(total, f"links unknown: busbw bound {total:.0f} GB/s = 2 x (NVLink 5 at 900 GB/s per direction"
                       " + PCIe Gen6 x16), the fastest GPU interconnect there is", fallback=True)


# Host<->GPU copies travel over PCIe, or NVLink-C2C on Grace Hopper/Blackwell (450 GB/s per
# direction, NVIDIA GH200 datasheet: 900 GB/s bidirectional): the fastest host link there is.
FASTEST_HOST_LINK_GBPS = 450.0


def unknown_host_link_bound() -> Peak:
    """The host-copy bound when the GPU's host link is unknown."""
    return Peak(FASTEST_HOST_LINK_GBPS, "host link unknown: bound 450 GB/s per direction (NVLink-C2C, the "
                                        "fastest CPU-GPU link there is)", fallback=True)


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


def allreduce_reachable(nvlink_per_gpu: Optional[float], pcie: Optional[Peak],
                        nvls_ran: bool = False) -> Optional[Peak]:
    """The busbw a ring or tree all-reduce can reach inside a node: each GPU sends its share over its own
    links, so one GPU's NVLink bandwidth per direction (PCIe where there is no NVLink) bounds it; NVLS
    (reduction inside the NVSwitch) can pass that, up to twice, only where NCCL used it. This is the
    "% of peak" shown beside the figure; allreduce_peak (links summed, x2) stays the garbage bound."""
    if nvlink_per_gpu:
        base = finite_peak(nvlink_per_gpu, f"ring/tree all-reduce: one GPU's NVLink, {nvlink_per_gpu:.1f} GB/s per "
                                           "direction")
    else:
        base = finite_peak(pcie.gbps, f"ring/tree all-reduce over PCIe: {pcie.source}") if pcie else None
    if base is None or not nvls_ran:
        return base
    return Peak(2 * base.gbps, f"NVLS ran: up to 2 x ({base.source})")


# ---- GPU engines (verify/bench/gpu_*.py) ---------------------------------------------------------

def hbm_peak(bus_width_bits: Optional[int], mem_clock_mhz: Optional[float], origin: str = "NVML") -> Optional[Peak]:
    """A GPU's memory bandwidth: bus width (bits) / 8 x max memory clock x 2 (HBM/GDDR move data on
    both clock edges, NVML reports the base clock: 5120 bits x 2619 MHz = 3352 GB/s on H100 SXM,
    NVIDIA's 3.35 TB/s). A device-to-device copy moves read + write traffic through the same bus."""
    try:
        if not bus_width_bits or not mem_clock_mhz or bus_width_bits < 1 or mem_clock_mhz <= 0:
            return None
        rate = bus_width_bits / 8 * mem_clock_mhz * 1e6 * 2 / 1e9
    except (TypeError, OverflowError):  # facts of the wrong type make no bound (finite_peak)
        return None
    return finite_peak(rate, f"HBM {bus_width_bits}-bit x {mem_clock_mhz:g} MHz x 2 (DDR) = {rate:.0f} GB/s ({origin})")


# Dense BF16 tensor-core FLOP per SM per clock, by compute capability (major, minor). Each is the
# datasheet's dense rate / (SMs x the clock it was quoted at):
#   7.0 V100 (FP16, no BF16): 125 TF / (80 x 1530 MHz) = 1021 -> 1024 (NVIDIA Tesla V100 whitepaper)
#   7.5 T4 (FP16): 65 TF / (40 x 1590 MHz) = 1022 -> 1024 (NVIDIA T4 datasheet)
#   8.0 A100: 312 TF / (108 x 1410 MHz) = 2049 -> 2048 (NVIDIA A100 whitepaper)
#   8.6 A40: 149.7 TF / (84 x 1740 MHz) = 1024 (NVIDIA A40 datasheet)
#   8.9 L40S: 362 TF / (142 x 2520 MHz) = 1012 -> 1024 (NVIDIA L40S datasheet)
#   9.0 H100 SXM5: 989.4 TF / (132 x 1830 MHz) = 4096 (NVIDIA H100 whitepaper)
#   10.0 B200: 2250 TF / (148 x 1965 MHz) = 7737 -> 8192 (NVIDIA HGX B200 datasheet, dense)
# At the GPU's max SM clock this is a bound no real matmul passes (H200: 132 x 4096 x 1980 MHz = 1070 TF).
DENSE_BF16_FLOP_PER_SM_CLOCK = {(7, 0): 1024, (7, 5): 1024, (8, 0): 2048, (8, 6): 1024, (8, 7): 2048,
                                (8, 9): 1024, (9, 0): 4096, (10, 0): 8192}


def matmul_peak(capability, sm_count: Optional[int], max_sm_clock_mhz: Optional[float]) -> Optional[Peak]:
    """Dense BF16 TFLOPS bound: FLOP per SM per clock (table above) x SMs x max SM clock; None when unknown."""
    try:
        key = (int(capability[0]), int(capability[1]))
    except (TypeError, ValueError, IndexError):
        return None
    per_clock = DENSE_BF16_FLOP_PER_SM_CLOCK.get(key)
    try:
        if not per_clock or not sm_count or not max_sm_clock_mhz or max_sm_clock_mhz <= 0:
            return None
        rate = per_clock * sm_count * max_sm_clock_mhz * 1e6 / 1e12
    except (TypeError, OverflowError):
        return None
    return finite_peak(rate, f"sm_{key[0]}{key[1]} dense BF16 {per_clock} FLOP/SM/clock x {sm_count} SMs x "
                      f"{max_sm_clock_mhz:g} MHz max SM clock = {rate:.0f} TFLOPS")


def pair_copy_peak(nvlink_src: float, nvlink_dst: float, pcie: Optional[Peak]) -> Optional[Peak]:
    """One direction of a GPU-to-GPU copy: the slower end's NVLink (sum of its active links per
    direction), else the PCIe link when neither GPU has NVLink; None when nothing is known."""
    if nvlink_src and nvlink_dst:
        rate = min(nvlink_src, nvlink_dst)
        return finite_peak(rate, f"NVLink {rate:.1f} GB/s per direction (the slower GPU's active links)")
    return pcie


# ---- storage (verify/bench/storage.py: O_DIRECT, cuFile, gdsio read one file) -------------------

# SATA revision 3.x signals at 6 Gb/s with 8b/10b line code: 600 MB/s of data (SATA-IO, SATA 3.0 spec).
SATA_GBPS = 6.0 * 8 / 10 / 8
# A storage device with no link to read (virtio, SAS, a file system without a block device) is still
# bounded by the fastest link a storage device attaches by: a PCIe Gen6 x16 slot (121 GB/s per
# direction). A file system spanning many NICs (Lustre, Weka) can in principle read faster than one
# slot: such a mount needs the device-specific bound this fallback stands in for.
FASTEST_STORAGE_LINK = (6, 16)


def sata_peak(device: str) -> Peak:
    return Peak(SATA_GBPS, f"SATA 6 Gb/s, 8b/10b = {SATA_GBPS:.1f} GB/s ({device})")


def unknown_storage_bound(why: str = "storage link unknown") -> Peak:
    """The read bound when the device's link cannot be read: the fastest storage link there is."""
    gen, width = FASTEST_STORAGE_LINK
    rate = pcie_gbps(gen, width)
    return Peak(rate, f"{why}: bound {rate:.0f} GB/s = PCIe Gen{gen} x{width}, the fastest link a storage device"
                      " attaches by", fallback=True)


def summed_peak(parts: Iterable[Peak], label: str) -> Optional[Peak]:
    """Several links read at once (an md/dm array's members, NVMe multipath's controllers): their sum."""
    parts = list(parts)
    if not parts:
        return None
    total = sum(p.gbps for p in parts)
    return Peak(total, f"{label}: {total:.1f} GB/s = " + " + ".join(p.source for p in parts))


# ---- RDMA (verify/bench/perftest.py) and the fleet's inter-node rail ------------------------------

# The fastest InfiniBand port there is: XDR 4x, 200 Gb/s per lane = 800 Gb/s (IBTA roadmap; NVIDIA
# Quantum-X800 / ConnectX-8). A port whose rate sysfs does not give is bounded by it.
FASTEST_IB_GBITS = 800.0
# A one-way RDMA latency (perftest's t_typical is half a round trip) at or below this cannot be real:
# the fastest adapters quote "sub 0.6 us" end to end (NVIDIA ConnectX-6/ConnectX-7 VPI product
# briefs), of which PCIe doorbells and DMA alone take several hundred ns; 0.00 us is a broken timer.
RDMA_LATENCY_FLOOR_US = 0.5


def rdma_port_bound(rate_gbits: Optional[float], bidirectional: bool = False) -> Peak:
    """perftest bandwidth bound in Gb/s (perftest --report_gbits), not GB/s: the port's own rate
    (x2 both directions at once), else the fastest InfiniBand port there is."""
    factor = 2 if bidirectional else 1
    both = " x 2 directions (-b)" if bidirectional else ""
    if rate_gbits and rate_gbits > 0:
        return Peak(rate_gbits * factor, f"port rate {rate_gbits:g} Gb/s{both} (/sys/class/infiniband/*/ports/*/rate)")
    return Peak(FASTEST_IB_GBITS * factor, f"port rate unknown: {FASTEST_IB_GBITS:g} Gb/s{both}, XDR 4x, the "
                                           "fastest InfiniBand port there is", fallback=True)


def internode_busbw_bound(port_rates_gbits: Iterable[Optional[float]]) -> Peak:
    """The bound of a multi-node all-reduce's busbw (GB/s) from this node's active RDMA ports.

    In a ring, all the bytes busbw counts leave the node through its NICs, so ring busbw <= the sum
    of the node's port rates; tree and in-network reduction (SHARP, NVLS tree) send each byte across
    the rail once where busbw counts it twice (480 GB/s measured over 8 x 400 Gb/s of HCAs), hence
    2 x the sum. A port whose rate is unknown counts as XDR 800 Gb/s; a node with no RDMA port (gloo
    or NCCL over TCP) falls back to the per-GPU links bound, which no all-reduce rank exceeds.
    """
    rates = list(port_rates_gbits)
    if not rates:
        bound = unknown_links_bound()
        return Peak(bound.gbps, f"no RDMA port on this node: {bound.source}", fallback=True)
    known = [r for r in rates if r and r > 0]
    total_gbits = sum(known) + FASTEST_IB_GBITS * (len(rates) - len(known))
    rate = 2 * total_gbits / 8
    unknown = f", {len(rates) - len(known)} of unknown rate counted as XDR 800 Gb/s" if len(known) < len(rates) else ""
    return Peak(rate, f"inter-node rail: busbw bound {rate:.0f} GB/s = 2 (tree/SHARP) x {total_gbits:g} Gb/s of "
                      f"{len(rates)} RDMA port(s){unknown}")


def socket_transport_bound(pcie: Optional[Peak], speed_mbits: Optional[int] = None, ifname: str = "") -> Optional[Peak]:
    """The busbw bound of an all-reduce that rode NCCL's socket transport (NET/Socket, verify.bench.nccl_transport).

    The socket transport has no GPUDirect RDMA (NCCL prints "NET/Socket : GPU Direct RDMA Disabled for HCA 0 'lo'"
    for each of its devices), so every byte a rank sends leaves its GPU over PCIe into host memory before a socket
    takes it: busbw (the bytes each rank sends per second) <= the GPU's PCIe link per direction. Over a NIC with a
    known speed it is also <= 2 x that speed (tree, as internode_busbw_bound). Loopback has no wire and no speed
    (NCCL: "Could not get speed from /sys/class/net/lo/speed"): the PCIe link is its bound. None when neither is known.
    """
    parts = [(pcie.gbps, f"the GPU's host link, {pcie.source}, every byte staged in host memory")] if pcie else []
    if speed_mbits and speed_mbits > 0:
        parts.append((2 * speed_mbits / 8000, f"2 (tree) x {ifname or 'the NIC'} at {speed_mbits} Mb/s"))
    if not parts:
        return None
    rate, why = min(parts)
    return finite_peak(rate, f"NCCL socket transport{f' over {ifname}' if ifname else ''}: busbw bound {rate:.1f} GB/s"
                             f" = {why}")
