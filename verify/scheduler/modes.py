"""The four hooks and their contracts. Each mode runs a set of verify.checks on this node; they differ in
which checks, what they may do to the scheduler, and how they answer:

What a hook does about each finding is the operator's policy (verify.scheduler.policy; defaults: a hardware
FAIL drains at once, a configuration finding is reported and never drains from a hook, a WARN is reported).
- prolog / epilog (Slurm Prolog=/Epilog=, <= 0.5 s): GPU presence against the expected count, persistence,
  new driver events (Xid, lost from the bus) since the last check, ECC / row-remap pending, clock-event
  reasons, nvidia_peermem or DMA-BUF, NVSwitch fabric state. A hardware fault the policy drains for: drains
  the node itself with tunefleet's reason (so the reason is ours, not Slurm's "Prolog error"), one line on
  stderr, exit 1: Slurm then requeues the job and keeps the node drained. Anything else exits 0: a
  configuration finding (reported), a check that could not run (ERROR) or bad input is said on stderr and
  never drains a node (a broken config must not drain the fleet).
- health (Slurm HealthCheckProgram, a systemd timer; <= 5 s): the prolog set plus every config and health
  check (no benchmark). What the policy drains for: drains with "tunefleet: <action class>: <check>: <reason>
  (policy <rule>)" unless the fleet's drain cap is reached; a run with nothing to drain resumes only a drain
  whose reason tunefleet wrote (not while a check is inside its recovery window); ERROR neither drains nor
  resumes. Exit 0 / 1 (drained) / 3 (ERROR) / 2 (bad input), one summary line on stdout.
- npd (Kubernetes node-problem-detector custom plugin): the health set, never drains (NPD sets the node
  condition); exit 0 OK, 1 problem (what the policy drains for; with npd_events, what it reports: NPD's
  temporary rule), 2 unknown (ERROR or bad input); one line on stdout cut to the plugin's output limit.
In every mode an error tunefleet did not foresee exits 70 (verify.cli.failed_unexpectedly), never 1: the Slurm
hook answers it as "could not check", NPD as Unknown; a damaged state file is set aside (verify.scheduler.state).
"""
from __future__ import annotations

import contextlib
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
from verify.history.drain import DEFAULT_CAP, REASON_LIMIT, SLURM_REASON_PREFIX, act, cap_allows
from verify.judging import verdicts
from verify.node import Node
from verify.report import build_report, utc_now
from verify.result import CheckResult, Status, exit_code, sort_for_people
from verify.scheduler import contract, kernel_events, nvml, nvml_facts
from verify.scheduler import policy as policies
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
    policy: Optional[policies.Policy] = None  # the operator's (--policy); None: the defaults
    policy_problem: str = ""  # why the --policy file was refused (the defaults apply): a WARN row
    npd_events: bool = False  # npd: exit 1 for what the policy reports (an NPD event), not for what drains


@dataclass
class Outcome:
    report: dict
    results: list
    actions: list = field(default_factory=list)  # scheduler rows (drain / resume / cap)
    applied: Optional[policies.Applied] = None  # what the policy decided about each finding
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
        if r.check_id.startswith(("health.ib.", "health.aer.")) and isinstance(r.details.get("counters"), dict):
            found[r.check_id] = r.details["counters"]
        elif r.check_id.startswith("health.nvlink.") and isinstance(r.details.get("errors"), dict):
            found[r.check_id] = r.details["errors"]
    return found


