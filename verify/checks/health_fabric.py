"""The NVSwitch fabric: every GPU registered with it (NVML's fabric state Completed, status Success) and
nvidia-fabricmanager running at the driver's version where the NVSwitches sit on this host's bus (HGX).

A Fabric Manager that is down leaves NVLink "Active" while CUDA cannot start (error 802, "system not yet
initialized") and peer access is dead (NVIDIA Fabric Manager User Guide, "Fabric Manager"; the fabric
manager package must match the driver's version exactly, same guide, "Installation"). A GPU whose
registration is still in progress while the manager runs is a WARN (a node just booted; the scheduler's
prolog sees it); in progress or not started with the manager down, or finished with an error, is a FAIL.
Systems with no fabric (PCIe cards, NVLink bridges, one GPU in a VM) SKIP with the reason.
"""
from __future__ import annotations

import re
from typing import Optional

from verify.checks.common import error, result, skip
from verify.checks.health_common import ROLE
from verify.facts.fabric import (
    FABRIC_COMPLETED,
    FABRIC_IN_PROGRESS,
    FABRIC_NAMES,
    FABRIC_NOT_STARTED,
    FABRIC_NOT_SUPPORTED,
    MANAGER_LOG,
    MANAGER_UNIT,
    UNREADABLE,
    ManagerState,
    nvswitches,
    read_gpu_fabric,
    read_manager,
    read_manager_log,
)
from verify.facts.pci import driver_reason
from verify.judging import verdicts
from verify.node import Node
from verify.result import Status

# The fabric's own health of a GPU (`nvidia-smi -q` "Fabric / Health", NVML nvmlGpuFabricInfo_v3 healthSummary and
# healthMask, nvml.h NVML_GPU_FABRIC_HEALTH_SUMMARY_* / NVML_GPU_FABRIC_HEALTH_MASK_*): (field, value printed) ->
# (class, words). Unhealthy or a route unhealthy: NVLink traffic of a job there fails (drain; reset or reboot);
# Limited Capacity / degraded bandwidth, a route or access-timeout recovery in progress: works slower or recovers
# by itself (watch). gpud's fabric-state component treats every one of these as unhealthy; the summary is the
# driver's own verdict over the mask.
FABRIC_HEALTH = {
    ("summary", "unhealthy"): (verdicts.REBOOT, "the NVLink fabric reports the GPU Unhealthy"),
    ("route unhealthy", "true"): (verdicts.REBOOT, "a fabric route of the GPU is unhealthy"),
    ("summary", "limited capacity"): (verdicts.WATCH, "the NVLink fabric reports Limited Capacity"),
    ("bandwidth", "degraded"): (verdicts.WATCH, "the GPU's fabric bandwidth is degraded"),
    ("route recovery in progress", "true"): (verdicts.WATCH, "a fabric route recovery is in progress"),
    ("access timeout recovery", "true"): (verdicts.WATCH, "a fabric access-timeout recovery is in progress"),
}
# Values that say nothing is wrong (or nothing is reported); "Incorrect Configuration" names the fault otherwise.
_QUIET = ("", "n/a", "not supported", "none", "false", "full", "healthy")
_SUMMARIES = ("healthy", "unhealthy", "limited capacity", "n/a", "not supported", "")


def health_findings(health: Optional[dict]) -> list:
    """(class, words) for each fault the fabric's health block shows; an unknown summary is (None, words):
    unreadable, judged ERROR."""
    findings = []
    for key, value in (health or {}).items():
        name, said = key.strip().lower(), str(value).strip().lower()
        if (name, said) in FABRIC_HEALTH:
            findings.append(FABRIC_HEALTH[(name, said)])
        elif name == "incorrect configuration" and said not in _QUIET:
            findings.append((verdicts.FIX_CONFIG, f"the fabric reports an incorrect configuration ({value})"))
        elif name == "summary" and said not in _SUMMARIES:
            findings.append((None, f"fabric health summary {str(value)[:40]!r} is not one nvidia-smi documents"))
    return findings


START_MANAGER = f"start it (systemctl enable --now {MANAGER_UNIT}) and check its log (/var/log/fabricmanager.log)"


