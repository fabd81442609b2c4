"""The config checks, in report order. Each entry names `module:function`, imported when run,
so one broken or missing module is an ERROR result, never a crash of the whole run.

Every function has the signature `run(spec: dict, node: Node) -> list[CheckResult]`.
"""
from __future__ import annotations

import importlib
import time
import traceback
from typing import Optional

from verify.node import Node
from verify.result import CheckResult, Status

REGISTRY = {
    "sysctl": ("sysctl", "verify.checks.sysctl:run"),
    "network.mtu": ("network", "verify.checks.mtu:run"),
    "network.path_mtu": ("network", "verify.checks.path_mtu:run"),
    "network.irq_affinity": ("network", "verify.checks.irq_affinity:run"),
    "network.irqbalance": ("network", "verify.checks.irqbalance:run"),
    "network.ring": ("network", "verify.checks.ethtool_params:run_ring"),
    "network.channels": ("network", "verify.checks.ethtool_params:run_channels"),
    "storage": ("storage", "verify.checks.storage:run"),
    "gpu.persistence_mode": ("gpu", "verify.checks.gpu_persistence:run"),
    "gpu.nvidia_peermem": ("gpu", "verify.checks.peermem:run"),
    "gpu.nccl_conf": ("gpu", "verify.checks.nccl_conf:run"),
    "gpu.versions": ("gpu", "verify.checks.versions:run"),
    "memory": ("memory", "verify.checks.memory:run"),
    "limits": ("limits", "verify.checks.limits:run"),
    "cpu.governor": ("cpu", "verify.checks.cpu:run"),
    "conflicts": ("conflicts", "verify.checks.conflicts:run"),
    "health.gpu.presence": ("health", "verify.checks.health_gpu:run_presence"),
    "health.gpu.xid": ("health", "verify.checks.health_xid:run"),
    "health.gpu.memory": ("health", "verify.checks.health_gpu:run_memory"),
    "health.gpu.clocks": ("health", "verify.checks.health_gpu:run_clocks"),
    "health.pcie": ("health", "verify.checks.health_pcie:run"),
    "health.aer": ("health", "verify.checks.health_aer:run"),
    "health.nvlink": ("health", "verify.checks.health_nvlink:run"),
    "health.ib": ("health", "verify.checks.health_ib:run"),
    "health.topology": ("health", "verify.checks.health_topology:run"),
    "health.fabric": ("health", "verify.checks.health_fabric:run"),
    "health.dcgm": ("health", "verify.checks.health_dcgm:run"),
    "health.p2p": ("health", "verify.checks.health_p2p:run"),
    "pcie": ("pcie", "verify.checks.pcie_path:run"),
}


def resolve(target: str):
    module_name, function_name = target.split(":")
    return getattr(importlib.import_module(module_name), function_name)


def run_one(name: str, spec: dict, node: Node) -> list:
    role, target = REGISTRY[name]
    try:
        results = resolve(target)(spec, node)
        if not isinstance(results, list) or not all(isinstance(r, CheckResult) for r in results):
            raise TypeError(f"{target} returned {type(results).__name__}, not a list of CheckResult")
        return results
    except Exception as exc:  # a check's own bug or unreadable input must not end the run
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
        # The traceback goes into the report's JSON (details), never onto the terminal.
        details = {"traceback": traceback.format_exc(limit=12)}
        return [CheckResult(name, role, Status.ERROR, reason=f"{type(exc).__name__}: {str(exc)[:300]}{at}",
                            details=details)]


def run_checks(spec: dict, node: Node, names: Optional[list] = None, timings: Optional[dict] = None) -> list:
    """Every registered check (or `names`) against the node; timings gets seconds per check."""
    results = []
    for name in names or list(REGISTRY):
        start = time.perf_counter()
        results.extend(run_one(name, spec, node))
        if timings is not None:
            timings[name] = round(time.perf_counter() - start, 6)
    return results