def judge(spec: dict, node: Node, options: Options, now: Optional[float] = None) -> tuple:
    """(results, run record, what the policy decided): the mode's checks with NVML and the kernel-log cursor,
    the policy applied (its counts kept), the state saved."""
    now = time.time() if now is None else now
    start = time.perf_counter()
    rows, run = [], {"mode": options.mode, "started_at": utc_now()}
    if options.spec_source:
        run["spec_source"] = options.spec_source
    state, warning = saved.load(options.state_dir) if options.state_dir else (saved.State(), "")
    if warning:
        rows.append(_state_row(warning))
    if options.policy_problem:
        rows.append(CheckResult("scheduler.policy", ROLE, Status.WARN, "a valid policy file", None,
                                f"{options.policy_problem}; the defaults apply",
                                "fix the policy file (docs/verdicts.md, \"The operator's policy\")"))
    boot = kernel_events.boot_id(node)
    if state.boot_id != boot:  # a reboot (or a first run): the cursor and the open events are of another boot
        state = saved.State(boot_id=boot, last_run=state.last_run)
    names = checks_of(options.mode)
    ahead = _cursor_ahead(node, state.kernel_uptime_s)
    if ahead:  # a cursor past this boot's uptime would skip every record: read from the boot instead
        run["kernel_log_cursor_reset"] = ahead
        state.kernel_uptime_s = None
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
            problem = nvml_facts.prime(node, driver, raw)
            if problem:  # primed nothing: the checks ask nvidia-smi, as without pynvml
                driver, raw = None, f"the NVML answer is not a reading: {problem}"
        run["gpu_source"] = "nvml" if driver is not None else f"nvidia-smi ({raw})"
    # The counters saved below are stamped `now`: the checks measure this interval on that same clock. A stamp
    # from before this boot, from the future or without a time gives no interval: judged since driver load.
    unusable = _unusable_stamp(node, state.counters_at, now) if state.counters else ""
    if unusable:
        run["counters_interval_unknown"] = unusable
    else:
        remember_previous(node, state.counters, state.counters_at, now)
    if state.counters:
        run["counters_interval_s"] = None if unusable else round(now - state.counters_at, 3)
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
    applied = policies.apply(options.policy or policies.Policy(), results + rows,
                             state.policy_runs.get(options.mode, {}), now, options.mode in contract.JOB_MODES)
    state.policy_runs[options.mode] = applied.runs
    decided = {d.check_id: d for d in applied.decisions}
    for result in results + rows:
        if result.check_id in decided and result.status in policies.FINDINGS:
            result.details["policy"] = decided[result.check_id].to_dict()
            if result.status is Status.FAIL and decided[result.check_id].fault == policies.CONFIG:
                # a configuration check's FAIL is the fix-config class (docs/verdicts.md), said as such
                result.details.setdefault(verdicts.ACTION_KEY, verdicts.FIX_CONFIG)
    run["policy"] = {"source": (options.policy or policies.Policy()).source,
                     "drains": [d.check_id for d in applied.drains()],
                     "reported": [d.check_id for d in applied.reported()]}
    if applied.recovering:
        run["policy"]["recovering"] = applied.recovering
    if options.state_dir:
        problem = saved.save(options.state_dir, state)
        if problem:
            rows.append(_state_row(problem))
    run.update(duration_s=round(time.perf_counter() - start, 4), check_timings_s=timings, root=node.root,
               benchmarks=False, gpu_uuids=node.memo.get(nvml_facts.MEMO_UUIDS) or {},
               command="tunefleet " + " ".join(sys.argv[1:]))
    return results + rows, run, applied


def _cursor_ahead(node: Node, cursor: Optional[float]) -> str:
    """Why the saved kernel-log cursor cannot be of this boot ('' when it can, or when the uptime is unknown)."""
    if cursor is None:
        return ""
    text = node.read("/proc/uptime") or ""
    try:
        uptime = float(text.split()[0])
    except (IndexError, ValueError):
        return ""
    if not 0 <= uptime < 1e12 or cursor <= uptime + 1.0:
        return ""
    return f"the saved cursor ({cursor:.0f} s since boot) is past this boot's uptime ({uptime:.0f} s): read from boot"


