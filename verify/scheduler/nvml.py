"""In-process NVML for the scheduler modes: one NVML session reads every GPU reading the prolog judges,
and hands them to the same facts the checks read (node.memo: verify.facts.gpu_query's inventory and
verify.facts.health_smi's readings), so the checks' judges run unchanged without an nvidia-smi process.

Split like the rest of verify: `read_raw` is the only code that touches NVML (pynvml, imported inside it);
`health_fields` is a pure function from those numbers to the fields nvidia-smi would have printed.
The NVSwitch fabric state it reads goes to node.memo[verify.facts.fabric.MEMO_FABRIC]; its judge is
verify.checks.health_fabric. Where health.p2p runs (the health and npd hooks) it also asks NVML's P2P status
of every ordered pair (READ and WRITE), primed as the PeerAccess health.p2p judges: no CUDA context.
Where pynvml is missing the checks fall back to nvidia-smi by themselves (slower: a process per query).
"""
from __future__ import annotations

import threading
from typing import Optional

from verify.facts import health_smi
from verify.facts.fabric import MEMO_FABRIC
from verify.facts.gpu_query import Gpu, GpuInventory
from verify.facts.peer_access import MEMO_P2P, P2P_CAPS, SOURCE_NVML, from_status
from verify.judging import clock_reasons
from verify.node import Node

NA = "[N/A]"
# nvmlClocksEventReason* bits as nvidia-smi names them in --query-gpu, from their one home: the problem
# reasons the clocks check judges and the power cap it shows (verify.judging.clock_reasons)
CLOCK_BITS = tuple((clock_reasons.smi_field(name), bit) for bit, name in clock_reasons.REASON_BITS
                   if name in clock_reasons.PROBLEM + clock_reasons.AT_POWER_LIMIT)
MEMO_UUIDS = "gpu_uuids"  # bus id -> UUID, for the Prometheus labels


def _yes(value) -> str:
    return NA if value is None else ("Yes" if value else "No")


def health_fields(raw: dict) -> dict:
    """One GPU's raw NVML numbers (read_raw's dict; None = not supported) -> nvidia-smi's --query-gpu fields."""
    def number(name: str, scale: float = 1.0) -> str:
        value = raw.get(name)
        return NA if value is None else f"{value * scale:g}"

    fields = {"index": str(raw["index"]), "pci.bus_id": raw["bus_id"], "name": raw.get("name") or ""}
    ecc = raw.get("ecc_mode")
    fields["ecc.mode.current"] = NA if ecc is None else ("Enabled" if ecc else "Disabled")
    fields["ecc.errors.uncorrected.volatile.total"] = number("ecc_uncorrected_volatile")
    fields["ecc.errors.uncorrected.aggregate.total"] = number("ecc_uncorrected_aggregate")
    fields["retired_pages.pending"] = _yes(raw.get("retired_pending"))
    rows = raw.get("remapped_rows")  # (correctable, uncorrectable, pending, failure)
    fields["remapped_rows.pending"] = NA if rows is None else _yes(rows[2])
    fields["remapped_rows.failure"] = NA if rows is None else _yes(rows[3])
    fields["remapped_rows.uncorrectable"] = NA if rows is None else str(rows[1])
    reasons = raw.get("clock_reasons")
    fields["clocks_throttle_reasons.active"] = NA if reasons is None else f"0x{reasons:016x}"
    for name, bit in CLOCK_BITS:
        fields[name] = NA if reasons is None else ("Active" if reasons & bit else "Not Active")
    fields["temperature.gpu"] = number("temperature_c")
    fields["temperature.gpu.tlimit"] = number("tlimit_margin_c")
    fields["temperature.memory"] = NA
    fields["power.draw"] = number("power_mw", 1e-3)
    fields["enforced.power.limit"] = number("power_limit_mw", 1e-3)
    fields["vbios_version"] = raw.get("vbios") or NA
    return fields


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
    fabric = _ask(pynvml, getattr(pynvml, "nvmlDeviceGetGpuFabricInfo", None), h)
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
        "fabric": None if fabric is None else (int(fabric.state), int(fabric.status)),
    }


def read_p2p_row(pynvml, index: int, count: int) -> Optional[dict]:
    """{peer index: {capability: nvmlGpuP2PStatus_t}} of one GPU towards every other, inside an initialised
    session; None where NVML answers no status for one of them (health.p2p then asks nvidia-smi)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    row = {}
    for peer in range(count):
        if peer == index:
            continue
        other = pynvml.nvmlDeviceGetHandleByIndex(peer)
        statuses = {name: _ask(pynvml, pynvml.nvmlDeviceGetP2PStatus, handle, other, caps_index)
                    for name, caps_index, _ in P2P_CAPS}
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


def read_raw(with_p2p: bool = False) -> tuple:
    """(driver version, [raw dict per GPU]) from one NVML session, or (None, why not). with_p2p: each GPU's
    dict also holds "p2p" (read_p2p_row), for health.p2p; the prolog does not ask."""
    try:
        import pynvml  # only where NVML is read: the config checks run on a bare python3
    except ImportError:
        return None, "pynvml is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML did not initialise: {exc}"
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        count = pynvml.nvmlDeviceGetCount()
        if count <= 1:
            return driver, [read_gpu(pynvml, index) for index in range(count)]

        def read_one(index: int) -> dict:
            raw = read_gpu(pynvml, index)
            if with_p2p:
                raw["p2p"] = read_p2p_row(pynvml, index, count)
            return raw

        # NVML is thread-safe and ctypes releases the GIL in each call: the GPUs are read side by side, so an
        # 8-GPU prolog does not pay 8 readings in a row (unless the driver itself serialises them).
        return driver, side_by_side(read_one, count)
    except pynvml.NVMLError as exc:
        return None, f"NVML failed while reading the GPUs: {exc}"
    finally:
        pynvml.nvmlShutdown()


def prime(node: Node, driver: str, raw_gpus: list) -> None:
    """Hand one NVML reading to the facts the checks read, so none of them starts nvidia-smi."""
    inventory = GpuInventory("nvml", [Gpu(g["index"], g["bus_id"], g.get("name") or "", g.get("persistence"),
                                          g.get("memory_mib")) for g in raw_gpus], driver_version=driver)
    node.memo["gpus"] = inventory
    readings = [health_smi.GpuHealth(g["index"], g["bus_id"], g.get("name") or "", health_fields(g))
                for g in raw_gpus]
    node.memo["health_smi"] = (readings, "" if readings else "NVML lists no GPU")
    node.memo[MEMO_UUIDS] = {g["bus_id"]: g["uuid"] for g in raw_gpus if g.get("uuid")}
    node.memo[MEMO_FABRIC] = {g["index"]: g["fabric"] for g in raw_gpus if g.get("fabric") is not None}
    rows = [g.get("p2p") for g in raw_gpus]
    if len(raw_gpus) > 1 and all(row is not None for row in rows):  # else health.p2p asks nvidia-smi
        by_capability = {name: {(g["index"], peer): row[peer][name] for g, row in zip(raw_gpus, rows) for peer in row}
                         for name, _, _ in P2P_CAPS}
        node.memo[MEMO_P2P] = from_status({g["index"]: g.get("name") or "" for g in raw_gpus}, by_capability,
                                          SOURCE_NVML)
