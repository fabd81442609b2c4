"""Schema pieces for the files a report is built from and reads back (node reports, a pairwise run's
nccl-pairs/summary.json, the fleet run's side files): the declarative checks of verify.engine
(schema_problems, ListOf, Maybe) plus what a file read back needs beyond a type. A record that differs
from its schema is left out and named (a WARN), so the writers meet only checked data.
"""
from __future__ import annotations

from verify.bounded_load import finite_number
from verify.payload_schema import Maybe
from verify.result import Status


class _FiniteMeta(type):
    def __instancecheck__(cls, value) -> bool:
        return finite_number(value) is not None


class FiniteNumber(metaclass=_FiniteMeta):
    """A schema type: an int or float that is finite (JSON read back may hold NaN or a 400-digit integer)."""


FiniteNumber.__name__ = "a finite number"  # schema_problems names the type it expected by this


class _NullMeta(type):
    def __instancecheck__(cls, value) -> bool:
        return value is None


class Null(metaclass=_NullMeta):
    """A schema type: JSON null. (FiniteNumber, Null) is a field that must be present and may be null,
    where Maybe lets it be absent too: a writer that always writes the key is damaged without it."""


Null.__name__ = "null"
FIGURE_OR_NULL = (FiniteNumber, Null)


def filled(item: dict, schema: dict) -> dict:
    """A checked record with every key of its schema present (an absent optional one as None)."""
    return {**item, **{key: item.get(key) for key in schema}}


def split_problem(problem: str) -> tuple:
    """"cells[0].rails.eth1.busbw_gbps: missing" -> ("cells[0].rails.eth1.busbw_gbps", "missing")."""
    field, _, message = problem.partition(": ")
    return field, message


class _NameMeta(type):
    def __instancecheck__(cls, value) -> bool:
        return isinstance(value, str) and bool(value.strip())


class Name(metaclass=_NameMeta):
    """A schema type: text that is not empty (a check id, a host)."""


Name.__name__ = "a name (non-empty text)"
STATUS_NAMES = frozenset(s.value for s in Status)


class _StatusMeta(type):
    def __instancecheck__(cls, value) -> bool:
        return isinstance(value, str) and value in STATUS_NAMES


class StatusName(metaclass=_StatusMeta):
    """A schema type: one of the statuses a result carries."""


StatusName.__name__ = f"one of {', '.join(sorted(STATUS_NAMES))}"

# One result of a node report (CheckResult.to_dict) as every reader of a saved report checks it:
# what the writers read by name. expected/observed are any JSON (shown as text).
RESULT_SCHEMA = {"check_id": Name, "status": StatusName, "role": Maybe(str), "reason": Maybe(str),
                 "remediation": Maybe(str), "details": Maybe(dict)}
