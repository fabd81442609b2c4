"""What every check shares: the role gate and result builders that name the fixing variable."""
from __future__ import annotations

from typing import Any, Optional

from verify.judging import verdicts
from verify.kernel_rules import parse_choices
from verify.result import CheckResult, Status

HEALTH_ROLE = "health"  # the hardware health checks (verify.checks.health_common.ROLE)


def remediation(role: str, variable: str) -> str:
    return f"role {role}: set {variable} and re-run playbooks/site.yml"


def result(
    check_id: str,
    role: str,
    status: Status,
    expected: Any = None,
    observed: Any = None,
    reason: str = "",
    variable: str = "",
    details: Optional[dict] = None,
    fix: str = "",
) -> CheckResult:
    """A result; FAIL and WARN carry the remediation (role + variable, or `fix` when no role variable
    can fix it), others need none."""
    if status not in (Status.FAIL, Status.WARN):
        fix = ""
    elif not fix and variable:
        fix = remediation(role, variable)
    details = details or {}
    if status is Status.FAIL and role != HEALTH_ROLE and verdicts.ACTION_KEY not in details:
        # a config check's FAIL is the node's configuration against the desired state: fix it (docs/verdicts.md);
        # a health FAIL names its own class (tests/unit/test_every_fail_has_an_action.py holds every check to it)
        details = dict(details, **{verdicts.ACTION_KEY: verdicts.FIX_CONFIG})
    return CheckResult(check_id, role, status, expected, observed, reason, fix, details)


def section(spec: dict, role: str) -> dict:
    value = spec.get(role)
    if not isinstance(value, dict):
        raise ValueError(f"desired state has no {role!r} section")
    return value


def role_disabled(spec: dict, role: str, check_id: str) -> Optional[CheckResult]:
    """A SKIP when the role is switched off: its knobs are not ours to judge."""
    if section(spec, role).get("enabled", True) is False:
        return CheckResult(check_id, role, Status.SKIP, reason=f"the {role} role is disabled ({role}_enabled: false)")
    return None


def skip(check_id: str, role: str, reason: str, expected: Any = None) -> CheckResult:
    return CheckResult(check_id, role, Status.SKIP, expected=expected, reason=reason)


def error(check_id: str, role: str, reason: str, expected: Any = None) -> CheckResult:
    return CheckResult(check_id, role, Status.ERROR, expected=expected, reason=reason)


def bracketed_choice(text: str) -> str:
    """The active entry of a sysfs choice list: 'none [mq-deadline] kyber' -> 'mq-deadline'."""
    active, _ = parse_choices(text)
    if active is None:
        raise ValueError(f"no [active] entry in {text.strip()[:60]!r}")
    return active