def _unusable_stamp(node: Node, counters_at: Optional[float], now: float) -> str:
    """Why the saved counters' time gives no interval ('' when it does): none, after now, or before this boot
    (the boot's time from /proc/stat's btime; unknown, a year before now stands for it)."""
    if counters_at is None:
        return "the saved counters carry no time"
    if counters_at > now:
        return f"the saved counters are dated {counters_at - now:.0f} s after now"
    boot = None
    for line in (node.read("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            with contextlib.suppress(ValueError):
                boot = float(line.split()[1])
    floor = boot if boot is not None and 0 < boot <= now else now - 366 * 86400.0
    if counters_at < floor:
        return ("the saved counters are dated before this boot" if boot is not None else
                "the saved counters are dated more than a year ago")
    return ""


def facts_of(node: Node) -> dict:
    host = (node.read_value("/proc/sys/kernel/hostname") if not node.is_live else None) or os.uname().nodename
    inventory = node.memo.get("gpus")
    return {"host": host.split(".")[0], "root": node.root, "kernel": node.read_value("/proc/sys/kernel/osrelease"),
            "gpus": inventory.to_dict() if inventory is not None else None}


def drain_text(decision: policies.Decision, results: list) -> str:
    """'<action class>: <check>: <reason> (policy <rule>)', the reason cut so the policy rule stays within the
    scheduler's reason (verify.history.drain.reason_text: 'tunefleet: ' + this, REASON_LIMIT)."""
    row = next(r for r in results if r.check_id == decision.check_id and r.status.value == decision.status)
    action = verdicts.action_of(row.details)
    head = f"{action + ': ' if action else ''}{row.check_id}: "
    tail = f" (policy {decision.rule.name})"
    room = REASON_LIMIT - len(SLURM_REASON_PREFIX) - 1 - len(head) - len(tail)
    reason = " ".join(row.reason.split())
    if len(reason) > room:
        reason = reason[: max(room - 3, 0)] + "..."
    return head + reason + tail


def chosen_drain(applied: policies.Applied, results: list) -> Optional[policies.Decision]:
    """The drain that names the node's reason: the most disruptive action class, then the report's order."""
    drains = applied.drains()
    if not drains:
        return None
    rank = {action: n for n, action in enumerate(verdicts.ACTIONS)}
    order = {r.check_id: n for n, r in enumerate(sort_for_people(results))}

    def weight(d: policies.Decision) -> tuple:
        row = next(r for r in results if r.check_id == d.check_id)
        return (-rank.get(verdicts.action_of(row.details), -1), order.get(d.check_id, 0))

    return min(drains, key=weight)


def summary(results: list, applied: Optional[policies.Applied] = None, limit: Optional[int] = None) -> str:
    """'FAIL <class>: <check>: <reason> (policy <rule>)' of what drains; else the worst finding with what the
    policy does about it, or 'OK (n checks)'; one printable line."""
    applied = applied or policies.apply(policies.Policy(), results, {}, 0.0, False)
    drain = chosen_drain(applied, results)
    if drain:
        text = f"FAIL {drain_text(drain, results)}"
    else:
        worst = sort_for_people(r for r in results if r.status in (Status.FAIL, Status.ERROR, Status.WARN))
        text = f"{worst[0].status.value} {worst[0].check_id}: {worst[0].reason}" if worst else \
            f"OK ({len(results)} checks)"
        decided = {d.check_id: d for d in applied.decisions}
        if worst and worst[0].check_id in decided and worst[0].status is Status.FAIL:
            d = decided[worst[0].check_id]
            text = f"{text} (not draining: policy {d.rule.name}{', ' + d.note if d.note else ''})"
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def act_on(results: list, applied: policies.Applied, options: Options, scheduler_node: Node, name: str) -> list:
    """Drain what the policy drains (under the cap), resume a tunefleet drain on a run with nothing to drain,
    nothing could-not-check and no check inside its recovery window; nothing on ERROR: rows."""
    if options.mode == "npd" or not options.drain:
        return []
    drain = chosen_drain(applied, results)
    statuses = {r.status for r in results}
    if drain:
        allowed, row = cap_allows(scheduler_node, name, options.cap, options.scheduler)
        if not allowed:
            return [row]
        return [act(scheduler_node, "drain", name, options.scheduler, drain_text(drain, results),
                    options.dry_run).to_result()]
    if options.mode == "health" and Status.ERROR not in statuses and not applied.recovering:
        return [act(scheduler_node, "resume", name, options.scheduler, dry_run=options.dry_run).to_result()]
    return []


def run_mode(spec: dict, node: Node, options: Options, scheduler_node: Optional[Node] = None,
             now: Optional[float] = None) -> Outcome:
    results, run, applied = judge(spec, node, options, now)
    facts = facts_of(node)
    name = options.node_name or facts["host"]
    actions = act_on(results, applied, options, scheduler_node or Node(), name)
    report = build_report(spec, facts, results + actions, run)
    outcome = Outcome(report, results, actions, applied=applied)
    judged = results  # the node's verdict: a scheduler command that failed is said, it is not the node's fault
    statuses = {r.status for r in judged}
    drains = bool(applied.drains())
    if options.mode == "npd":
        # a permanent condition only for what drains; with --npd-events, an event for what is reported
        problem = bool(applied.reported()) if options.npd_events else drains
        outcome.code = NPD_PROBLEM if problem else NPD_UNKNOWN if Status.ERROR in statuses else NPD_OK
        outcome.line = summary(judged, applied, options.output_limit)
    elif options.mode in contract.JOB_MODES:
        outcome.code = 1 if drains else 0
        outcome.line = summary(judged, applied)
    else:
        outcome.code = 1 if drains else exit_code([r for r in judged + actions if r.status is not Status.FAIL])
        outcome.line = summary(judged, applied)
    return outcome
