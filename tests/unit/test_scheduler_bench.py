"""benchmarks/scheduler_modes.py times NVML's parts apart: the per-GPU figure the 8-GPU estimate scales by
is verify.scheduler.nvml.read_gpu alone, never the import or nvmlInit (which an 8-GPU node pays once).
A stand-in pynvml whose init is slow and whose GPU queries are quick tells the two apart."""
from __future__ import annotations

import importlib.util
import sys
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
    """Eight GPUs whose handle takes 50 ms each: read in parallel threads (NVML is thread-safe) the session
    costs about one reading, not eight, and the readings keep the driver's order."""
    slow = fake_pynvml(8)
    monkeypatch.setattr(slow, "nvmlInit", lambda: None)

    def handle(index):
        time.sleep(0.05)
        return index

    monkeypatch.setattr(slow, "nvmlDeviceGetHandleByIndex", handle)
    monkeypatch.setitem(sys.modules, "pynvml", slow)
    start = time.perf_counter()
    driver, gpus = nvml.read_raw()
    took = time.perf_counter() - start
    assert driver == "580.159.04" and [g["bus_id"] for g in gpus] == [f"00000000:{i + 0x18:02X}:00.0" for i in range(8)]
    assert took < 8 * 0.05 / 2  # eight 50 ms readings in a row would take 0.4 s


def with_p2p_status(fake: types.SimpleNamespace, refused: dict) -> types.SimpleNamespace:
    """The fake NVML answering nvmlDeviceGetP2PStatus as ctypes would: an index that is not a plain int (pynvml's
    own NVML_P2P_CAPS_INDEX_READ is the tuple (0,)) is refused with the TypeError seen on the 2x H200 machine."""
    asked = []

    def p2p_status(first, second, caps_index):
        if type(caps_index) is not int:
            raise TypeError("argument 3: TypeError: Don't know how to convert parameter 3")
        asked.append((first, second, caps_index))
        return refused.get((first, second, caps_index), 0)

    fake.nvmlDeviceGetP2PStatus = p2p_status
    fake.asked = asked
    return fake


def test_the_health_hook_reads_every_pairs_p2p_status_and_the_prolog_none(monkeypatch):
    from verify.facts import peer_access
    from verify.node import Node

    fake = with_p2p_status(fake_pynvml(3), {(0, 2, 1): 5})  # GPU0 -> GPU2: WRITE NOT_SUPPORTED
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    driver, gpus = nvml.read_raw()
    assert "p2p" not in gpus[0] and fake.asked == []  # the prolog does not ask
    driver, gpus = nvml.read_raw(with_p2p=True)
    assert sorted(fake.asked) == [(a, b, caps) for a in range(3) for b in range(3) if a != b for caps in (0, 1)]
    assert gpus[0]["p2p"] == {1: {"read": 0, "write": 0}, 2: {"read": 0, "write": 5}}
    node = Node()
    nvml.prime(node, driver, gpus)
    access = node.memo[peer_access.MEMO_P2P]
    assert access.source == peer_access.SOURCE_NVML and access.refused == [(0, 2)] and len(access.can_access) == 6
    assert access.status[(0, 2)] == {"read": "OK", "write": "NOT_SUPPORTED"}


def test_pynvmls_own_tuple_index_would_be_refused_and_leaves_p2p_to_nvidia_smi(monkeypatch):
    from verify.facts import peer_access
    from verify.node import Node

    fake = with_p2p_status(fake_pynvml(2), {})
    refuse = fake.nvmlDeviceGetP2PStatus
    fake.nvmlDeviceGetP2PStatus = lambda a, b, index: refuse(a, b, (index,))  # as pynvml's constant is spelt
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    driver, gpus = nvml.read_raw(with_p2p=True)
    assert driver == "580.159.04" and gpus[0]["p2p"] is None  # refused: no answer, not a verdict
    node = Node()
    nvml.prime(node, driver, gpus)
    assert peer_access.MEMO_P2P not in node.memo and "gpus" in node.memo
