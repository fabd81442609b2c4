"""The four hooks and their contracts. Each mode runs a set of verify.checks on this node; they differ in
which checks, what they may do to the scheduler, and how they answer:

- prolog / epilog (Slurm Prolog=/Epilog=, <= 0.5 s): GPU presence against the expected count, persistence,
  new driver events (Xid, lost from the bus) since the last check, ECC / row-remap pending, clock-event
  reasons, nvidia_peermem or DMA-BUF, NVSwitch fabric state. FAIL: drains the node itself with tunefleet's
  reason (so the reason is ours, not Slurm's "Prolog error"), one line on stderr, exit 1: Slurm then
  requeues the job and keeps the node drained. Anything else exits 0: a check that could not run (ERROR)
  or bad input is said on stderr and never drains a node (a broken config must not drain the fleet).
- health (Slurm HealthCheckProgram, a systemd timer; <= 5 s): the prolog set plus every config and health
  check (no benchmark). FAIL: drains with "tunefleet: <action class>: <check>: <reason>" unless the fleet's
  drain cap is reached; a clean run resumes only a drain whose reason tunefleet wrote; ERROR neither
  drains nor resumes. Exit 0 / 1 (FAIL) / 3 (ERROR) / 2 (bad input), one summary line on stdout.
- npd (Kubernetes node-problem-detector custom plugin): the health set, never drains (NPD sets the node
  condition); exit 0 OK, 1 problem (FAIL), 2 unknown (ERROR or bad input); one line on stdout cut to the
  plugin's output limit.
In every mode an error tunefleet did not foresee exits 70 (verify.cli.failed_unexpectedly), never 1: the Slurm
hook answers it as "could not check", NPD as Unknown; a damaged state file is set aside (verify.scheduler.state).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from verify.checks import REGISTRY, run_checks
from verify.checks.health_common import remember_previous
from verify.checks.health_fabric import fabric_results
from verify.facts.fabric import MEMO_FABRIC
from verify.facts.peer_access import P2P_CAPS
from verify.history.drain import DEFAULT_CAP, act, cap_allows, first_failure
from verify.node import Node
from verify.report import build_report, utc_now
from verify.result import CheckResult, Status, exit_code, sort_for_people
from verify.scheduler import contract, kernel_events, nvml, nvml_facts
from verify.scheduler import state as saved

PROLOG_CHECKS = ("health.gpu.presence", "gpu.persistence_mode", "health.gpu.xid", "health.gpu.memory",
                 "health.gpu.clocks", "gpu.nvidia_peermem")
ROLE = "scheduler"
NPD_OK, NPD_PROBLEM, NPD_UNKNOWN = 0, 1, 2


@dataclass
class Options:
    mode: str
    state_dir: str = saved.DEFAULT_DIR
    textfile_dir: str = ""
    drain: bool = True  # prolog, epilog, health: drain on FAIL (npd never does)
    dry_run: bool = False
    scheduler: str = "auto"
    node_name: str = ""
    cap: str = DEFAULT_CAP
    use_nvml: bool = True  # False in drills: the captured nvidia-smi answers must be the ones judged
    use_kmsg: bool = True  # False over a --root tree or in a drill: the captured dmesg is the log
    output_limit: int = contract.NPD_OUTPUT_LIMIT
    spec_source: str = ""  # "--spec FILE", "cache" or "rendered" (verify.scheduler.spec_cache), for the report
    nvml_reading: Optional[nvml.Reading] = None  # started by the caller (the prolog's, before its imports)


@dataclass
class Outcome:
    report: dict
    results: list
    actions: list = field(default_factory=list)  # scheduler rows (drain / resume / cap)
    code: int = 0
    line: str = ""  # the one line the hook prints


def checks_of(mode: str) -> list:
    return list(PROLOG_CHECKS) if mode in contract.JOB_MODES else list(REGISTRY)


def _state_row(message: str) -> CheckResult:
    return CheckResult("scheduler.state", ROLE, Status.WARN, "readable state", None, message,
                       "nothing to do: the next run starts a fresh state (the node was judged from boot)")


def _counters_of(results: list) -> dict:
    """node.memo["previous_counters"] for the next run: IB port counters and NVLink error counters."""
    found = {}
    for r in results:
        if r.check_id.startswith("health.ib.") and isinstance(r.details.get("counters"), dict):
            found[r.check_id] = r.details["counters"]
        elif r.check_id.startswith("health.nvlink.") and isinstance(r.details.get("errors"), dict):
            found[r.check_id] = r.details["errors"]
    return found


def judge(spec: dict, node: Node, options: Options, now: Optional[float] = None) -> tuple:
    """(results, run record): the mode's checks with NVML and the kernel-log cursor, the state saved."""
    now = time.time() if now is None else now
    start = time.perf_counter()
    rows, run = [], {"mode": options.mode, "started_at": utc_now()}
    if options.spec_source:
        run["spec_source"] = options.spec_source
    state, warning = saved.load(options.state_dir) if options.state_dir else (saved.State(), "")
    if warning:
        rows.append(_state_row(warning))
    boot = kernel_events.boot_id(node)
    if state.boot_id != boot:  # a reboot (or a first run): the cursor and the open events are of another boot
        state = saved.State(boot_id=boot, last_run=state.last_run)
    names = checks_of(options.mode)
    since, why = kernel_events.read_since(node, state.kernel_uptime_s, options.use_kmsg)
    if since is not None:
        kernel_events.prime(node, since, state.open_events)
        run["kernel_log"] = {"source": since.source, "after_uptime_s": state.kernel_uptime_s,
                             "records_read": since.records}
    else:
        run["kernel_log"] = {"unreadable": why}
    # The kernel log first: a prolog's NVML reading (a child since its start) may still be answering.
    if options.use_nvml:  # peer access too where health.p2p runs: NVML, never a CUDA context
        caps = P2P_CAPS if "health.p2p" in names else ()
        driver, raw = options.nvml_reading.answer() if options.nvml_reading else nvml.read_raw(caps)
        if driver is not None:
            nvml_facts.prime(node, driver, raw)
        run["gpu_source"] = "nvml" if driver is not None else f"nvidia-smi ({raw})"
    # The counters saved below are stamped `now`: the checks measure this interval on that same clock.
    remember_previous(node, state.counters, state.counters_at, now)
    if state.counters:
        run["counters_interval_s"] = round(now - state.counters_at, 3) if state.counters_at else None
    timings: dict = {}
    results = run_checks(spec, node, names, timings=timings)
    if MEMO_FABRIC in node.memo and "health.fabric" not in names:  # the registered check judged it already
        results += fabric_results(node)
    if since is not None:
        state.kernel_uptime_s = since.last_uptime_s
        fresh = [line for line in kernel_events.failing_lines(since.text) if line not in state.open_events]
        state.open_events += fresh
    counters = _counters_of(results)
    if counters:
        state.counters, state.counters_at = counters, now
    state.last_run[options.mode] = now
    if options.state_dir:
        problem = saved.save(options.state_dir, state)
        if problem:
            rows.append(_state_row(problem))
    run.update(duration_s=round(time.perf_counter() - start, 4), check_timings_s=timings, root=node.root,
               benchmarks=False, gpu_uuids=node.memo.get(nvml_facts.MEMO_UUIDS) or {},
               command="tunefleet " + " ".join(sys.argv[1:]))
    return results + rows, run


