"""NVIDIA data-center GPU models: the names nvidia-smi / NVML print and the vendor's datasheet figures.

Units and conventions (every figure per GPU):
- hbm_gbps: memory bandwidth in GB/s, decimal (datasheet TB/s x 1000); GDDR for L40S / L4 / A10.
- *_dense_tflops: tensor-core TFLOPS WITHOUT sparsity. Datasheets print the tensor figures "with
  sparsity" (marked *), twice the dense rate: each such figure here is the datasheet's halved, and the
  comment beside it gives the printed one. Blackwell figures come as HGX 8-GPU or superchip totals: divided
  by the GPU count, then halved.
- nvlink_links / nvlink_gbps_per_link: links per GPU and GB/s per link per direction (NVLink 3 and 4:
  25 GB/s, NVLink 5: 50 GB/s; the datasheet's total is links x per-link x 2 directions). 0 links: no NVLink.
  nvlink_optional: the links exist only with an NVLink bridge (PCIe / NVL cards) or an NVLink fabric
  (GH200), so a node without them is not at fault.
- nvlink_smi_gbps_per_link: what `nvidia-smi nvlink --status` prints per active link (it counts the link's
  signalling rate, above the datasheet's 25 / 50 GB/s), from a public real output cited on the model; None
  where none was found.
- pcie_gen / pcie_width: the GPU's host interface as the datasheet gives it.
- tdp_w: maximum board / module power (the top of a range where the datasheet gives one).
- memory_gib: the datasheet's capacity figure ("GB" in NVIDIA's datasheets; nvidia-smi's memory.total is a
  little lower, e.g. 81559 MiB on an H100 80GB). match() uses it only to tell apart models that share a name.
- names: exact `nvidia-smi --query-gpu=name` strings. "confirmed" in a model's comment: seen in a public
  real output (cited); "inferred": not seen.

Figures not confirmed from an NVIDIA datasheet are said so on the model (H20: NVIDIA publishes no datasheet;
B200 / B300 / GB200 power and host PCIe generation).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verify.judging.peaks import Peak, pcie_gbps

_A100 = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
         "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H100_WP = "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper"
_H200 = "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446"
_GH200 = "https://resources.nvidia.com/en-us-grace-cpu/grace-hopper-superchip"
_HGX = "https://www.nvidia.com/en-us/data-center/hgx/"
_GB200 = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"
_L40S = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_L4 = "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_A10 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf"
# public real nvidia-smi outputs used for names and per-link rates
_SMI_H100 = "NVIDIA/nccl issue 1264 (nvidia-smi on 8x H100 SXM: 'NVIDIA H100 80GB HBM3', 81559MiB)"
_SMI_LINK_H100 = "stas00/ml-engineering compute/accelerator/nvidia/debug.md (nvidia-smi nvlink --status, 26.562 GB/s)"
_SMI_LINK_A100 = "AWS p4de.24xlarge output (nvidia-smi nvlink -s: 12 x 25 GB/s on NVIDIA A100-SXM4-80GB)"
_SMI_LINK_GB200 = "NVIDIA/k8s-test-infra issue 371 (nvidia-smi nvlink -s on NVIDIA GB200: 18 x 53.125 GB/s)"


@dataclass(frozen=True)
class GpuModel:
    key: str
    names: tuple[str, ...]
    hbm_gbps: float
    bf16_dense_tflops: float
    fp16_dense_tflops: float
    tf32_dense_tflops: float
    nvlink_links: int
    nvlink_gbps_per_link: float
    pcie_gen: int
    pcie_width: int
    tdp_w: float
    memory_gib: float
    source: str
    nvlink_optional: bool = False
    nvlink_smi_gbps_per_link: Optional[float] = None


MODELS: tuple[GpuModel, ...] = (
    # A100 datasheet: TF32 156 | 312*, BF16 312 | 624*, FP16 312 | 624* (dense | sparse); NVLink 600 GB/s
    # (SXM: 12 links; PCIe: NVLink bridge for 2 GPUs, 600 GB/s); PCIe Gen4 64 GB/s.
    # Names confirmed: "NVIDIA A100-SXM4-80GB, 81920 MiB" and "NVIDIA A100-SXM4-40GB, 40960 MiB" (NVIDIA/DCGM
    # issue 149; GCP a2-ultragpu output), per-link 25 GB/s confirmed on both SXM4 parts (_SMI_LINK_A100).
    GpuModel("a100-sxm4-40gb", ("NVIDIA A100-SXM4-40GB",), 1555, 312, 312, 156, 12, 25, 4, 16, 400, 40,
             _A100, nvlink_smi_gbps_per_link=25.0),
    GpuModel("a100-sxm4-80gb", ("NVIDIA A100-SXM4-80GB",), 2039, 312, 312, 156, 12, 25, 4, 16, 400, 80,
             _A100, nvlink_smi_gbps_per_link=25.0),
    # Name confirmed: "NVIDIA A100-PCIE-40GB, 40960 MiB" (several public nvidia-smi captures). Bridge rate: none found.
    GpuModel("a100-pcie-40gb", ("NVIDIA A100-PCIE-40GB",), 1555, 312, 312, 156, 12, 25, 4, 16, 250, 40,
             _A100, nvlink_optional=True),
    # Name confirmed: "NVIDIA A100 80GB PCIe, 81920 MiB" (several public nvidia-smi captures).
    GpuModel("a100-pcie-80gb", ("NVIDIA A100 80GB PCIe",), 1935, 312, 312, 156, 12, 25, 4, 16, 300, 80,
             _A100, nvlink_optional=True),
    # H100 SXM (datasheet): TF32 989*, BF16 1,979*, FP16 1,979*; 3.35 TB/s; up to 700 W; NVLink 900 GB/s
    # (18 links); PCIe Gen5 128 GB/s. Dense figures from the H100 whitepaper (_H100_WP, table "NVIDIA H100 SXM5"):
    # BF16/FP16 989.4, TF32 494.7 (132 SMs x 4096 / 2048 FLOP per clock x 1830 MHz); the datasheet's rounded
    # 1,979* halved reads 989.5. Name confirmed (_SMI_H100); 26.562 GB/s per link confirmed (_SMI_LINK_H100).
    GpuModel("h100-sxm", ("NVIDIA H100 80GB HBM3",), 3350, 989.4, 989.4, 494.7, 18, 25, 5, 16, 700, 80,
             _H100, nvlink_smi_gbps_per_link=26.562),
    # H100 PCIe (datasheet, PCIe column of the 2022 revision): TF32 756*, BF16 1,513*, FP16 1,513*; HBM2e 2 TB/s;
    # 300-350 W; NVLink bridge 600 GB/s (12 links). Name confirmed: "NVIDIA H100 PCIe, 81559 MiB" (public captures).
    GpuModel("h100-pcie", ("NVIDIA H100 PCIe",), 2000, 756.5, 756.5, 378, 12, 25, 5, 16, 350, 80,
             _H100, nvlink_optional=True),
    # H100 NVL (datasheet, NVL column): TF32 835*, BF16 1,671*, FP16 1,671*; 94 GB, 3.9 TB/s; 350-400 W;
    # NVLink bridge 600 GB/s (12 links). Name confirmed: "NVIDIA H100 NVL, 95830 MiB" (public captures).
    GpuModel("h100-nvl", ("NVIDIA H100 NVL",), 3900, 835.5, 835.5, 417.5, 12, 25, 5, 16, 400, 94,
             _H100, nvlink_optional=True),
    # H200 SXM (datasheet): TF32 989*, BF16 1,979*, FP16 1,979*; 141 GB, 4.8 TB/s; up to 700 W; NVLink 900 GB/s;
    # PCIe Gen5 128 GB/s. Name confirmed: "NVIDIA H200, 143771 MiB" (public captures, PCIe gen.max 5 x16);
    # 26.562 GB/s per link confirmed (a public 'nvidia-smi nvlink --status' on 'NVIDIA H200'). Tensor cores, SM
    # count and boost clock as the H100 SXM, so the whitepaper's 989.4 / 494.7 dense (see h100-sxm).
    GpuModel("h200-sxm", ("NVIDIA H200",), 4800, 989.4, 989.4, 494.7, 18, 25, 5, 16, 700, 141,
             _H200, nvlink_smi_gbps_per_link=26.562),
    # H200 NVL (datasheet): TF32 835*, BF16 1,671*, FP16 1,671*; 141 GB, 4.8 TB/s; up to 600 W; 2- or 4-way NVLink
    # bridge 900 GB/s (18 links). Name confirmed: "NVIDIA H200 NVL, 143771 MiB" (public captures): distinct from
    # the SXM part's "NVIDIA H200", with the same memory.total. Bridge rate: none found.
    GpuModel("h200-nvl", ("NVIDIA H200 NVL",), 4800, 835.5, 835.5, 417.5, 18, 25, 5, 16, 600, 141,
             _H200, nvlink_optional=True),
    # H20: NVIDIA publishes no datasheet (sunkx109/GPUs-Specs issue 2 "H20 DataSheet does not exist"). Figures
    # UNCONFIRMED, from third-party spec pages (https://willitrunai.com/es/gpus/h20-96gb): 96 GB HBM3, 4.0 TB/s,
    # FP16 148 TFLOPS dense (BF16 taken equal), TF32 74 dense, NVLink 900 GB/s, 400 W; PCIe Gen5 x16 inferred.
    # Name confirmed: "NVIDIA H20" with 97,871 MiB (public capture); 26.562 GB/s x 18 links confirmed (a public
    # 'nvidia-smi nvlink --status' on 'NVIDIA H20').
    GpuModel("h20", ("NVIDIA H20",), 4000, 148, 148, 74, 18, 25, 5, 16, 400, 96,
             "no NVIDIA datasheet; https://willitrunai.com/es/gpus/h20-96gb (unconfirmed)",
             nvlink_smi_gbps_per_link=26.562),
    # GH200 (datasheet, GPU side): TF32 494 | 989*, BF16 990 | 1,979*, FP16 990 | 1,979*; 96 GB HBM3 at 4 TB/s or
    # 144 GB HBM3e at 4.9 TB/s; module power 450-1000 W (CPU + GPU + memory, so tdp_w is the module's);
    # GPU NVLink 900 GB/s (18 links) used only in NVLink-switched systems; the GPU reaches the host over NVLink-C2C
    # (900 GB/s), so pcie_gen / width are the Grace host's Gen5 x16 (inferred).
    # Names confirmed: "NVIDIA GH200 480GB" (a public 'nvidia-smi nvlink' capture, all links inactive) and
    # "NVIDIA GH200 144G HBM3e, 146831 MiB" (public nvidia-smi capture).
    GpuModel("gh200-96gb", ("NVIDIA GH200 480GB",), 4000, 990, 990, 494, 18, 25, 5, 16, 1000, 96,
             _GH200, nvlink_optional=True),
    GpuModel("gh200-144gb", ("NVIDIA GH200 144G HBM3e",), 4900, 990, 990, 494, 18, 25, 5, 16, 1000, 144,
             _GH200, nvlink_optional=True),
    # B200 (HGX B200 spec, 8-GPU totals): FP16/BF16 36 PF*, TF32 18 PF* -> per GPU 4.5 / 2.25 PF sparse,
    # 2,250 / 1,125 TFLOPS dense; 1.4 TB total (180 GB each); 64 TB/s total (8 TB/s each); NVLink 5 1.8 TB/s
    # (18 x 50 GB/s). UNCONFIRMED from NVIDIA: 1,000 W (per-GPU power is not on the HGX page; DGX B200 class
    # figure) and PCIe Gen5 x16 host links (HGX B200 hosts; the GPU's own maximum may be Gen6).
    # Name confirmed: "NVIDIA B200, 183359 MiB" (public captures). Per-link smi rate: none found for B200.
    GpuModel("b200", ("NVIDIA B200",), 8000, 2250, 2250, 1125, 18, 50, 5, 16, 1000, 180, _HGX),
    # B300 (HGX B300 spec, 8-GPU totals): FP16/BF16 36 PF*, TF32 18 PF* (as B200); up to 2.3 TB total (288 GB
    # each); NVLink 5 1.8 TB/s. UNCONFIRMED from NVIDIA: 8 TB/s per GPU, 1,100 W, PCIe Gen6 x16 (third-party:
    # https://glennklockwood.com/garden/processors/B300, https://acecloud.ai/blog/nvidia-hgx-b300).
    # Name confirmed: "NVIDIA B300 SXM6 AC, 275040 MiB" (a public nvidia-smi capture).
    GpuModel("b300", ("NVIDIA B300 SXM6 AC",), 8000, 2250, 2250, 1125, 18, 50, 6, 16, 1100, 288, _HGX),
    # GB200 (GB200 NVL72 spec, per superchip = 1 Grace + 2 GPUs): FP16/BF16 10 PF*, TF32 5 PF*, up to 372 GB
    # HBM3e at 16 TB/s -> per GPU 2,500 / 1,250 TFLOPS dense, 186 GB, 8 TB/s; NVLink 5 1.8 TB/s (18 x 50).
    # UNCONFIRMED from NVIDIA: 1,200 W per GPU and PCIe Gen6 x16 (third-party:
    # https://glennklockwood.com/garden/processors/B200). Name confirmed: "NVIDIA GB200, 189471 MiB" and
    # 53.125 GB/s per link (_SMI_LINK_GB200).
    GpuModel("gb200", ("NVIDIA GB200",), 8000, 2500, 2500, 1250, 18, 50, 6, 16, 1200, 186, _GB200,
             nvlink_smi_gbps_per_link=53.125),
    # L40S (datasheet): TF32 183 | 366*, BF16 362.05 | 733*, FP16 362.05 | 733*; 48 GB GDDR6, 864 GB/s; 350 W;
    # PCIe Gen4 x16; no NVLink. Name confirmed: "NVIDIA L40S, 46068 MiB" (public captures).
    GpuModel("l40s", ("NVIDIA L40S",), 864, 362.05, 362.05, 183, 0, 0, 4, 16, 350, 48, _L40S),
    # L4 (datasheet): TF32 120*, BF16 242*, FP16 242*; 24 GB GDDR6, 300 GB/s; 72 W; PCIe Gen4 x16; no NVLink.
    # Name confirmed: "NVIDIA L4, 23034 MiB" (public captures).
    GpuModel("l4", ("NVIDIA L4",), 300, 121, 121, 60, 0, 0, 4, 16, 72, 24, _L4),
    # A10 (datasheet): TF32 62.5 | 125*, BF16 125 | 250*, FP16 125 | 250*; 24 GB GDDR6, 600 GB/s; 150 W;
    # PCIe Gen4 x16; no NVLink. Name confirmed: "NVIDIA A10, 23028 MiB" (public captures).
    GpuModel("a10", ("NVIDIA A10",), 600, 125, 125, 62.5, 0, 0, 4, 16, 150, 24, _A10),
)


def _norm(name: str) -> str:
    return " ".join(name.split()).casefold()


def match(name: str, memory_mib: Optional[int] = None) -> Optional[GpuModel]:
    """The model nvidia-smi's `name` denotes (case and whitespace ignored), or None.

    An exact name first; else the model with the longest name the given one starts with, word for word
    (a suffix a later driver may add). Where several models fit, `memory_mib` (nvidia-smi's memory.total)
    picks the one whose capacity is nearest; without it the first listed wins.
    """
    wanted = _norm(name)
    if not wanted:
        return None
    found = [model for model in MODELS if any(_norm(n) == wanted for n in model.names)]
    if not found:
        best = 0
        for model in MODELS:
            for n in model.names:
                prefix = _norm(n)
                if wanted.startswith(prefix + " ") and len(prefix) >= best:
                    found = [model] if len(prefix) > best else found + [model]
                    best = len(prefix)
    if len(found) > 1 and memory_mib:
        return min(found, key=lambda model: abs(model.memory_gib * 1024 - memory_mib))
    return found[0] if found else None


# ---- physical bounds of the GPU engines' figures (verify/bench/gpu_judge.py) ------------------------------
# Used where NVML gave no peak. A datasheet figure is a nominal, not a ceiling, so each bound carries a margin:
# - HBM 1.10: NVML's own bus width x memory clock reads above the datasheet on H200 (6144-bit x 3201 MHz x 2 =
#   4917 GB/s against 4.8 TB/s: 1.024; tests/unit/test_bench_gpu.py).
# - BF16 matmul 1.15: the dense figures are quoted at the boost clock (H100 whitepaper: 1830 MHz), the GPU
#   may run to its max SM clock (1980 MHz on H100 and H200 as NVML reports it: 1.082).
# - GPU-to-GPU copy 1.10: nvidia-smi counts 26.562 GB/s per NVLink 4 link against the datasheet's 25 (1.0625).
HBM_MARGIN = 1.10
MATMUL_MARGIN = 1.15
LINK_MARGIN = 1.10
BOUND_KINDS = ("hbm", "matmul", "copy")


def _nominal(kind: str, model: GpuModel) -> tuple:
    """(GB/s or TFLOPS as the datasheet gives it, margin, what it is) of one engine figure."""
    if kind == "hbm":
        return model.hbm_gbps, HBM_MARGIN, "memory bandwidth"
    if kind == "matmul":
        return model.bf16_dense_tflops, MATMUL_MARGIN, "dense BF16 at boost clock"
    if kind != "copy":
        raise ValueError(f"no bound for {kind!r}; known: {', '.join(BOUND_KINDS)}")
    # One direction of a GPU-to-GPU copy: every NVLink of the GPU (a bridge or fabric may add them), or its PCIe.
    per_link = model.nvlink_smi_gbps_per_link or model.nvlink_gbps_per_link
    return max(model.nvlink_links * per_link, pcie_gbps(model.pcie_gen, model.pcie_width) or 0.0), LINK_MARGIN, \
        f"NVLink {model.nvlink_links} x {per_link:g} GB/s or PCIe Gen{model.pcie_gen} x{model.pcie_width}"


def datasheet_peak(kind: str, model: GpuModel) -> Peak:
    """The datasheet's figure itself (no margin): what floors are fractions of when nothing was measured."""
    nominal, _, what = _nominal(kind, model)
    return Peak(nominal, f"{model.key} datasheet {what} {nominal:g} ({model.source})")


def datasheet_bound(kind: str, model: GpuModel) -> Peak:
    """Above this no `kind` figure of this model is real: the datasheet's figure x its margin."""
    nominal, margin, what = _nominal(kind, model)
    return Peak(nominal * margin, f"{model.key} datasheet {what} {nominal:g} x {margin:g} margin "
                                  f"(a GPU may run above its nominal) = {nominal * margin:.0f}")


def fastest_bound(kind: str) -> Peak:
    """The bound when the GPU is unknown to NVML and to this table: the fastest model's bound."""
    best = max(MODELS, key=lambda model: _nominal(kind, model)[0])
    found = datasheet_bound(kind, best)
    return Peak(found.gbps, f"GPU unknown: the fastest GPU in the model table, {found.source}")


def bound(kind: str, model: Optional[GpuModel]) -> Peak:
    """The model's datasheet bound, else the fastest model's: a figure always has one."""
    return datasheet_bound(kind, model) if model is not None else fastest_bound(kind)
