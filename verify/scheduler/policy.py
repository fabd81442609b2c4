"""The operator's policy: what a scheduler hook does about each finding (drain, warn, ignore), after how many
consecutive failing runs, and how long a flapping check must stay clean before its count is forgotten.

The verdict (status and action class, docs/verdicts.md) says what is wrong; the policy says what the hook does
about it. One JSON file (`tunefleet check --policy FILE`, roles/scheduler_hooks' `scheduler_hooks_policy`):

    {"xids":    {"13": "ignore", "79": {"do": "warn"}},
     "checks":  {"health.ib": {"do": "drain", "after_runs": 3, "recovery_s": 900}},
     "actions": {"reset-gpu": "drain"},
     "faults":  {"config": "warn"}}

A rule is "drain" / "warn" / "ignore" or {"do": ..., "after_runs": N >= 1, "recovery_s": seconds >= 0}. The most
specific rule wins: the Xid code (health.gpu.xid rows, per code), the check id (exact, or the longest prefix
ending at a dot: "health.ib" covers "health.ib.mlx5_0/1"), the result's action class, its fault class
(`hardware`: a health check's finding; `config`: a fix-config finding or any configuration check's), then the
defaults (gpud's per-Xid thresholds and NVSentinel's observe-first are the models):
- a hardware FAIL (a drain action: reboot, drain-rma, or a GPU missing) drains at once;
- a configuration finding never drains from a hook (reported: report, metrics, the hook's log line);
- a WARN is reported.
A prolog or epilog drains only for a hardware fault, whatever the policy says about configuration: a job must
never be kept off a node for a setting. A bad file is refused naming the key and the value, and the hook then
applies the defaults (never a drain for the file itself).

Standard library only and light: the prolog parses it at every job start.
"""
from __future__ import annotations

import re
from typing import Optional

from verify.bounded_load import BoundedLoadError, loads_json_bounded
from verify.judging import verdicts
from verify.result import Status

DRAIN, WARN, IGNORE = "drain", "warn", "ignore"
DOES = (IGNORE, WARN, DRAIN)  # least to most disruptive
HARDWARE, CONFIG = "hardware", "config"
FAULTS = (HARDWARE, CONFIG)
SECTIONS = ("xids", "checks", "actions", "faults")
RULE_KEYS = ("do", "after_runs", "recovery_s")
MAX_BYTES = 64 * 1024
MAX_RUNS = 1000  # a count beyond this is a typo, not a policy (the hooks run every few minutes)
MAX_RECOVERY_S = 30 * 86400.0
MAX_XID = 1 << 16
_CHECK_KEY = re.compile(r"[a-z0-9_][a-z0-9_.:/-]{0,199}")
# The hooks judge these: anything else is ignored by the policy (PASS, SKIP) or could not be judged (ERROR).
FINDINGS = (Status.FAIL, Status.WARN)


class PolicyError(ValueError):
    """A policy file refused; the message names the file, the key and the value."""


# Plain classes, not dataclasses: a dataclass is built with exec() at import, ~0.5 ms each at every prolog start.
class Rule:
    __slots__ = ("do", "after_runs", "recovery_s", "name")

    def __init__(self, do: str, after_runs: int = 1, recovery_s: float = 0.0, name: str = "") -> None:
        self.do, self.after_runs, self.recovery_s = do, after_runs, recovery_s
        self.name = name  # where it came from: "xids.79", "checks.health.ib", "default.hardware"

    def _key(self) -> tuple:
        return self.do, self.after_runs, self.recovery_s, self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rule) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "Rule(do={!r}, after_runs={!r}, recovery_s={!r}, name={!r})".format(*self._key())


# The defaults (docs/verdicts.md, "The operator's policy"): their names are short, the drain reason carries them.
DEFAULT_HARDWARE = Rule(DRAIN, name="default.hardware")  # a hardware FAIL (a drain action) drains at once
DEFAULT_CONFIG = Rule(WARN, name="default.config")  # a configuration finding never drains from a hook
DEFAULT_WARN = Rule(WARN, name="default.warn")  # a warning is reported


