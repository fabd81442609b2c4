"""The scheduler modes' NVML session: the only code that touches NVML (pynvml, imported inside the reading).
One session reads every GPU reading the mode judges (read_raw: a dict of raw numbers per GPU, None where
not supported); verify.scheduler.nvml_facts hands them to the facts the checks read.

The prolog and epilog start the reading (`Reading`, a forked child) before they import their checks: NVML's
initialisation and the GPUs' first answers (GSP firmware calls: ~13 ms to initialise, ~17 ms per GPU, ~8 ms
to shut down on the 4x H200, tests/device/nvml_costs.py) and this process's imports then overlap instead of
adding up. Where health.p2p runs (the health and npd hooks) the session also asks NVML's P2P
status of every ordered pair for each capability it is given (verify.facts.peer_access.P2P_CAPS: READ and
WRITE): no CUDA context.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import threading
from typing import Optional

from verify.bounded_load import BoundedLoadError, loads_json_bounded


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ask(pynvml, call, *args):
    """One NVML query; None where this GPU, driver or pynvml does not support it."""
    try:
        return call(*args)
    except (pynvml.NVMLError, AttributeError, TypeError):
        return None


def read_gpu(pynvml, index: int) -> dict:
    """One GPU's raw readings, inside an initialised NVML session (None = not supported). The per-GPU part
    of a prolog's time: benchmarks/scheduler_modes.py times it alone for the 8-GPU estimate."""
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    reasons_call = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    ecc = _ask(pynvml, pynvml.nvmlDeviceGetEccMode, h)
    memory = _ask(pynvml, pynvml.nvmlDeviceGetMemoryInfo, h)
    margin = _ask(pynvml, getattr(pynvml, "nvmlDeviceGetMarginTemperature", None), h)
    persistence = _ask(pynvml, pynvml.nvmlDeviceGetPersistenceMode, h)
    return {
        "index": index, "bus_id": _text(pynvml.nvmlDeviceGetPciInfo(h).busId),
        "name": _text(_ask(pynvml, pynvml.nvmlDeviceGetName, h) or ""),
        "uuid": _text(_ask(pynvml, pynvml.nvmlDeviceGetUUID, h) or ""),
        "persistence": None if persistence is None else persistence == pynvml.NVML_FEATURE_ENABLED,
        "memory_mib": None if memory is None else int(memory.total // (1024 * 1024)),
        "ecc_mode": None if ecc is None else bool(ecc[0]),
        "ecc_uncorrected_volatile": _ask(pynvml, pynvml.nvmlDeviceGetTotalEccErrors, h,
                                         pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        "ecc_uncorrected_aggregate": _ask(pynvml, pynvml.nvmlDeviceGetTotalEccErrors, h,
                                          pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC),
        "retired_pending": _ask(pynvml, pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h),
        "remapped_rows": _ask(pynvml, pynvml.nvmlDeviceGetRemappedRows, h),
        "clock_reasons": _ask(pynvml, reasons_call, h),
        "temperature_c": _ask(pynvml, pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
        "tlimit_margin_c": getattr(margin, "margin", getattr(margin, "marginTemperature", margin))
        if margin is not None else None,
        "power_mw": _ask(pynvml, pynvml.nvmlDeviceGetPowerUsage, h),
        "power_limit_mw": _ask(pynvml, pynvml.nvmlDeviceGetEnforcedPowerLimit, h),
        "vbios": _text(_ask(pynvml, pynvml.nvmlDeviceGetVbiosVersion, h) or ""),
        "fabric": read_fabric(pynvml, h),
    }


def read_fabric(pynvml, handle) -> Optional[tuple]:
    """(state, status) of the GPU's NVSwitch fabric registration, or None where NVML has none for it. The
    call fills a struct the caller passes (nvml.h: nvmlDeviceGetGpuFabricInfo(device, *gpuFabricInfo)); called
    with the handle alone it raised TypeError, which read every GPU as having no fabric."""
    struct = getattr(pynvml, "c_nvmlGpuFabricInfo_t", None)
    call = getattr(pynvml, "nvmlDeviceGetGpuFabricInfo", None)
    if struct is None or call is None:
        return None
    info = struct()
    if _ask(pynvml, call, handle, ctypes.byref(info)) is None:
        return None
    return int(info.state), int(info.status)


def read_p2p_row(pynvml, index: int, count: int, caps: tuple) -> Optional[dict]:
    """{peer index: {capability: nvmlGpuP2PStatus_t}} of one GPU towards every other for each (name, NVML
    capability index, ...) of caps, inside an initialised session; None where NVML answers no status for one
    of them (health.p2p then asks nvidia-smi)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    status_of = getattr(pynvml, "nvmlDeviceGetP2PStatus", None)  # absent in an older pynvml: nvidia-smi answers
    row = {}
    for peer in range(count):
        if peer == index:
            continue
        other = pynvml.nvmlDeviceGetHandleByIndex(peer)
        statuses = {cap[0]: _ask(pynvml, status_of, handle, other, cap[1]) for cap in caps}
        if any(status is None for status in statuses.values()):
            return None
        row[peer] = {name: int(status) for name, status in statuses.items()}
    return row


def side_by_side(read_one, count: int) -> list:
    """[read_one(0), ..., read_one(count - 1)], one thread each; the first exception raised is raised here.
    Plain threads: concurrent.futures would import logging and queue at every hook start (3 ms)."""
    answers: list = [None] * count
    raised: list = [None] * count

    def worker(index: int) -> None:
        try:
            answers[index] = read_one(index)
        except BaseException as exc:  # handed to the caller below, as a pool's map would
            raised[index] = exc

    threads = [threading.Thread(target=worker, args=(index,), daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = next((exc for exc in raised if exc is not None), None)
    if failed is not None:
        raise failed
    return answers


def read_raw(p2p_caps: tuple = (), hand_over=None) -> tuple:
    """(driver version, [raw dict per GPU]) from one NVML session, or (None, why not). p2p_caps: each GPU's
    dict also holds "p2p" (read_p2p_row), for health.p2p; the prolog asks none. hand_over(answer), where
    given, is called with the answer before nvmlShutdown (8-9 ms on the GPU machines), which it need not wait for."""
    try:
        import pynvml  # only where NVML is read: the config checks run on a bare python3
    except ImportError:
        return None, "pynvml is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML did not initialise: {exc}"
    try:
        try:
            answer = _read_session(pynvml, p2p_caps)
        except pynvml.NVMLError as exc:
            answer = None, f"NVML failed while reading the GPUs: {exc}"
        if hand_over is not None:
            hand_over(answer)
        return answer
    finally:
        pynvml.nvmlShutdown()


def _read_session(pynvml, p2p_caps: tuple) -> tuple:
    driver = _text(pynvml.nvmlSystemGetDriverVersion())
    count = pynvml.nvmlDeviceGetCount()
    if count <= 1:
        return driver, [read_gpu(pynvml, index) for index in range(count)]

    def read_one(index: int) -> dict:
        raw = read_gpu(pynvml, index)
        if p2p_caps:
            raw["p2p"] = read_p2p_row(pynvml, index, count, p2p_caps)
        return raw

    # NVML is thread-safe and ctypes releases the GIL in each call: the GPUs are read side by side, so an
    # 8-GPU prolog does not pay 8 readings in a row (unless the driver itself serialises them).
    return driver, side_by_side(read_one, count)


class Reading:
    """read_raw in a child process forked before the hook imports the rest of what it runs: the child reads
    NVML while this process imports, on another core. A thread did about as well on the 4x H200 but shares
    the GIL with the imports (a slower CPU pays for that), and a crash inside libnvidia-ml ends only the
    child: the hook then reads the GPUs with nvidia-smi instead of dying by a signal, which Slurm would take
    as a failed prolog and drain the node. answer() reads the child's answer from a pipe; close() reaps the
    child, whose nvmlShutdown ran after it answered. Where pynvml is missing, the child answers that."""

    def __init__(self, p2p_caps: tuple = ()) -> None:
        self._answer: Optional[tuple] = None
        read_end, write_end = os.pipe()
        self._pid = os.fork()
        if self._pid == 0:  # the child: it never returns into its caller's code
            try:
                os.close(read_end)
                _answer_through(write_end, p2p_caps)
            finally:
                os._exit(0)
        os.close(write_end)
        self._read_end = read_end

    def answer(self) -> tuple:
        """(driver version, [raw dict per GPU]) or (None, why not), as read_raw returns it. An error read_raw
        did not foresee is raised here (the hook's exit 70, never a verdict)."""
        if self._answer is None:
            with os.fdopen(self._read_end, "rb") as pipe:
                self._read_end = -1
                data = pipe.read(MAX_ANSWER_BYTES + 1)
            self._answer = _unpack(data, self._reap)
        if self._answer[0] == RAISED:
            raise ReadingFailed(self._answer[1])
        return self._answer

    def close(self) -> None:
        """The child ended (nvmlShutdown returned, or it was cut short): before the process exits."""
        if self._read_end >= 0:
            os.close(self._read_end)
            self._read_end = -1
        self._reap()

    def _reap(self) -> str:
        """How the child ended ('' where it was reaped before)."""
        if self._pid <= 0:
            return ""
        _, status = os.waitpid(self._pid, 0)
        self._pid = 0
        return f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"


class ReadingFailed(RuntimeError):
    """The NVML reading process met an error read_raw does not foresee (a bug: never a node's verdict)."""


RAISED = "raised"
MAX_ANSWER_BYTES = 1 << 22  # 8 GPUs with their P2P rows take ~20 KiB


def _answer_through(write_end: int, p2p_caps: tuple) -> None:
    """The forked child's work: read NVML, send the answer (before nvmlShutdown), or the error it met."""
    sent = []

    def send(message: tuple) -> None:
        if not sent:
            sent.append(True)
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(json.dumps(message).encode())

    try:
        send(read_raw(p2p_caps, send))
    except BaseException as exc:  # noqa: BLE001 - said to the parent, which raises it
        with contextlib.suppress(OSError):  # the parent stopped listening: nobody to tell
            send((RAISED, f"{type(exc).__name__}: {exc}"[:2000]))


def _unpack(data: bytes, reap) -> tuple:
    """The child's message -> read_raw's answer, read as bounded JSON (never marshal or pickle: a damaged
    marshal stream made marshal.loads take 12 GB); a child that ended without one is (None, why): the checks
    then ask nvidia-smi, as without pynvml."""
    if not data:
        return None, f"the NVML reading process ended without an answer ({reap()})"
    try:
        message = loads_json_bounded(data.decode(), "the NVML reading") if len(data) <= MAX_ANSWER_BYTES else None
    except (BoundedLoadError, UnicodeDecodeError):
        message = None
    if not (isinstance(message, list) and len(message) == 2 and (message[0] is None or isinstance(message[0], str))
            and isinstance(message[1], list if isinstance(message[0], str) and message[0] != RAISED else str)):
        return None, f"the NVML reading process answered {len(data)} bytes that are not an answer"
    driver, gpus = message
    if not isinstance(gpus, list):
        return driver, gpus
    if not all(isinstance(gpu, dict) for gpu in gpus):
        return None, "the NVML reading process answered a GPU that is not a reading"
    gpus = [_restored(gpu) for gpu in gpus]
    problem = reading_problem(driver, gpus)
    if problem:
        return None, f"the NVML reading process answered a reading that is not one ({problem})"
    return driver, gpus


def _restored(gpu: dict) -> dict:
    """One GPU's raw dict as read_raw made it, from its JSON form: the pairs (remapped rows, fabric) as tuples,
    the P2P row's peers as integers again (only ASCII digits: '²'.isdigit() is true and int() refuses it)."""
    gpu = dict(gpu)
    for key in ("remapped_rows", "fabric"):
        if isinstance(gpu.get(key), list):
            gpu[key] = tuple(gpu[key])
    if isinstance(gpu.get("p2p"), dict):
        gpu["p2p"] = {int(peer) if isinstance(peer, str) and peer.isascii() and peer.isdigit() and len(peer) <= 6
                      else peer: row for peer, row in gpu["p2p"].items()}
    return gpu


# What read_gpu puts in a GPU's reading, by kind (None = not supported, always allowed).
MAX_GPUS = 4096
_TEXTS = ("name", "uuid", "vbios")
_FLAGS = ("persistence", "ecc_mode", "retired_pending")
_NUMBERS = ("memory_mib", "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "temperature_c",
            "tlimit_margin_c", "power_mw", "power_limit_mw")
_WHOLE = ("clock_reasons",)
_LIMIT = 1 << 64  # NVML's counters and bit masks are at most 64-bit


def _number(value: object, whole: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float) if not whole else int):
        return False
    if isinstance(value, int):
        return -_LIMIT < value < _LIMIT
    return value == value and abs(value) < _LIMIT  # NaN is not equal to itself


def reading_problem(driver: object, gpus: object) -> str:
    """'' when (driver, gpus) has the shape read_raw gives (every field of its kind), else what is not: the
    facts are primed only from a reading of that shape (nvml_facts.prime), whatever crossed the pipe."""
    if not isinstance(driver, str) or len(driver) > 64:
        return "the driver version is not text"
    if not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
        return "the GPUs are not a list"
    seen = set()
    for n, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            return f"GPU {n} is not a reading"
        index = gpu.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_GPUS or index in seen:
            return f"GPU {n}: index {str(index)[:20]!r} is not a GPU index"
        seen.add(index)
        if not isinstance(gpu.get("bus_id"), str) or not 0 < len(gpu["bus_id"]) <= 64:
            return f"GPU {index}: bus_id is not a PCI address"
        for key in _TEXTS:
            if gpu.get(key) is not None and (not isinstance(gpu[key], str) or len(gpu[key]) > 256):
                return f"GPU {index}: {key} is not text"
        for key in _FLAGS:
            if gpu.get(key) is not None and not isinstance(gpu[key], (bool, int)):
                return f"GPU {index}: {key} is not a flag"
        for key in _NUMBERS + _WHOLE:
            if gpu.get(key) is not None and not _number(gpu[key], key in _WHOLE):
                return f"GPU {index}: {key} is not a number"
        for key, size in (("remapped_rows", 4), ("fabric", 2)):
            value = gpu.get(key)
            if value is not None and not (isinstance(value, tuple) and len(value) == size and
                                          all(isinstance(v, bool) or _number(v, True) for v in value)):
                return f"GPU {index}: {key} is not {size} whole numbers"
        p2p = gpu.get("p2p")
        if p2p is not None:
            if not isinstance(p2p, dict):
                return f"GPU {index}: p2p is not a row of peers"
            for peer, caps in p2p.items():
                if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < MAX_GPUS or peer == index:
                    return f"GPU {index}: p2p peer {str(peer)[:20]!r} is not another GPU's index"
                if not isinstance(caps, dict) or not all(isinstance(k, str) and _number(v, True)
                                                         for k, v in caps.items()):
                    return f"GPU {index}: p2p towards {peer} is not a status per capability"
    return ""
