"""The scheduler modes' NVML reading (verify.scheduler.nvml, the only code that touches NVML) handed to the
same facts the checks read (node.memo: verify.facts.gpu_query's inventory and verify.facts.health_smi's
readings), so the checks' judges run unchanged without an nvidia-smi process.

`health_fields` is a pure function from the raw numbers to the fields nvidia-smi would have printed. The
NVSwitch fabric state goes to node.memo[verify.facts.fabric.MEMO_FABRIC]; its judge is
verify.checks.health_fabric. Where health.p2p runs (the health and npd hooks) the P2P status of every ordered
pair (READ and WRITE) is primed as the PeerAccess health.p2p judges: no CUDA context. Where pynvml is missing
nothing is primed and the checks fall back to nvidia-smi by themselves (slower: a process per query).
"""
from __future__ import annotations

from verify.facts import health_smi
from verify.facts.fabric import MEMO_FABRIC
from verify.facts.gpu_query import Gpu, GpuInventory
from verify.facts.peer_access import MEMO_P2P, P2P_CAPS, SOURCE_NVML, from_status
from verify.judging import clock_reasons
from verify.node import Node
from verify.scheduler.nvml import reading_problem

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


def prime(node: Node, driver: str, raw_gpus: list) -> str:
    """Hand one NVML reading to the facts the checks read, so none of them starts nvidia-smi: ''. A reading
    not of read_raw's shape (verify.scheduler.nvml.reading_problem) primes nothing and says why: the checks
    then ask nvidia-smi, as without pynvml."""
    problem = reading_problem(driver, raw_gpus)
    if problem:
        return problem
    inventory = GpuInventory("nvml", [Gpu(g["index"], g["bus_id"], g.get("name") or "", g.get("persistence"),
                                          g.get("memory_mib")) for g in raw_gpus], driver_version=driver)
    node.memo["gpus"] = inventory
    readings = [health_smi.GpuHealth(g["index"], g["bus_id"], g.get("name") or "", health_fields(g))
                for g in raw_gpus]
    node.memo["health_smi"] = (readings, "" if readings else "NVML lists no GPU")
    node.memo[MEMO_UUIDS] = {g["bus_id"]: g["uuid"] for g in raw_gpus if g.get("uuid")}
    node.memo[MEMO_FABRIC] = {g["index"]: g["fabric"] for g in raw_gpus if g.get("fabric") is not None}
    rows = [g.get("p2p") for g in raw_gpus]
    indices = {g["index"] for g in raw_gpus}
    # every ordered pair with every capability, else health.p2p asks nvidia-smi
    if len(raw_gpus) > 1 and all(row is not None and set(row) == indices - {g["index"]} and
                                 all(name in caps for caps in row.values() for name, _, _ in P2P_CAPS)
                                 for g, row in zip(raw_gpus, rows)):
        by_capability = {name: {(g["index"], peer): row[peer][name] for g, row in zip(raw_gpus, rows) for peer in row}
                         for name, _, _ in P2P_CAPS}
        node.memo[MEMO_P2P] = from_status({g["index"]: g.get("name") or "" for g in raw_gpus}, by_capability,
                                          SOURCE_NVML)
    return ""
