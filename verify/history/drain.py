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

import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

from verify.bounded_load import loads_json_bounded
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


def scheduler_env() -> dict:
    """What scontrol/kubectl keep of our environment beyond the runner's allow-list: the cluster they talk to
    (SLURM_CONF, as slurmd gives its hooks in a configless cluster; KUBECONFIG)."""
    import os

    return {name: os.environ[name] for name in ("SLURM_CONF", "KUBECONFIG") if os.environ.get(name)}


def _run(node, argv: list) -> str:
    out = node.run(argv, timeout_s=TIMEOUT_S, env=scheduler_env() or None)
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
    command = "kubectl get node -o json"
    data = _kubectl_json(text, command)
    if not isinstance(data, dict):
        raise SchedulerError(f"{command}: not a node object")
    meta = _field(data, "metadata", dict, command)
    taints = _field(_field(data, "spec", dict, command), "taints", list, f"{command}.spec")
    labels = _field(meta, "labels", dict, f"{command}.metadata")
    annotations = _field(meta, "annotations", dict, f"{command}.metadata")
    ours = any(isinstance(t, dict) and t.get("key") == K8S_KEY and t.get("effect") == "NoSchedule" for t in taints)
    label, reason = labels.get(K8S_KEY), annotations.get(K8S_REASON_ANNOTATION, "")
    return (label if isinstance(label, str) else None), ours, (reason if isinstance(reason, str) else "")


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


# ---- the drain guard -----------------------------------------------------------------------------
# One bad rule (a threshold typo, a driver update that changes a reading) must not drain half a cluster:
# no run drains more than a cap of the fleet's hosts (NVSentinel caps drains at a share of the fleet by
# default). The cap is "N%" of the hosts or a count "N"; at least one host may always be drained unless
# the cap is "0". Per-node runs (tunefleet check --mode health) count the nodes tunefleet has already
# drained in the scheduler; a fleet run (plan) counts the hosts it is about to drain.

DEFAULT_CAP = "10%"
# ASCII digits, bounded before float(): "9" x 400 became inf and int(inf) raised OverflowError
_CAP = re.compile(r"^\s*([0-9]{1,9}(?:\.[0-9]{1,6})?)\s*(%?)\s*$")


def parse_cap(text: str) -> tuple:
    """'10%' -> ('share', 10.0), '3' -> ('count', 3); ValueError naming the text."""
    match = _CAP.match(str(text)) if len(str(text)) <= 40 else None
    if not match:
        raise ValueError(f"drain cap {str(text)[:40]!r}: give a share of the hosts ('10%') or a count ('3')")
    number = float(match.group(1))
    if match.group(2):
        if number > 100:
            raise ValueError(f"drain cap {text!r}: a share is at most 100%")
        return "share", number
    if number != int(number):
        raise ValueError(f"drain cap {text!r}: a count is a whole number")
    return "count", int(number)


def cap_count(cap: str, total_hosts: int) -> int:
    """How many of total_hosts one run may have drained: the share rounded down, at least 1 (unless 0)."""
    kind, number = parse_cap(cap)
    if kind == "count":
        return int(number)
    if number == 0:
        return 0
    return max(1, int(total_hosts * number / 100.0))


@dataclass
class DrainPlan:
    drain: list  # (host, failure) to drain, in the order given
    held: list  # hosts not drained: the cap was reached
    limit: int
    total_hosts: int
    cap: str

    def held_row(self) -> Optional[CheckResult]:
        """The 'drain cap reached' row naming every host not drained; None when none was held back."""
        if not self.held:
            return None
        return CheckResult(
            "scheduler.drain_cap", ROLE, Status.WARN, f"at most {self.limit} of {self.total_hosts} hosts drained "
            f"(cap {self.cap})", self.held,
            f"drain cap reached: {self.limit} of {self.total_hosts} hosts (cap {self.cap}) already drained or "
            f"draining; not drained: {', '.join(self.held)}",
            "look at the failures first: so many at once is more often a bad rule or a fleet-wide change than "
            "bad hardware; drain them by hand, or raise the cap (--drain-cap)",
            {"not_drained": list(self.held), "limit": self.limit, "total_hosts": self.total_hosts, "cap": self.cap})


def plan(failing: list, total_hosts: int, cap: str = DEFAULT_CAP, already_drained: int = 0) -> DrainPlan:
    """Which failing (host, failure) pairs one run may drain: at most cap_count(cap, total_hosts) in all,
    counting `already_drained` (nodes tunefleet drained before) first. Worst first is the caller's order."""
    limit = cap_count(cap, total_hosts)
    room = max(0, limit - already_drained)
    return DrainPlan(list(failing[:room]), [host for host, _ in failing[room:]], limit, total_hosts, cap)


def drained_by_us(node, scheduler: str = "auto") -> tuple:
    """(hosts in the cluster, names tunefleet has drained) from the scheduler; SchedulerError when it cannot
    be asked. Slurm: `scontrol -o show nodes`; Kubernetes: `kubectl get nodes -o json` (our taint)."""
    found = scheduler if scheduler != "auto" else detect(node, "the cluster")
    if found == "slurm":
        lines = [line for line in _run(node, ["scontrol", "-o", "show", "nodes"]).splitlines() if line.strip()]
        ours = []
        for line in lines:
            flags, reason = slurm_state(line)
            name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
            if name and flags & {"DRAIN", "DRAINED", "DRAINING"} and reason.startswith(SLURM_REASON_PREFIX):
                ours.append(name.group(1))
        return len(lines), ours
    data = _kubectl_json(_run(node, ["kubectl", "get", "nodes", "-o", "json"]), "kubectl get nodes -o json")
    items = _field(data, "items", list, "kubectl get nodes -o json")
    ours = []
    for index, item in enumerate(items):
        where = f"kubectl get nodes -o json: items[{index}]"
        if not isinstance(item, dict):
            raise SchedulerError(f"{where}: not a node object")
        name = _field(_field(item, "metadata", dict, where), "name", str, f"{where}.metadata")
        taints = _field(_field(item, "spec", dict, where), "taints", list, f"{where}.spec")
        if any(isinstance(t, dict) and t.get("key") == K8S_KEY for t in taints):
            ours.append(name)
    return len(items), ours


def _kubectl_json(text: str, command: str):
    """kubectl's JSON, bounded (verify.bounded_load): too deep, NaN or not JSON is a SchedulerError by name."""
    try:
        return loads_json_bounded(text, command)
    except ValueError as exc:  # BoundedLoadError
        raise SchedulerError(f"{command}: not a node list ({exc})") from None


def _field(data, name: str, kind: type, where: str):
    """data[name] when it is of `kind` (an absent or null one as empty); SchedulerError naming it otherwise."""
    value = data.get(name) if isinstance(data, dict) else None
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise SchedulerError(f"{where}.{name}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def cap_allows(node, node_name: str, cap: str = DEFAULT_CAP, scheduler: str = "auto") -> tuple:
    """(may this node be drained now, the 'drain cap reached' row or None), for a run on one node: the
    nodes tunefleet already drained in the cluster count against the cap. A scheduler that cannot be asked
    does not hold the drain back: the drain itself then says what is wrong."""
    try:
        total, ours = drained_by_us(node, scheduler)
    except SchedulerError:
        return True, None
    if node_name in ours:
        return True, None  # already ours: re-draining only refreshes the reason
    decided = plan([(node_name, "")], total, cap, already_drained=len(ours))
    if decided.drain:
        return True, None
    row = decided.held_row()
    row.details["drained_by_tunefleet"] = ours
    return False, row
