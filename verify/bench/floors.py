"""The floors each benchmark derives from the node's links when no profile gives one, said in one line
for the report (each ratio lives with the benchmark that judges by it)."""
from __future__ import annotations

from verify.bench.gpu_judge import DERIVED as GPU_RATIOS
from verify.bench.hostcopy import DERIVED_RATIO as COPY_RATIO
from verify.bench.nccl import NVLINK_FAIL_SHARE
from verify.bench.perftest import DERIVED_RATIO as RDMA_RATIO
from verify.facts.hardware import Hardware


def derived_floors(found: Hardware) -> str:
    """The floors each benchmark derives from these links when no profile gives one, in one line."""
    parts = []
    nvlink = found.nvlink_per_gpu()
    if len(found.gpus) >= 2 and nvlink:
        parts.append(f"all-reduce busbw >= {NVLINK_FAIL_SHARE:g} x NVLink {nvlink:.1f} GB/s per GPU"
                     f" = {NVLINK_FAIL_SHARE * nvlink:.1f} GB/s")
    elif len(found.gpus) >= 2:
        unread = f"NVLink unknown: {found.nvlink_reason}" if found.nvlink_reason else "no NVLink reported"
        parts.append(f"all-reduce recorded only ({unread})")
    pcie = found.pcie_peak()
    if found.gpus:
        parts.append(f"host copies >= {COPY_RATIO.limit:g} x the PCIe link NVML reports per GPU"
                     + (f" (sysfs: {pcie.source})" if pcie else ""))
    if found.gpus:
        parts.append(f"GPU HBM >= {GPU_RATIOS['hbm'].limit:g} x NVML bus width x memory clock x 2, BF16 matmul >= "
                     f"{GPU_RATIOS['matmul'].limit:g} x dense peak at max SM clock"
                     + (f", GPU pair copies >= {GPU_RATIOS['copy'].limit:g} x NVLink" if len(found.gpus) >= 2 else "")
                     + "; every GPU figure above NVML's peak, else the model table's datasheet figure x its margin, "
                       "else the fastest GPU's, is ERROR")
    rates = sorted({h.rate_gbits for h in found.active_hcas if h.rate_gbits})
    if rates:
        parts.append(f"RDMA >= {RDMA_RATIO.limit:g} x port rate ({', '.join(f'{r:g}' for r in rates)} Gb/s)")
    parts.append("storage recorded only")
    return "; ".join(parts)
