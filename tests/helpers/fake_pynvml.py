"""A stand-in for pynvml (the NVML binding: the I/O boundary of verify.scheduler.nvml) answering as the
real module does: its calls, constants and error class, with times and answers a test chooses. Unsupported
queries raise its NVMLError, as the real one raises on a GPU without that feature."""
from __future__ import annotations

import time
import types

INIT_S, HANDLE_S = 0.05, 0.002


def fake_pynvml(gpus: int) -> types.SimpleNamespace:
    def handle(index):
        time.sleep(HANDLE_S)
        return index

    def unsupported(*_):
        raise RuntimeError("not supported")

    return types.SimpleNamespace(
        NVMLError=RuntimeError, NVML_FEATURE_ENABLED=1, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0, NVML_AGGREGATE_ECC=1, NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: time.sleep(INIT_S), nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "580.159.04", nvmlDeviceGetCount=lambda: gpus,
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0".encode()),
        nvmlDeviceGetCurrentClocksThrottleReasons=unsupported, nvmlDeviceGetEccMode=unsupported,
        nvmlDeviceGetMemoryInfo=unsupported, nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3", nvmlDeviceGetUUID=unsupported,
        nvmlDeviceGetTotalEccErrors=unsupported, nvmlDeviceGetRetiredPagesPendingStatus=unsupported,
        nvmlDeviceGetRemappedRows=unsupported, nvmlDeviceGetTemperature=lambda h, sensor: 39,
        nvmlDeviceGetPowerUsage=unsupported, nvmlDeviceGetEnforcedPowerLimit=unsupported,
        nvmlDeviceGetVbiosVersion=unsupported,
    )
