"""Declarative schemas for JSON that enters verify from outside its process: an engine's result line, a report
or a side file another run wrote. A schema is a dict of field -> what it holds; `schema_problems` names every
difference by field, `checked_payload` keeps the well-formed rows of a top-level list and refuses the rest.
A foundation (no I/O, no verify import): engines (verify.engine), report readers and the scheduler share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The one check at the boundary where an engine's JSON enters verify: each engine module declares
# PAYLOAD_SCHEMA, a dict of field -> what it holds: a type or a tuple of types (NUMBER is int or
# float, never bool), a nested schema (a dict), ListOf(item) for a list of items, Maybe(spec) for a
# field that may be absent or null. Judges then read fields without meeting KeyError or TypeError.
NUMBER = (int, float)


@dataclass(frozen=True)
class ListOf:
    item: Any
    may_be_empty: bool = False


@dataclass(frozen=True)
class Maybe:
    spec: Any


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}")


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def schema_problems(value: Any, spec: Any, where: str = "") -> list:
    """Every way `value` differs from `spec`, each naming the field: ["rows[2].busbw_gbps: missing"]."""
    here = where or "the payload"
    if isinstance(spec, Maybe):
        return [] if value is None else schema_problems(value, spec.spec, where)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return [f"{here}: expected an object, got {_kind(value)}"]
        found = []
        for name, inner in spec.items():
            if name in value:
                found += schema_problems(value[name], inner, _join(where, name))
            elif not isinstance(inner, Maybe):
                found.append(f"{_join(where, name)}: missing")
        return found
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            return [f"{here}: expected a list, got {_kind(value)}"]
        if not value and not spec.may_be_empty:
            return [f"{here}: empty list"]
        found = []
        for index, item in enumerate(value):
            found += schema_problems(item, spec.item, f"{where}[{index}]")
        return found
    types = spec if isinstance(spec, tuple) else (spec,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        return [f"{here}: expected {' or '.join(t.__name__ for t in types)}, got {_kind(value)}"]
    return []


def checked_payload(payload: Any, schema: dict) -> tuple:
    """(payload fit to judge or None, problems) at the boundary where an engine's result enters.

    A list of objects at the top level (rows, gpus) keeps its well-formed items, so they are still
    judged: only the malformed ones are dropped, each named in the problems. Any other field that
    is missing or of the wrong type leaves nothing safe to judge (None).
    """
    if not isinstance(payload, dict):
        return None, schema_problems(payload, schema)
    kept, problems, fatal = dict(payload), [], False
    for name, spec in schema.items():
        rows = spec.spec if isinstance(spec, Maybe) and isinstance(payload.get(name), list) else spec
        if isinstance(rows, ListOf) and isinstance(rows.item, dict) and isinstance(payload.get(name), list):
            good = []
            for index, item in enumerate(payload[name]):
                wrong = schema_problems(item, rows.item, f"{name}[{index}]")
                problems += wrong
                if not wrong:
                    good.append(item)
            kept[name] = good
            if not payload[name] and not rows.may_be_empty:
                problems.append(f"{name}: empty list")
                fatal = True
            elif not good and payload[name]:
                fatal = True
            continue
        wrong = schema_problems(payload.get(name), spec, name) if name in payload else (
            [] if isinstance(spec, Maybe) else [f"{name}: missing"])
        problems += wrong
        fatal = fatal or bool(wrong)
    return (None if fatal else kept), problems