def judge_fabric(index: int, bus_id: str, state: int, status: Optional[int],
                 manager_active: Optional[bool] = None, health: Optional[dict] = None) -> Optional[object]:
    """One GPU's NVSwitch fabric registration (nvmlDeviceGetGpuFabricInfo); None where there is no fabric.
    manager_active: nvidia-fabricmanager's state where known (None in the scheduler's prolog); health: the
    fabric's health block where the driver prints one (FABRIC_HEALTH judges it)."""
    check_id = f"health.gpu.fabric.{index}"
    if state == FABRIC_NOT_SUPPORTED:
        return None
    label = f"GPU {index} ({bus_id})"
    details = {"index": index, "bus_id": bus_id, "state": FABRIC_NAMES.get(state, f"state {state}"),
               "status": status}
    if health:
        details["health"] = dict(health)
    if state == FABRIC_COMPLETED and status == 0:
        findings = health_findings(health)
        unreadable = [words for action, words in findings if action is None]
        if unreadable:
            return error(check_id, ROLE, f"could not read the fabric health of {label}: {unreadable[0]}",
                         "fabric healthy")
        if findings:
            action = verdicts.worst(a for a, _ in findings)
            said = "; ".join(words for a, words in findings if a == action)
            return result(check_id, ROLE, verdicts.status_of(action), "fabric completed, healthy", said,
                          f"{label}: " + "; ".join(words for _, words in findings),
                          details=dict(details, **{verdicts.ACTION_KEY: action}),
                          fix=verdicts.remedy(action, index, f"{label}'s NVLink fabric"))
        return result(check_id, ROLE, Status.PASS, "fabric completed", "completed",
                      details=dict(details, **{verdicts.ACTION_KEY: verdicts.OK}))
    seen = FABRIC_NAMES.get(state, f"state {state}")
    if state in (FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS) and manager_active is False:
        return result(check_id, ROLE, Status.FAIL, "fabric completed", f"{seen}, {MANAGER_UNIT} not active",
                      f"{label}: NVSwitch fabric registration {seen} and {MANAGER_UNIT} is not running: CUDA and "
                      "NVLink peer access are unavailable",
                      details=dict(details, **{verdicts.ACTION_KEY: verdicts.REBOOT}),
                      fix=f"{MANAGER_UNIT}: {START_MANAGER}; if it does not complete: "
                          + verdicts.remedy(verdicts.REBOOT, index, label))
    if state in (FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS):
        # still registering (fabric manager starting): a job now would have no NVLink; not yet a fault
        return result(check_id, ROLE, Status.WARN, "fabric completed", seen,
                      f"{label}: NVSwitch fabric registration {seen}",
                      details=dict(details, **{verdicts.ACTION_KEY: verdicts.WATCH}),
                      fix=f"check {MANAGER_UNIT} (systemctl status {MANAGER_UNIT})")
    return result(check_id, ROLE, Status.FAIL, "fabric completed", f"{seen}, status {status}",
                  f"{label}: NVSwitch fabric registration finished with NVML status {status}",
                  details=dict(details, **{verdicts.ACTION_KEY: verdicts.REBOOT}),
                  fix=verdicts.remedy(verdicts.REBOOT, index, label))


# The Fabric Manager's own log lines of this boot (verify.facts.fabric.read_manager_log): pattern -> (class, words).
# A fatal NVSwitch error needs the GPUs and switches reset together (Fabric Manager User Guide, "NVSwitch SXid
# errors": the same class as health.nvswitch.sxid); a non-fatal one is logged and counted; any other ERROR line
# is watched. The patterns are the ones leptonai/gpud's fabric-manager-log component matches.
MANAGER_LOG_RULES = (
    (re.compile(r"detected NVSwitch fatal error (\d+)"), verdicts.REBOOT, "NVSwitch fatal error"),
    (re.compile(r"detected NVSwitch non-fatal error (\d+)"), verdicts.WATCH, "NVSwitch non-fatal error"),
    (re.compile(r"failed to find the GPU handle \d+ in the multicast team"), verdicts.WATCH,
     "a GPU missing from an NVLink multicast team"),
)


def manager_log_findings(lines: list) -> list:
    """(class, words) per kind of event the log holds this boot, with its count and its first line."""
    found: dict = {}
    for line in lines:
        for pattern, action, words in MANAGER_LOG_RULES:
            match = pattern.search(line.message)
            if match:
                key = (action, words + (f" {match.group(1)}" if match.groups() else ""))
                break
        else:
            if line.level not in ("ERROR", "FATAL"):
                continue
            key = (verdicts.WATCH, f"{line.level} line")
        count, first = found.get(key, (0, line.message))
        found[key] = (count + 1, first)
    return [(action, f"{MANAGER_UNIT} logged {words} ({count}x this boot; first: {first[:160]})")
            for (action, words), (count, first) in found.items()]


