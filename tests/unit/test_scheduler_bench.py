"""benchmarks/scheduler_modes.py times NVML's parts apart: the per-GPU figure the 8-GPU estimate scales by
is verify.scheduler.nvml.read_gpu alone, never the import or nvmlInit (which an 8-GPU node pays once).
A stand-in pynvml whose init is slow and whose GPU queries are quick tells the two apart."""
from __future__ import annotations

import importlib.util
import sys
import threading
import time
import types
from pathlib import Path

from verify.scheduler import nvml

REPO = Path(__file__).resolve().parents[2]
INIT_S, HANDLE_S = 0.05, 0.002


def load_benchmark():
    spec = importlib.util.spec_from_file_location("scheduler_modes", REPO / "benchmarks" / "scheduler_modes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_the_per_gpu_time_excludes_init_and_scales_the_estimate(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(2))
    bench = load_benchmark()
    timings = bench.nvml_timings(3)
    assert timings["gpus"] == 2 and len(timings["gpu_s"]) == 6 and len(timings["init_s"]) == 3
    assert min(timings["init_s"]) >= INIT_S and HANDLE_S <= max(timings["gpu_s"]) < INIT_S
    lines = bench.report_nvml(timings, prolog_p99=0.3)
    per_gpu_p99 = bench.percentile(timings["gpu_s"], 99)
    assert f"prolog p99 ~ {0.3 + 6 * per_gpu_p99:.3f} s" in lines[-1]


def test_read_gpu_is_what_the_prolog_reads(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(2))
    driver, gpus = nvml.read_raw()
    assert driver == "580.159.04" and [g["bus_id"] for g in gpus] == ["00000000:18:00.0", "00000000:19:00.0"]
    assert gpus[0]["persistence"] is True and gpus[0]["temperature_c"] == 39 and gpus[0]["ecc_mode"] is None


def test_without_nvml_the_benchmark_gives_no_estimate(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    bench = load_benchmark()
    lines = bench.report_nvml(bench.nvml_timings(3), prolog_p99=0.3)
    assert lines == ["NVML: not measured here (pynvml is not installed): the modes used nvidia-smi or saw no GPU; "
                     "no 8-GPU estimate from this machine"]


def test_the_gpus_are_read_side_by_side_in_their_own_order(monkeypatch):
    """Eight GPUs read in parallel threads (NVML is thread-safe): the session costs about one reading, not
    eight, and the readings keep the driver's order. Counted, not timed: each handle call waits until all
    eight are in flight at once, which only a side-by-side read reaches (a loaded machine slows a timed
    version of this test past any limit)."""
    slow = fake_pynvml(8)
    monkeypatch.setattr(slow, "nvmlInit", lambda: None)
    lock = threading.Lock()
    all_in = threading.Event()
    in_flight = {"now": 0, "most": 0}

    def handle(index):
        with lock:
            in_flight["now"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["now"])
            if in_flight["now"] == 8:
                all_in.set()
        all_in.wait(timeout=2)  # one at a time, none would ever see the other seven
        with lock:
            in_flight["now"] -= 1
        return index

    monkeypatch.setattr(slow, "nvmlDeviceGetHandleByIndex", handle)
    monkeypatch.setitem(sys.modules, "pynvml", slow)
    driver, gpus = nvml.read_raw()
    assert driver == "580.159.04" and [g["bus_id"] for g in gpus] == [f"00000000:{i + 0x18:02X}:00.0" for i in range(8)]
    assert in_flight["most"] == 8
