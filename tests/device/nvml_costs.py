"""What each NVML query and a hook process's end cost on a GPU node (issue 39: which of the prolog's readings
and which way of exiting are worth their milliseconds).

    python3 tests/device/nvml_costs.py [SESSIONS] [--layouts]     # --layouts: the last part alone

Per fresh NVML session (nvmlInit .. nvmlShutdown, in this process): each query the scheduler modes make, per
GPU, one GPU after another; then every GPU's whole reading (verify.scheduler.nvml.read_gpu) one after another
and side by side. Then fresh `python3 -I -S` processes that import pynvml, read every GPU and end in four
ways (nvmlShutdown or not, a normal exit or os._exit): the milliseconds from their last line to being reaped.
Last, fresh processes reading every GPU three ways, from nvmlInit to the last GPU's answer: threads of one
session (as the prolog's child does), the same after nvmlInitWithFlags(NO_ATTACH), and one process per GPU.
"""
from __future__ import annotations

import contextlib
import ctypes
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import pynvml  # noqa: E402

from verify.scheduler import nvml  # noqa: E402


def queries(h) -> dict:
    """name -> a call of one query on handle h, as read_gpu makes it."""
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return {
        "PciInfo": lambda: pynvml.nvmlDeviceGetPciInfo(h),
        "Name": lambda: pynvml.nvmlDeviceGetName(h),
        "UUID": lambda: pynvml.nvmlDeviceGetUUID(h),
        "PersistenceMode": lambda: pynvml.nvmlDeviceGetPersistenceMode(h),
        "MemoryInfo": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        "EccMode": lambda: pynvml.nvmlDeviceGetEccMode(h),
        "TotalEccErrors volatile": lambda: pynvml.nvmlDeviceGetTotalEccErrors(
            h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        "TotalEccErrors aggregate": lambda: pynvml.nvmlDeviceGetTotalEccErrors(
            h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC),
        "RetiredPagesPendingStatus": lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h),
        "RemappedRows": lambda: pynvml.nvmlDeviceGetRemappedRows(h),
        "ClocksEventReasons": lambda: reasons(h),
        "Temperature": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "MarginTemperature": lambda: pynvml.nvmlDeviceGetMarginTemperature(h),
        "PowerUsage": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
        "EnforcedPowerLimit": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
        "VbiosVersion": lambda: pynvml.nvmlDeviceGetVbiosVersion(h),
        "GpuFabricInfo": lambda: pynvml.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(pynvml.c_nvmlGpuFabricInfo_t())),
    }


def ms(seconds: list) -> str:
    ordered = sorted(seconds)
    return f"p50 {statistics.median(ordered) * 1e3:6.2f} max {ordered[-1] * 1e3:6.2f} ms"


def sessions(count: int) -> None:
    per_query: dict = {}
    init, shutdown, handle, serial, parallel = [], [], [], [], []
    for _ in range(count):
        began = time.perf_counter()
        pynvml.nvmlInit()
        init.append(time.perf_counter() - began)
        gpus = pynvml.nvmlDeviceGetCount()
        for index in range(gpus):
            began = time.perf_counter()
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            handle.append(time.perf_counter() - began)
            for name, call in queries(h).items():
                began = time.perf_counter()
                with contextlib.suppress(pynvml.NVMLError, AttributeError):
                    call()
                per_query.setdefault(name, []).append(time.perf_counter() - began)
        began = time.perf_counter()
        for index in range(gpus):
            nvml.read_gpu(pynvml, index)
        serial.append(time.perf_counter() - began)
        began = time.perf_counter()
        nvml.side_by_side(lambda index: nvml.read_gpu(pynvml, index), gpus)
        parallel.append(time.perf_counter() - began)
        began = time.perf_counter()
        pynvml.nvmlShutdown()
        shutdown.append(time.perf_counter() - began)
    print(f"== NVML, {count} fresh sessions, {gpus} GPU(s); per query per GPU, one GPU after another")
    print(f"  nvmlInit                    {ms(init)}")
    print(f"  GetHandleByIndex            {ms(handle)}")
    for name, values in sorted(per_query.items(), key=lambda item: -statistics.median(item[1])):
        print(f"  {name:27} {ms(values)}")
    print(f"  nvmlShutdown                {ms(shutdown)}")
    print(f"  read_gpu x {gpus}, in a row      {ms(serial)}")
    print(f"  read_gpu x {gpus}, side by side  {ms(parallel)}")


ENDING = ("import sys, time; sys.path[0:0] = [sys.argv[1], sys.argv[2]]; import os, pynvml; "
          "from verify.scheduler import nvml; pynvml.nvmlInit(); "
          "[nvml.read_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]; "
          "shut = sys.argv[3] == 'shutdown'; shut and pynvml.nvmlShutdown(); "
          "sys.stdout.write(repr(time.time())); sys.stdout.flush(); "
          "os._exit(0) if sys.argv[4] == '_exit' else sys.exit(0)")


def fresh(program: str, *args: str) -> subprocess.CompletedProcess:
    """`program` in a fresh `python3 -I -S`, with this checkout and pynvml's directory as its first arguments."""
    return subprocess.run([sys.executable, "-I", "-S", "-c", program, str(REPO), str(Path(pynvml.__file__).parent),
                           *args], capture_output=True, text=True)


def endings(runs: int) -> None:
    print(f"== a process's end after reading every GPU ({runs} fresh -I -S processes each): last line to reaped")
    for shut in ("shutdown", "no-shutdown"):
        for how in ("exit", "_exit"):
            walls = []
            for _ in range(runs):
                done = fresh(ENDING, shut, how)
                done.check_returncode()
                walls.append(time.time() - float(done.stdout))
            print(f"  {shut:12} {how:6} {ms(walls)}")


LAYOUT = ("import sys, time; sys.path[0:0] = [sys.argv[1], sys.argv[2]]; import os, pynvml; "
          "from verify.scheduler import nvml; how = sys.argv[3]; gpus = int(sys.argv[4]); began = time.perf_counter()\n"
          "if how == 'process per GPU':\n"
          "    ends = []\n"
          "    for index in range(gpus):\n"
          "        read_end, write_end = os.pipe()\n"
          "        if os.fork() == 0:\n"
          "            pynvml.nvmlInit(); nvml.read_gpu(pynvml, index); os.write(write_end, b'1'); "
          "pynvml.nvmlShutdown(); os._exit(0)\n"
          "        ends.append(read_end)\n"
          "    [os.read(end, 1) for end in ends]\n"
          "else:\n"
          "    pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_ATTACH if how == 'threads, NO_ATTACH' else 0)\n"
          "    nvml.side_by_side(lambda index: nvml.read_gpu(pynvml, index), gpus)\n"
          "print(time.perf_counter() - began, flush=True)\n"
          "if how == 'process per GPU':\n"
          "    [os.wait() for _ in range(gpus)]")


def layouts(runs: int) -> None:
    pynvml.nvmlInit()
    gpus = pynvml.nvmlDeviceGetCount()
    pynvml.nvmlShutdown()
    print(f"== every GPU read in a fresh process ({runs} each, {gpus} GPUs): nvmlInit to the last GPU's answer")
    for how in ("threads", "threads, NO_ATTACH", "process per GPU"):
        walls = []
        for _ in range(runs):
            done = fresh(LAYOUT, how, str(gpus))
            if done.returncode:
                print(f"  {how}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
                break
            walls.append(float(done.stdout))
        else:
            print(f"  {how:20} {ms(walls)}")


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if "--layouts" not in sys.argv:
        sessions(runs)
        endings(runs)
    layouts(runs)
