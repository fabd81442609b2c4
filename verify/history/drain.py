"""Acting on the verdict, opt-in: take a failing node out of the scheduler, put it back once it passes.

Why: a verdict nobody acts on leaves the bad node taking jobs. Slurm: `scontrol update
State=DRAIN Reason="tunefleet: <action class>: <first failure>"` (e.g. "tunefleet: reboot:
health.gpu.xid.0000:3b:00.0: GPU 3 ... Xid 79 ..."; the class from verify.judging.verdicts),
undone by `State=RESUME` only when the Reason still starts with "tunefleet:" (a drain an operator
set is never lifted). Kubernetes: a NoSchedule taint and a label under a key tunefleet owns
(tunefleet.io/verify), the reason as an annotation; resume removes those and nothing else (no
cordon: spec.unschedulable has no owner to check).

Everything runs through the Node's runner, so tests replay real scontrol/kubectl exchanges; with
dry_run the read-only query still runs and the changing commands are only listed.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

from verify.judging import verdicts
from verify.result import CheckResult, Status, sort_for_people

SLURM_REASON_PREFIX = "tunefleet:"
K8S_KEY = "tunefleet.io/verify"  # taint key and label key; the value is "failed"
K8S_VALUE = "failed"
K8S_REASON_ANNOTATION = "tunefleet.io/verify-reason"
REASON_LIMIT = 200
SCHEDULERS = ("auto", "slurm", "kubernetes")
ROLE = "scheduler"
TIMEOUT_S = 30.0
_STATE = re.compile(r"(?:^|\s)State=(\S+)")
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?:\s+\[[^\]]*@[^\]]*\])?\s*$")


class SchedulerError(RuntimeError):
    """The scheduler could not be asked or refused; the message names the command and its answer."""


@dataclass
class Action:
    verb: str  # "drain" or "resume"
    node_name: str
    scheduler: str = ""
    commands: list = field(default_factory=list)  # argv lists run (or, dry run, to be run)
    status: Status = Status.SKIP
    message: str = ""

    def to_result(self) -> CheckResult:
        where = f" in {self.scheduler}" if self.scheduler else ""
        return CheckResult(check_id=f"scheduler.{self.verb}", role=ROLE, status=self.status,
                           expected=f"{self.verb} {self.node_name}{where}",
                           observed=[shlex.join(c) for c in self.commands] or None, reason=self.message,
                           remediation="" if self.status in (Status.PASS, Status.SKIP) else
                           "check the scheduler command and its permissions; the node was left as it was")


def first_failure(results: list) -> Optional[str]:
    """'<action class>: <check>: <reason>' of the FAIL with the most disruptive action class (the first of
    them as a people-ordered report lists it; no class part for a check that judges none); None when nothing
    failed. Only a FAIL drains: a WARN (reset-gpu, application, watch) never does."""
    failures = [r for r in sort_for_people(results) if r.status == Status.FAIL]
    if not failures:
        return None
    rank = {action: n for n, action in enumerate(verdicts.ACTIONS)}
    chosen = max(failures, key=lambda r: rank.get(verdicts.action_of(r.details), -1))  # max keeps the first
    action = verdicts.action_of(chosen.details)
    return f"{action + ': ' if action else ''}{chosen.check_id}: {chosen.reason}"


def reason_text(failure: str) -> str:
    """One printable line the scheduler stores: 'tunefleet: <failure>' cut to REASON_LIMIT."""
    line = " ".join("".join(ch if ch.isprintable() else " " for ch in failure).split())
    text = f"{SLURM_REASON_PREFIX} {line}"
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 3] + "..."


def act(node, verb: str, node_name: str, scheduler: str = "auto", failure: str = "",
        dry_run: bool = False) -> Action:
    """Drain (verb "drain", failure = the first failure) or resume node_name; never raises."""
    action = Action(verb, node_name)
    try:
        found = scheduler if scheduler != "auto" else detect(node, node_name)
        action.scheduler = found
        planner = _slurm if found == "slurm" else _kubernetes
        planner(node, action, failure, dry_run)
    except SchedulerError as exc:
        action.status, action.message = Status.ERROR, str(exc)
    return action


def detect(node, node_name: str) -> str:
    """slurm when scontrol answers, else kubernetes when kubectl does."""
    for name, argv in (("slurm", ["scontrol", "--version"]), ("kubernetes", ["kubectl", "version", "--client"])):
        if not node.run(argv, timeout_s=TIMEOUT_S).missing:
            return name
    raise SchedulerError(f"--scheduler auto: neither scontrol nor kubectl is installed here to {node_name!r}")


def _run(node, argv: list) -> str:
    out = node.run(argv, timeout_s=TIMEOUT_S)
    if out.missing:
        raise SchedulerError(f"{argv[0]} is not installed: cannot run {shlex.join(argv)}")
    if out.timed_out:
        raise SchedulerError(f"{shlex.join(argv)} did not answer within {TIMEOUT_S:g} s")
    if out.returncode != 0:
        answer = " ".join((out.stderr or out.stdout).split())[:300] or "(no output)"
        raise SchedulerError(f"{shlex.join(argv)} failed (exit {out.returncode}): {answer}")
    return out.stdout


def _change(node, action: Action, argv: list, dry_run: bool) -> None:
    action.commands.append(argv)
    if not dry_run:
        _run(node, argv)


# ---- Slurm ---------------------------------------------------------------------------------------


def slurm_state(text: str) -> tuple:
    """(state flags, reason) from `scontrol -o show node NAME`: ({"IDLE", "DRAIN"}, "tunefleet: ...")."""
    state = _STATE.search(text)
    reason = _REASON.search(text.strip().splitlines()[0] if text.strip() else "")
    flags = set(state.group(1).upper().split("+")) if state else set()
    return flags, (reason.group(1).strip() if reason else "")


def _slurm(node, action: Action, failure: str, dry_run: bool) -> None:
    name = action.node_name
    flags, reason = slurm_state(_run(node, ["scontrol", "-o", "show", "node", name]))
    drained = bool(flags & {"DRAIN", "DRAINED", "DRAINING"})
    ours = reason.startswith(SLURM_REASON_PREFIX)
    would = "would run" if dry_run else "ran"
    if action.verb == "drain":
        if drained and not ours:
            action.message = f"{name} is already drained by someone else (Reason={reason!r}): left as it is"
            return
        text = reason_text(failure)
        _change(node, action, ["scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={text}"], dry_run)
        action.status = Status.SKIP if dry_run else Status.PASS
        action.message = f"dry run: {would} {shlex.join(action.commands[-1])}" if dry_run else \
            f"{name} drained in Slurm: {text}"
        return
    if not drained:
        action.message = f"{name} is not drained in Slurm: nothing to undo"
        return
    if not ours:
        action.message = f"{name} was drained by someone else (Reason={reason!r}): tunefleet leaves it drained"
        return
    _change(node, action, ["scontrol", "update", f"NodeName={name}", "State=RESUME"], dry_run)
    action.status = Status.SKIP if dry_run else Status.PASS
    action.message = f"dry run: {would} {shlex.join(action.commands[-1])}" if dry_run else \
        f"{name} resumed in Slurm (tunefleet had drained it: {reason})"


# ---- Kubernetes ----------------------------------------------------------------------------------


def k8s_state(text: str) -> tuple:
    """(our label value or None, our taint present, reason annotation) from `kubectl get node NAME -o json`."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SchedulerError(f"kubectl get node -o json: not JSON ({exc})") from exc
    meta = data.get("metadata") or {} if isinstance(data, dict) else {}
    taints = ((data.get("spec") or {}).get("taints") or []) if isinstance(data, dict) else []
    labels = meta.get("labels") or {}
    ours = any(isinstance(t, dict) and t.get("key") == K8S_KEY and t.get("effect") == "NoSchedule" for t in taints)
    return labels.get(K8S_KEY), ours, (meta.get("annotations") or {}).get(K8S_REASON_ANNOTATION, "")


