"""The one result type every check and benchmark returns."""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable


class Status(str, enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"
    ERROR = "ERROR"


# Failures first when results are listed for a person.
STATUS_ORDER = {Status.FAIL: 0, Status.ERROR: 1, Status.WARN: 2, Status.SKIP: 3, Status.PASS: 4}


@dataclass
class CheckResult:
    check_id: str
    role: str
    status: Status
    expected: Any = None
    observed: Any = None
    reason: str = ""
    remediation: str = ""
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict) -> CheckResult:
        return cls(
            check_id=str(data["check_id"]),
            role=str(data.get("role", "")),
            status=Status(data["status"]),
            expected=data.get("expected"),
            observed=data.get("observed"),
            reason=str(data.get("reason", "")),
            remediation=str(data.get("remediation", "")),
            details=dict(data.get("details") or {}),
        )


def exit_code(results: Iterable[CheckResult]) -> int:
    """0 all good, 1 something failed, 2 something could not be checked at all."""
    statuses = {r.status for r in results}
    if Status.FAIL in statuses:
        return 1
    if Status.ERROR in statuses:
        return 2
    return 0


def sort_for_people(results: Iterable[CheckResult]) -> list:
    return sorted(results, key=lambda r: (STATUS_ORDER[r.status], r.check_id))


def counts(results: Iterable[CheckResult]) -> dict:
    tally = {s.value: 0 for s in Status}
    for r in results:
        tally[r.status.value] += 1
    return tally
