"""What the NVIDIA driver says about each GPU: NVML through pynvml when it imports, else nvidia-smi.

Shared by the persistence check and the node facts (memoised on the Node for one run).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Optional

from verify.facts import smi_failure
from verify.node import Node

SMI_FIELDS = "index,pci.bus_id,name,persistence_mode,driver_version,memory.total"
# With the header: columns are found by name, so the parser also reads captures of wider queries.
SMI_ARGV = ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv"]
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
    """`nvidia-smi --query-gpu=... --format=csv` (header line first) -> (gpus, driver_version)."""
    import csv

    try:
        rows = [row for row in csv.reader(text.splitlines(), skipinitialspace=True) if row]
    except csv.Error as exc:  # e.g. a NUL byte on Python < 3.11
        raise SmiParseError(f"nvidia-smi output is not CSV: {exc}") from None
    if not rows:
        raise SmiParseError("nvidia-smi printed nothing")
    header = [name.split(" [")[0].strip() for name in rows[0]]  # "memory.total [MiB]" -> "memory.total"
    missing = [f for f in ("index", "pci.bus_id", "name", "persistence_mode") if f not in header]
    if missing:
        raise SmiParseError(f"nvidia-smi header lacks {', '.join(missing)}: {text.strip()[:80]!r}")
    gpus, drivers = [], set()
    for row in rows[1:]:
        if len(row) != len(header):
            raise SmiParseError(f"a row has {len(row)} fields, the header {len(header)}")
        field = dict(zip(header, (value.strip() for value in row)))
        if not (field["index"].isascii() and field["index"].isdigit()):
            raise SmiParseError(f"GPU index {field['index']!r} is not a number")
        memory = field.get("memory.total", "").split(" ")[0]
        gpus.append(Gpu(int(field["index"]), field["pci.bus_id"], field["name"], _mode(field["persistence_mode"]),
                        int(memory) if memory.isascii() and memory.isdigit() else None))
        if field.get("driver_version"):
            drivers.add(field["driver_version"])
    if not gpus:
        raise SmiParseError("nvidia-smi listed no GPU")
    return gpus, ", ".join(sorted(drivers)) or None


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
    failures = smi_failure.classify(out.stdout, out.stderr, out.returncode)
    if not out.ok or failures and not out.stdout.strip().startswith("index"):
        # the failure forms' words (a lost GPU, a driver that does not answer); health.gpu.presence judges them
        said = "; ".join(f.said() for f in failures) or \
            (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[0][:160]
        return GpuInventory("none", unavailable_reason=f"nvidia-smi failed: {said}")
    try:
        gpus, driver = parse_smi_csv(out.stdout)
    except SmiParseError as exc:  # a present output that cannot be read: ERROR through the check, never a SKIP
        raise SmiParseError(f"could not read {' '.join(SMI_ARGV[:2])}...: {exc}") from None
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
