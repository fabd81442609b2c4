"""GPUDirect RDMA readiness: nvidia_peermem loaded, or a DMA-BUF capable stack.

DMA-BUF needs Linux >= 5.12 and NVIDIA's open kernel module; then NCCL/perftest can register GPU
memory without nvidia_peermem. When the spec asks for nvidia_peermem by name, only the module counts.
GPUDirect RDMA lets an RDMA NIC read and write GPU memory: on a node with no RDMA device (nothing in
/sys/class/infiniband, where every verbs-capable HCA registers, InfiniBand and RoCE alike) there is nothing
for it to serve, so the check SKIPs there with that reason whatever the spec asks.
"""
from __future__ import annotations

import re

from verify.checks.common import error, result, role_disabled, section, skip
from verify.facts.gpu_query import parse_driver_banner
from verify.node import Node
from verify.result import Status

ROLE = "gpu"
CHECK_ID = "gpu.nvidia_peermem"
DMABUF_MIN_KERNEL = (5, 12)
OSRELEASE = "/proc/sys/kernel/osrelease"
RDMA_CLASS = "/sys/class/infiniband"


def kernel_version(release: str) -> tuple:
    match = re.match(r"(\d+)\.(\d+)", release.strip())
    if not match:
        raise ValueError(f"kernel release {release.strip()[:40]!r} has no major.minor")
    return int(match.group(1)), int(match.group(2))


def module_loaded(node: Node, name: str) -> bool:
    modules = node.read("/proc/modules")
    if modules is not None and any(line.split(" ", 1)[0] == name for line in modules.splitlines()):
        return True
    return node.exists(f"/sys/module/{name}")


def judge(peermem_asked: bool, loaded: bool, release, driver_version: str, open_module: bool):
    """`release` None: the kernel is unknown (a --root tree without /proc/sys)."""
    expected = "nvidia_peermem loaded" if peermem_asked else "nvidia_peermem loaded or DMA-BUF capable"
    if loaded:
        return result(CHECK_ID, ROLE, Status.PASS, expected, "nvidia_peermem loaded")
    if release is None:
        # asked by name, only the module counts: the kernel does not change the verdict
        unknown = f"the kernel release is unknown ({OSRELEASE} absent)"
        if peermem_asked:
            return result(CHECK_ID, ROLE, Status.FAIL, expected, "not loaded",
                          f"nvidia_peermem is not loaded ({unknown}, so DMA-BUF was not looked at)",
                          "gpu_nvidia_peermem")
        return skip(CHECK_ID, ROLE, f"nvidia_peermem is not loaded and {unknown}: "
                    f"cannot tell whether DMA-BUF (kernel >= 5.12 + open module) stands in for it", expected)
    kernel = kernel_version(release)
    dmabuf = kernel >= DMABUF_MIN_KERNEL and open_module
    stack = (f"kernel {release.strip()}, NVIDIA {driver_version} "
             f"{'open' if open_module else 'proprietary'} kernel module")
    if dmabuf and not peermem_asked:
        return result(CHECK_ID, ROLE, Status.PASS, expected, f"DMA-BUF capable ({stack})",
                      "nvidia_peermem is not loaded; GPUDirect RDMA can use DMA-BUF (kernel >= 5.12 + open module)")
    reason = "nvidia_peermem is not loaded"
    if dmabuf:
        reason += f" (this stack could use DMA-BUF instead: {stack}; set gpu_nvidia_peermem: false to accept that)"
    else:
        why = "kernel < 5.12" if kernel < DMABUF_MIN_KERNEL else "proprietary kernel module"
        reason += f" and DMA-BUF is not available ({why}: {stack})"
    return result(CHECK_ID, ROLE, Status.FAIL, expected, "not loaded", reason, "gpu_nvidia_peermem")


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, CHECK_ID)
    if disabled:
        return [disabled]
    gpu = section(spec, ROLE)
    peermem_asked = bool(gpu.get("nvidia_peermem"))
    if not (peermem_asked or gpu.get("rdma_expected")):
        return [skip(CHECK_ID, ROLE, "neither gpu_nvidia_peermem nor gpu_rdma_expected is set")]
    banner = node.read("/proc/driver/nvidia/version")
    if banner is None:
        return [skip(CHECK_ID, ROLE, "no NVIDIA driver loaded (/proc/driver/nvidia/version absent)")]
    if not node.listdir(RDMA_CLASS):
        return [skip(CHECK_ID, ROLE, f"no RDMA device ({RDMA_CLASS} is empty or absent): GPUDirect RDMA has no NIC "
                                     "to serve here, so nvidia_peermem / DMA-BUF is not judged")]
    driver_version, open_module = parse_driver_banner(banner)
    release = node.read_value(OSRELEASE)
    loaded = module_loaded(node, "nvidia_peermem")
    try:
        return [judge(peermem_asked, loaded, release, driver_version, open_module)]
    except ValueError as exc:  # a release with no major.minor: say which file, not a traceback
        return [error(CHECK_ID, ROLE, f"{OSRELEASE}: {exc}")]