def _kubernetes(node, action: Action, failure: str, dry_run: bool) -> None:
    name = action.node_name
    label, tainted, reason = k8s_state(_run(node, ["kubectl", "get", "node", name, "-o", "json"]))
    if action.verb == "drain":
        text = reason_text(failure)
        for argv in (["kubectl", "taint", "node", name, f"{K8S_KEY}={K8S_VALUE}:NoSchedule", "--overwrite"],
                     ["kubectl", "label", "node", name, f"{K8S_KEY}={K8S_VALUE}", "--overwrite"],
                     ["kubectl", "annotate", "node", name, f"{K8S_REASON_ANNOTATION}={text}", "--overwrite"]):
            _change(node, action, argv, dry_run)
        action.status = Status.SKIP if dry_run else Status.PASS
        action.message = ("dry run: would run " + "; ".join(shlex.join(c) for c in action.commands)) if dry_run else \
            f"{name} tainted {K8S_KEY}={K8S_VALUE}:NoSchedule in Kubernetes: {text}"
        return
    if label != K8S_VALUE and not tainted:
        action.message = f"{name} carries no tunefleet taint or label in Kubernetes: nothing to undo"
        return
    if tainted:
        _change(node, action, ["kubectl", "taint", "node", name, f"{K8S_KEY}:NoSchedule-"], dry_run)
    if label is not None:
        _change(node, action, ["kubectl", "label", "node", name, f"{K8S_KEY}-"], dry_run)
    if reason:
        _change(node, action, ["kubectl", "annotate", "node", name, f"{K8S_REASON_ANNOTATION}-"], dry_run)
    action.status = Status.SKIP if dry_run else Status.PASS
    action.message = ("dry run: would run " + "; ".join(shlex.join(c) for c in action.commands)) if dry_run else \
        f"{name}: tunefleet's taint and label removed in Kubernetes (other taints left as they are)"