class Policy:
    def __init__(self, source: str = "defaults") -> None:
        self.xids: dict = {}  # int -> Rule
        self.checks: dict = {}  # check id or dotted prefix -> Rule
        self.actions: dict = {}  # action class -> Rule
        self.faults: dict = {}  # HARDWARE / CONFIG -> Rule
        self.source = source


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _rule(value: object, where: str, origin: str) -> Rule:
    def refuse(key: str, bad: object, why: str) -> PolicyError:
        return PolicyError(f"policy {origin}: {key} = {_show(bad)}: {why}")

    if isinstance(value, str):
        value = {"do": value}
    if not isinstance(value, dict):
        raise refuse(where, value, 'a rule is "drain", "warn", "ignore" or {"do": ..., "after_runs": N, '
                                   '"recovery_s": S}')
    for key in value:
        if key not in RULE_KEYS:
            raise refuse(f"{where}.{key}", value[key], f"unknown key (known: {', '.join(RULE_KEYS)})")
    do = value.get("do")
    if do not in DOES:
        raise refuse(f"{where}.do", do, f"must be one of {', '.join(DOES)}")
    runs = value.get("after_runs", 1)
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise refuse(f"{where}.after_runs", runs, f"must be a whole number of runs from 1 to {MAX_RUNS}")
    recovery = value.get("recovery_s", 0)
    if isinstance(recovery, bool) or not isinstance(recovery, (int, float)) or \
            (isinstance(recovery, int) and not 0 <= recovery <= MAX_RECOVERY_S) or \
            not 0 <= float(recovery) <= MAX_RECOVERY_S:  # NaN fails both comparisons
        raise refuse(f"{where}.recovery_s", recovery, f"must be seconds from 0 to {MAX_RECOVERY_S:g}")
    return Rule(do, runs, float(recovery), where)


def parse(data: object, origin: str) -> Policy:
    """A policy document (parsed JSON) -> Policy; PolicyError naming the key and value otherwise."""
    if not isinstance(data, dict):
        raise PolicyError(f"policy {origin}: the top level is {type(data).__name__}, not an object of "
                          f"{', '.join(SECTIONS)}")
    policy = Policy(origin)
    for section, rules in data.items():
        if section not in SECTIONS:
            raise PolicyError(f"policy {origin}: {_show(section)}: unknown section (known: {', '.join(SECTIONS)})")
        if not isinstance(rules, dict):
            raise PolicyError(f"policy {origin}: {section} = {_show(rules)}: must be an object of rules")
        for key, value in rules.items():
            where = f"{section}.{key}"
            if section == "xids":
                if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 6
                        and 0 < int(key) < MAX_XID):  # len first: int() refuses 4,300 digits
                    raise PolicyError(f"policy {origin}: xids.{_show(key)}: an Xid code is a whole number "
                                      f"from 1 to {MAX_XID - 1}")
                policy.xids[int(key)] = _rule(value, f"xids.{int(key)}", origin)
            elif section == "checks":
                if not _CHECK_KEY.fullmatch(key) or key.endswith("."):
                    raise PolicyError(f"policy {origin}: checks.{_show(key)}: not a check id or a dotted prefix "
                                      "of one (e.g. health.ib, health.gpu.xid)")
                policy.checks[key] = _rule(value, where, origin)
            elif section == "actions":
                if key not in verdicts.ACTIONS:
                    raise PolicyError(f"policy {origin}: actions.{_show(key)}: unknown action class (known: "
                                      f"{', '.join(verdicts.ACTIONS)})")
                policy.actions[key] = _rule(value, where, origin)
            else:
                if key not in FAULTS:
                    raise PolicyError(f"policy {origin}: faults.{_show(key)}: unknown fault class (known: "
                                      f"{', '.join(FAULTS)})")
                policy.faults[key] = _rule(value, where, origin)
    return policy


def loads(text: str, origin: str) -> Policy:
    try:
        data = loads_json_bounded(text, f"policy {origin}", max_depth=4)
    except BoundedLoadError as exc:
        raise PolicyError(str(exc)) from None
    return parse(data, origin)


def load(path: str) -> Policy:
    """The policy file: root's (or ours) alone to change, a regular file, bounded (verify.safe_io); PolicyError
    naming what is wrong. A file others could write would let them decide that nothing ever drains."""
    from verify.safe_io import read_trusted_file

    try:
        text = read_trusted_file(path, MAX_BYTES)
    except OSError as exc:
        raise PolicyError(f"policy {path}: {exc.strerror or exc}") from None
    return loads(text, path)


# ---- applying it ---------------------------------------------------------------------------------


def fault_of(result) -> str:
    """HARDWARE for a health check's finding (the GPU, its memory, links, the fabric), CONFIG for a fix-config
    finding or any configuration check's (sysctl, limits, nvidia_peermem, ...)."""
    if verdicts.action_of(result.details) == verdicts.FIX_CONFIG or not result.check_id.startswith("health."):
        return CONFIG
    return HARDWARE


def _by_check(policy: Policy, check_id: str) -> Optional[Rule]:
    best = None
    for key, rule in policy.checks.items():
        if (check_id == key or check_id.startswith(key + ".")) and (best is None or len(key) > len(best[0])):
            best = (key, rule)
    return best[1] if best else None


def rule_for(policy: Policy, check_id: str, status: Status, action: Optional[str], fault: str,
             xid: Optional[int] = None) -> Rule:
    """The most specific rule for one finding: Xid, check id, action class, fault class, then the defaults."""
    chosen = (policy.xids.get(xid) if xid is not None else None) or _by_check(policy, check_id) or \
        (policy.actions.get(action) if action else None) or policy.faults.get(fault)
    if chosen:
        return chosen
    if status is Status.FAIL:
        return DEFAULT_HARDWARE if fault == HARDWARE else DEFAULT_CONFIG
    return DEFAULT_WARN


