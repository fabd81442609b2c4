"""What the NVIDIA driver says about each GPU: NVML through pynvml when it imports, else nvidia-smi.

Shared by the persistence check and the node facts (memoised on the Node for one run).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Optional

from verify.node import Node

SMI_FIELDS = "index,pci.bus_id,name,persistence_mode,driver_version,memory.total"
SMI_ARGV = ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"]
NO_DRIVER = "no NVIDIA driver loaded (/proc/driver/nvidia/version absent)"
_DRIVER_BANNER = re.compile(r"NVRM version:\s+(.*?)\s+(\d+\.\d+(?:\.\d+)?)\s")


class SmiParseError(ValueError):
    pass


@dataclass
class Gpu:
    index: int
    bus_id: str
    name: str
    persistence_mode: Optional[bool]  # None: the driver does not say (N/A)
    memory_mib: Optional[int] = None


@dataclass
class GpuInventory:
    source: str  # "nvml", "nvidia-smi", or "none"
    gpus: list = field(default_factory=list)
    driver_version: Optional[str] = None
    cuda_driver_version: Optional[str] = None  # the newest CUDA the driver supports, e.g. "13.0"
    unavailable_reason: str = ""  # why no GPU could be listed

    def to_dict(self) -> dict:
        data = asdict(self)
        data["gpus"] = [asdict(g) for g in self.gpus]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> GpuInventory:
        fields = dict(data)
        fields["gpus"] = [Gpu(**g) for g in data.get("gpus") or []]
        return cls(**fields)


def parse_driver_banner(text: str) -> tuple:
    """/proc/driver/nvidia/version -> (version, open_kernel_module)."""
    match = _DRIVER_BANNER.search(text)
    if not match:
        raise SmiParseError(f"no driver version in {text.strip()[:80]!r}")
    return match.group(2), "Open Kernel Module" in match.group(1)


def _mode(value: str) -> Optional[bool]:
    value = value.strip()
    if value == "Enabled":
        return True
    if value == "Disabled":
        return False
    if value in ("N/A", "[N/A]", "[Not Supported]"):
        return None
    raise SmiParseError(f"persistence_mode {value!r} is neither Enabled nor Disabled")


def parse_smi_csv(text: str) -> tuple:
    """`nvidia-smi --query-gpu=SMI_FIELDS --format=csv,noheader,nounits` -> (gpus, driver_version)."""
    gpus, drivers = [], set()
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6:
            raise SmiParseError(f"expected 6 comma-separated fields, got {len(parts)}: {line.strip()[:80]!r}")
        index, bus_id, name, mode, driver, memory = parts
        if not index.isdigit():
            raise SmiParseError(f"GPU index {index!r} is not a number")
        gpus.append(Gpu(int(index), bus_id, name, _mode(mode), int(memory) if memory.isdigit() else None))
        drivers.add(driver)
    if not gpus:
        raise SmiParseError("nvidia-smi listed no GPU")
    return gpus, ", ".join(sorted(drivers))


def _from_nvml() -> Optional[GpuInventory]:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        inventory = GpuInventory("nvml", driver_version=_text(driver),
                                 cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}")
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                mode = pynvml.nvmlDeviceGetPersistenceMode(handle) == pynvml.NVML_FEATURE_ENABLED
            except pynvml.NVMLError:
                mode = None
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            bus_id = _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            inventory.gpus.append(Gpu(index, bus_id, _text(pynvml.nvmlDeviceGetName(handle)), mode, int(memory)))
        return inventory
    finally:
        pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _from_smi(node: Node) -> GpuInventory:
    out = node.run(SMI_ARGV, timeout_s=20.0)
    if out.missing:
        return GpuInventory("none", unavailable_reason="pynvml could not load NVML and nvidia-smi is not installed")
    if not out.ok:
        message = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[0]
        return GpuInventory("none", unavailable_reason=f"nvidia-smi failed: {message[:160]}")
    gpus, driver = parse_smi_csv(out.stdout)
    return GpuInventory("nvidia-smi", gpus, driver_version=driver)


def query_gpus(node: Node) -> GpuInventory:
    """The GPUs, or an inventory with unavailable_reason saying why there are none to judge."""
    if "gpus" in node.memo:
        return node.memo["gpus"]
    if not node.exists("/proc/driver/nvidia/version"):
        inventory = GpuInventory("none", unavailable_reason=NO_DRIVER)
    elif not node.is_live:
        inventory = GpuInventory("none", unavailable_reason="GPU state is read on the live node only (--root is set)")
    else:
        inventory = _from_nvml() or _from_smi(node)
    node.memo["gpus"] = inventory
    return inventory
