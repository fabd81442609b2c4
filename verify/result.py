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


# Exit codes of every tunefleet command, one home (README "Exit codes", `tunefleet --help`).
EXIT_OK = 0  # nothing failed
EXIT_FAILED = 1  # a check or benchmark FAILed: the node is wrong
EXIT_BAD_INPUT = 2  # bad command line, file or inventory: nothing was checked (argparse uses 2 too)
EXIT_COULD_NOT_CHECK = 3  # nothing failed, but something could not be checked (ERROR, unreachable host)
# tunefleet itself stopped on an error it did not foresee (a bug, or damaged input no reader refused): no
# verdict. sysexits.h's EX_SOFTWARE ("internal software error"); never 1, so a scheduler hook never
# drains a node for tunefleet's own fault (deploy/slurm maps it to "could not check", NPD to Unknown).
EXIT_INTERNAL_ERROR = 70
EXIT_CODES_HELP = (
    "exit codes: 0 nothing failed; 1 a check failed; 2 bad input (nothing was checked); "
    "3 nothing failed but something could not be checked; 70 tunefleet itself failed (no verdict; one line "
    "names the error and the inputs); 128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM)"
)


def exit_code(results: Iterable[CheckResult]) -> int:
    """EXIT_FAILED when anything FAILed, else EXIT_COULD_NOT_CHECK when anything was ERROR, else EXIT_OK."""
    statuses = {r.status for r in results}
    if Status.FAIL in statuses:
        return EXIT_FAILED
    if Status.ERROR in statuses:
        return EXIT_COULD_NOT_CHECK
    return EXIT_OK


def sort_for_people(results: Iterable[CheckResult]) -> list:
    return sorted(results, key=lambda r: (STATUS_ORDER[r.status], r.check_id))


def counts(results: Iterable[CheckResult]) -> dict:
    tally = {s.value: 0 for s in Status}
    for r in results:
        tally[r.status.value] += 1
    return tally