def _xid_codes(result) -> list:
    """(code, its action class, its status) of each Xid a health.gpu.xid row judged."""
    xids = result.details.get("xids") if result.check_id.startswith("health.gpu.xid.") else None
    found = []
    for key, entry in (xids or {}).items():
        if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 6 and isinstance(entry, dict):
            action = entry.get(verdicts.ACTION_KEY)
            action = action if action in verdicts.ACTIONS else None
            found.append((int(key), action, verdicts.status_of(action) if action else Status.WARN))
    return found


def rule_of_result(policy: Policy, result) -> Rule:
    """The rule for a finding; an Xid row takes the most disruptive of its codes' rules."""
    fault = fault_of(result)
    action = verdicts.action_of(result.details)
    codes = _xid_codes(result)
    if not codes:
        return rule_for(policy, result.check_id, result.status, action, fault)
    rules = [rule_for(policy, result.check_id, status, code_action, fault, code) for code, code_action, status in codes]
    if result.details.get("bus_lost"):  # "fallen off the bus" is its own fault, whatever the Xids' rules say
        rules.append(rule_for(policy, result.check_id, Status.FAIL, verdicts.DRAIN_RMA, fault))
    return max(rules, key=lambda r: (DOES.index(r.do), -r.after_runs))


class Decision:
    def __init__(self, check_id: str, status: str, fault: str, rule: Rule, do: str, runs: int,
                 note: str = "") -> None:
        self.check_id, self.status, self.fault, self.rule = check_id, status, fault, rule  # status: the verdict's
        self.do = do  # what the hook does now: drain, warn, ignore
        self.runs = runs  # consecutive failing runs, this one included
        self.note = note  # why `do` differs from the rule's

    def to_dict(self) -> dict:
        entry = {"do": self.do, "rule": self.rule.name, "fault": self.fault, "runs": self.runs}
        if self.rule.after_runs > 1:
            entry["after_runs"] = self.rule.after_runs
        if self.rule.recovery_s:
            entry["recovery_s"] = self.rule.recovery_s
        if self.note:
            entry["note"] = self.note
        return entry

    def line(self) -> str:
        """What the policy does, for --dry-run and the hook's log: 'health.ib.x FAIL -> drain (checks...)'."""
        return f"{self.check_id} {self.status} -> {self.do} ({self.rule.name}{'; ' + self.note if self.note else ''})"


class Applied:
    def __init__(self, decisions: list, runs: dict, recovering: list) -> None:
        self.decisions = decisions  # one per finding (FAIL / WARN)
        # the counts to keep, {check id: [consecutive failing runs, Unix time of the last failing run, the
        # recovery window of the rule that judged it (s)]}: verify.scheduler.state's policy_runs of this mode
        self.runs = runs
        self.recovering = recovering  # clean now but inside their recovery window: a drain is not lifted

    def drains(self) -> list:
        return [d for d in self.decisions if d.do == DRAIN]

    def reported(self) -> list:
        return [d for d in self.decisions if d.do == WARN]


def apply(policy: Policy, results: list, runs: dict, now: float, job_mode: bool) -> Applied:
    """Decide every finding of one run. runs: the counts the last run kept (Applied.runs); the answer's runs
    replace them. A check that could not run (ERROR) keeps its count; one that passes forgets it, unless the
    recovery window of its last failing run's rule is still open (a flapping link is not clean yet)."""
    decisions, kept, recovering = [], {}, []
    by_id: dict = {}
    for result in results:
        by_id.setdefault(result.check_id, []).append(result)
    for check_id, rows in by_id.items():
        before = runs.get(check_id)
        findings = [r for r in rows if r.status in FINDINGS]
        if not findings:
            if before and any(r.status is Status.ERROR for r in rows):
                kept[check_id] = before
            elif before and 0 <= now - before[1] < before[2]:
                kept[check_id] = before
                recovering.append(check_id)
            continue
        worst = min(findings, key=lambda r: (r.status is not Status.FAIL, r.check_id))
        rule = rule_of_result(policy, worst)
        count = (before[0] if before else 0) + 1
        kept[check_id] = [count, now, rule.recovery_s]
        fault = fault_of(worst)
        do, note = rule.do, ""
        if do == DRAIN and count < rule.after_runs:
            do, note = WARN, f"failing run {count} of {rule.after_runs} before it drains"
        if do == DRAIN and job_mode and fault == CONFIG:
            do, note = WARN, "a configuration finding never keeps a job off the node"
        decisions.append(Decision(check_id, worst.status.value, fault, rule, do, count, note))
    return Applied(decisions, kept, recovering)