def facts_of(node: Node) -> dict:
    host = (node.read_value("/proc/sys/kernel/hostname") if not node.is_live else None) or os.uname().nodename
    inventory = node.memo.get("gpus")
    return {"host": host.split(".")[0], "root": node.root, "kernel": node.read_value("/proc/sys/kernel/osrelease"),
            "gpus": inventory.to_dict() if inventory is not None else None}


def summary(results: list, limit: Optional[int] = None) -> str:
    """'FAIL <class>: <check>: <reason>' of the worst result, or 'OK (n checks)'; one printable line."""
    failure = first_failure(results)
    if failure:
        text = f"FAIL {failure}"
    else:
        worst = sort_for_people(r for r in results if r.status in (Status.ERROR, Status.WARN))
        text = (f"{worst[0].status.value} {worst[0].check_id}: {worst[0].reason}" if worst
                else f"OK ({len(results)} checks)")
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def act_on(results: list, options: Options, scheduler_node: Node, name: str) -> list:
    """Drain on FAIL (under the cap), resume a tunefleet drain on a clean run, nothing on ERROR: rows."""
    if options.mode == "npd" or not options.drain:
        return []
    failure = first_failure(results)
    statuses = {r.status for r in results}
    if failure:
        allowed, row = cap_allows(scheduler_node, name, options.cap, options.scheduler)
        if not allowed:
            return [row]
        return [act(scheduler_node, "drain", name, options.scheduler, failure, options.dry_run).to_result()]
    if options.mode == "health" and Status.ERROR not in statuses:
        return [act(scheduler_node, "resume", name, options.scheduler, dry_run=options.dry_run).to_result()]
    return []


def run_mode(spec: dict, node: Node, options: Options, scheduler_node: Optional[Node] = None,
             now: Optional[float] = None) -> Outcome:
    results, run = judge(spec, node, options, now)
    facts = facts_of(node)
    name = options.node_name or facts["host"]
    actions = act_on(results, options, scheduler_node or Node(), name)
    report = build_report(spec, facts, results + actions, run)
    outcome = Outcome(report, results, actions)
    judged = results  # the node's verdict: a scheduler command that failed is said, it is not the node's fault
    if options.mode == "npd":
        statuses = {r.status for r in judged}
        outcome.code = NPD_PROBLEM if Status.FAIL in statuses else NPD_UNKNOWN if Status.ERROR in statuses else NPD_OK
        outcome.line = summary(judged, options.output_limit)
    elif options.mode in contract.JOB_MODES:
        outcome.code = 1 if any(r.status is Status.FAIL for r in judged) else 0
        outcome.line = summary(judged)
    else:
        outcome.code = exit_code(judged + actions)
        outcome.line = summary(judged)
    return outcome
