"""Persistence mode on every GPU (gpu_persistence_mode)."""
from __future__ import annotations

from verify.checks.common import result, role_disabled, section, skip
from verify.facts.gpu_query import query_gpus
from verify.node import Node
from verify.result import Status

ROLE = "gpu"


def judge(gpu) -> object:
    check_id = f"gpu.persistence_mode.{gpu.index}"
    observed = {True: "Enabled", False: "Disabled", None: "N/A"}[gpu.persistence_mode]
    if gpu.persistence_mode is True:
        return result(check_id, ROLE, Status.PASS, "Enabled", observed, details={"bus_id": gpu.bus_id})
    if gpu.persistence_mode is None:
        return skip(check_id, ROLE, f"GPU {gpu.index} ({gpu.name}) does not report persistence mode", "Enabled")
    return result(check_id, ROLE, Status.FAIL, "Enabled", observed,
                  f"GPU {gpu.index} ({gpu.name}, {gpu.bus_id}) has persistence mode off", "gpu_persistence_mode",
                  {"bus_id": gpu.bus_id})


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, "gpu.persistence_mode")
    if disabled:
        return [disabled]
    if not section(spec, ROLE).get("persistence_mode"):
        return [skip("gpu.persistence_mode", ROLE, "gpu_persistence_mode is false: not asked")]
    inventory = query_gpus(node)
    if inventory.unavailable_reason:
        return [skip("gpu.persistence_mode", ROLE, inventory.unavailable_reason, "Enabled")]
    if not inventory.gpus:
        return [skip("gpu.persistence_mode", ROLE, f"{inventory.source} lists no GPU", "Enabled")]
    return [judge(gpu) for gpu in inventory.gpus]