def judge_manager(manager: ManagerState, driver: str, switches: list, log_lines=(), log_why: str = "") -> object:
    check_id = "health.fabric.manager"
    expected = f"{MANAGER_UNIT} active, version {driver or 'of the driver'}"
    observed = f"{manager.state_text}, version {manager.version or 'unknown'}"
    logged = manager_log_findings(list(log_lines))
    details = {"switches": switches, "state": manager.state_text, "version": manager.version, "driver": driver,
               "log": [words for _, words in logged]}
    if manager.active is None:
        return skip(check_id, ROLE, f"cannot read {MANAGER_UNIT}'s state ({manager.state_text})", expected)
    if not manager.active:
        said = "; ".join(words for _, words in logged)
        return result(check_id, ROLE, Status.FAIL, expected, observed,
                      f"{len(switches)} NVSwitch(es) on the bus and {MANAGER_UNIT} is {manager.state_text}"
                      + (f"; {said}" if said else ""),
                      details=dict(details, **{verdicts.ACTION_KEY: verdicts.REBOOT}),
                      fix=f"{MANAGER_UNIT}: {START_MANAGER}")
    if driver and manager.version and manager.version != driver:
        return result(check_id, ROLE, Status.FAIL, expected, observed,
                      f"{MANAGER_UNIT} {manager.version} does not match the driver {driver} (the manager refuses "
                      "to run or leaves the fabric unconfigured)",
                      details=dict(details, **{verdicts.ACTION_KEY: verdicts.REBOOT}),
                      fix=f"install the fabric manager package of driver {driver}, then restart {MANAGER_UNIT}")
    if logged:
        action = verdicts.worst(a for a, _ in logged)
        return result(check_id, ROLE, verdicts.status_of(action), expected, observed,
                      "; ".join(words for a, words in logged if a == action),
                      details=dict(details, **{verdicts.ACTION_KEY: action}),
                      fix=verdicts.remedy(action, "", "the NVSwitches and GPUs") + f" (log: {MANAGER_LOG})")
    if log_why:
        return error(check_id, ROLE, log_why, expected)
    return result(check_id, ROLE, Status.PASS, expected, observed, details=details)


def fabric_results(node: Node) -> list:
    """The scheduler's prolog: NVML's per-GPU state only (no systemctl under the prolog's time limit)."""
    found, _, why = read_gpu_fabric(node)
    rows = [judge_fabric(g.index, g.bus_id, g.state, g.status) for g in found]
    rows = [r for r in rows if r is not None]
    return rows or [skip("health.gpu.fabric", ROLE, why or "no NVSwitch fabric reported by NVML")]


def run(spec: dict, node: Node) -> list:
    why = driver_reason(node)
    if why:
        return [skip("health.gpu.fabric", ROLE, why)]
    found, driver, why = read_gpu_fabric(node)
    if why.startswith(UNREADABLE):
        return [error("health.gpu.fabric", ROLE, why)]
    if why:
        return [skip("health.gpu.fabric", ROLE, why)]
    switches = nvswitches(node)
    with_fabric = [g for g in found if g.state != FABRIC_NOT_SUPPORTED]
    if not with_fabric and not switches:
        return [skip("health.gpu.fabric", ROLE, "no NVSwitch fabric: the driver reports no fabric state for any GPU "
                                                "and no NVSwitch is on the PCI bus (PCIe or NVLink-bridge system)")]
    manager = read_manager(node) if switches else None
    rows = [judge_fabric(g.index, g.bus_id, g.state, g.status, manager.active if manager else None, g.health)
            for g in with_fabric]
    for row, gpu in zip(rows, with_fabric):
        row.details.update(clique_id=gpu.clique_id, cluster_uuid=gpu.cluster_uuid, guid=gpu.guid)
    if manager is not None:
        rows.append(judge_manager(manager, driver, switches, *read_manager_log(node)))
    else:
        rows.append(skip("health.fabric.manager", ROLE, "no NVSwitch on this host's PCI bus: the fabric is managed "
                                                        "off the host (GB200 NVL switch trays) or there is none"))
    return [r for r in rows if r is not None]
