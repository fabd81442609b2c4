"""DCGM diagnostics (`dcgmi diag -r LEVEL -j`) as an optional benchmark: one row per test and GPU.

Each GPU's own outcome is its own row, so one GPU failing one test (Targeted Power: "Max power of 299.9
did not reach desired power minimum ... of 300.0 for GPU 3", DCGM_FR_TARGET_POWER_MSG in NVIDIA/DCGM
dcgmlib/dcgm_errors.h) is a FAIL naming that GPU and test whatever the other GPUs or a summary say. A
dcgmi without `-j` (it answers "PARSE ERROR" for the flag) is asked again without it and its table read.
A FAIL is classed by the cause DCGM itself gives (`cause()`): DCGM 4.x's error category on the warning
(software configuration / library / CUDA: the node's setup; hardware categories: the GPU), else the
suggestion DCGM appends to every message (dcgmlib/dcgm_errors.h): "Run a field diagnostic on the GPU." ->
drain-rma; "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics." ->
reset-gpu; "Check DCGM and system configuration." or CUDA's "system not yet initialized" (NVSwitch systems:
the fabric manager is not up) -> the setup: fix the service, reboot if it stays (reboot class, never RMA).
A Deployment FAIL (persistence mode, a graphics process, a library) is a setup matter and carries no
hardware class; a FAIL with no cause DCGM names keeps `drain-rma` (outside Deployment).

Never in the quick or full set (level 1 takes about a minute, level 3 half an hour, and both load every
GPU): it runs only when named (`--bench dcgm`, `verify_benchmarks: [dcgm]`), with the level from
`verify_bench_options: {dcgm: {level: 2}}` (1, 2 or 3; default 1). Where dcgmi is not installed it
is one SKIP saying so; where nv-hostengine does not answer, one ERROR saying what to start.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from verify.bench.common import last_line, progress, result, tail
from verify.bench.dcgm_parse import DcgmParseError, parse
from verify.judging import verdicts
from verify.result import CheckResult, Status

LEVELS = (1, 2, 3)
# dcgmi's own run times: r1 seconds to a minute, r2 a few minutes, r3 up to ~30 min on 8 GPUs.
TIMEOUTS = {1: 300.0, 2: 900.0, 3: 3600.0}
FIX_FAIL = ("drain the node; read the test's warning (DCGM error id {ids}) in the DCGM diagnostics guide and "
            "reset or RMA the GPU it names; re-run `dcgmi diag -r 3` before returning the node")
FIX_WARN = "read the warning; re-run `dcgmi diag -r {level}` on an idle node to see whether it stays"
FIX_SETUP = ("DCGM attributes this to the node's setup, not the GPU: fix what it names (e.g. start "
             "nvidia-fabricmanager where CUDA says 'system not yet initialized'), re-run `dcgmi diag`; drain and "
             "reboot if it stays")
FIX_RESET = ("DCGM's own triage: check DCGM and system logs, reset the GPU, restart DCGM and re-run `dcgmi diag`; "
             "RMA only if a field diagnostic then fails")

# dcgmlib/dcgm_errors.h: dcgmErrorCategory_t (DCGM 4.x puts it on each warning as "error_category")
SOFTWARE_CATEGORIES = {3, 4, 5, 6, 7, 8}  # SOFTWARE_CONFIG, _LIBRARY, _XID, _CUDA, _EUD, _OTHER
HARDWARE_CATEGORIES = {9, 10, 11, 12, 13, 14, 15}  # HARDWARE_THERMAL .. HARDWARE_OTHER
# The suggestion dcgm_errors.h appends to each message (TRIAGE_RUN_FIELD_DIAG_MSG, SYSTEM_TRIAGE_MSG,
# CONFIG_MSG), and CUDA 802 (cudaErrorSystemNotReady: the fabric manager is not running on NVSwitch systems)
_SUGGESTIONS = (
    ("Runafielddiagnosticonthegpu", verdicts.DRAIN_RMA, "DCGM: run a field diagnostic (hardware)"),
    ("checkdcgmandsystemconfiguration", verdicts.REBOOT, "DCGM: the system's configuration"),
    ("systemnotyetinitialized", verdicts.REBOOT, "CUDA: system not yet initialized (fabric manager not up)"),
    ("resetgpu.restartdcgm.rerundiagnostics", verdicts.RESET_GPU, "DCGM: system triage (reset the GPU, restart DCGM)"),
)
NO_JSON_FLAG = re.compile(r"PARSE ERROR.*-j|Couldn't find match for argument|unrecognized option.*-j", re.I | re.S)
NO_HOSTENGINE = re.compile(r"unable to establish a connection|host engine|hostengine|Connection refused", re.I)


@dataclass
class DcgmOptions:
    level: int = 1
    timeout_s: float = 0.0  # 0: the level's default (TIMEOUTS)


def argv(level: int, json_output: bool = True) -> list:
    return ["dcgmi", "diag", "-r", str(level)] + (["-j"] if json_output else [])


def run(spec: Optional[dict], profile: Optional[dict], node, overrides: Optional[dict] = None) -> list:
    overrides = overrides or {}
    level = overrides.get("level", 1)
    if isinstance(level, bool) or level not in LEVELS:
        return [result("bench.dcgm", Status.ERROR, f"verify_bench_options.dcgm.level {level!r:.20} must be 1, 2 or 3",
                       remediation="set verify_bench_options: {dcgm: {level: 1}} (or 2, 3)")]
    timeout = float(overrides.get("timeout_s") or TIMEOUTS[level])
    command = argv(level)
    progress(f"DCGM diagnostics level {level} (up to {timeout:.0f} s)")
    out = node.run(command, timeout_s=timeout)
    raw = {"argv": command, "returncode": out.returncode, "stderr_tail": tail(out.stderr)}
    if out.missing:
        return [result("bench.dcgm", Status.SKIP, "dcgmi is not installed (DCGM diagnostics need NVIDIA's "
                       "datacenter-gpu-manager package and its nv-hostengine)")]
    if not out.timed_out and NO_JSON_FLAG.search(out.stdout + out.stderr):
        command = argv(level, json_output=False)  # an older dcgmi: its table carries the same outcomes
        out = node.run(command, timeout_s=timeout)
        raw = {"argv": command, "returncode": out.returncode, "stderr_tail": tail(out.stderr)}
    if out.timed_out:
        return [result("bench.dcgm", Status.ERROR, f"dcgmi diag -r {level} hung: killed after {timeout:.0f} s",
                       details={"partial_output": dict(raw, stdout_tail=tail(out.stdout))})]
    try:
        report = parse(out.stdout)
    except DcgmParseError as exc:
        said = last_line(out.stderr + "\n" + out.stdout)
        if NO_HOSTENGINE.search(out.stdout + out.stderr):
            return [result("bench.dcgm", Status.ERROR, f"dcgmi cannot reach nv-hostengine: {said[:200]}",
                           remediation="start DCGM's host engine (systemctl start nvidia-dcgm, or nv-hostengine)",
                           details={"partial_output": raw})]
        form = "dcgmi diag -j" if "-j" in command else "dcgmi diag"
        return [result("bench.dcgm", Status.ERROR, f"{form} output (exit {out.returncode}): {exc}",
                       remediation="run `dcgmi diag -r 1 -j` by hand and read its output",
                       details={"partial_output": dict(raw, stdout_tail=tail(out.stdout))})]
    common = {"level": level, "dcgm_version": report.version, "driver": report.driver, "returncode": out.returncode}
    rows = [_row(row, level, common) for row in report.rows]
    if report.runtime_error:
        rows.append(result("bench.dcgm", Status.ERROR, f"DCGM runtime error: {report.runtime_error[:300]}",
                           details=common))
    return rows


def cause(row) -> tuple:
    """(action class, the cause in words) DCGM gives for a failed row; (DRAIN_RMA, ...) when it names none."""
    categories = set(row.error_categories)
    if categories & HARDWARE_CATEGORIES:
        return verdicts.DRAIN_RMA, "DCGM error category: hardware"
    if categories and categories <= SOFTWARE_CATEGORIES:
        return verdicts.REBOOT, "DCGM error category: software / setup"
    said = "".join("; ".join(row.warnings + [row.info]).lower().split())
    found = [(action, why) for key, action, why in _SUGGESTIONS if key.lower() in said]
    if found:  # the most disruptive of what DCGM suggests, except that a setup cause is never hardware
        setup = [f for f in found if f[0] == verdicts.REBOOT]
        return setup[0] if setup else max(found, key=lambda f: verdicts.ACTIONS.index(f[0]))
    return verdicts.DRAIN_RMA, "no cause named by DCGM (a failed test outside Deployment)"


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "test"


def _row(row, level: int, common: dict) -> CheckResult:
    gpus = row.gpus
    where = f"GPU {gpus[0]}" if len(gpus) == 1 else (f"GPUs {','.join(map(str, gpus))}" if gpus else "all GPUs")
    check_id = f"bench.dcgm.{_slug(row.test)}" + (f".gpu{gpus[0]}" if len(gpus) == 1 else "")
    details = dict(common, category=row.category, test=row.test, gpus=gpus, warnings=row.warnings,
                   error_ids=row.error_ids, info=row.info)
    status = Status(row.status)
    said = "; ".join(row.warnings)[:300] or row.info[:300]
    reason = f"{row.category} / {row.test} on {where}: {row.status.capitalize()}" + (f": {said}" if said else "")
    fix = ""
    if status is Status.FAIL:
        fix = FIX_FAIL.format(ids=", ".join(map(str, row.error_ids)) or "?")
        action, why = cause(row)
        if action is not None and row.category.lower() != "deployment":
            details[verdicts.ACTION_KEY] = action
            details["cause"] = why
            if action == verdicts.REBOOT:
                fix = FIX_SETUP
            elif action == verdicts.RESET_GPU:
                fix = FIX_RESET
    elif status is Status.WARN:
        fix = FIX_WARN.format(level=level)
    return result(check_id, status, reason, "Pass", row.status.capitalize(), fix, details)
