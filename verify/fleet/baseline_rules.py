"""The operator's rules for judging nodes against the fleet baseline (`--rules FILE`, YAML or JSON).

    rules:
      - match: "bench.gpu_matmul.*"     # glob on check_id
        below_baseline_pct: 10          # more than 10 % worse than the profile's baseline median
        severity: FAIL                  # FAIL (default) or WARN
      - match: "bench.gpu_hbm.*"
        floor: 3000                     # absolute: below it (`ceiling`: above it, for latencies)
      - match: "bench.gpu_copy*"
        spread_pct: 15                  # within one node: max/min of the matched GPUs or pairs

Each rule names exactly one kind. Every metric is judged by every rule that matches it; the most severe
finding per host and metric is kept. The whole file is checked at load, before any report is written:
an unknown key, a missing glob, a value that is not a finite non-negative number is refused naming
the rule and the key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from verify.bounded_load import BoundedLoadError, load_json_bounded, load_yaml_bounded

KINDS = ("floor", "ceiling", "below_baseline_pct", "spread_pct")
SEVERITIES = ("FAIL", "WARN")
MAX_RULES_BYTES = 1 << 20  # a rules file is a few dozen lines
RULE_KEYS = frozenset(KINDS) | {"match", "severity"}


class RulesError(ValueError):
    """The rules file cannot be used; the message names the file, the rule and the key."""


@dataclass(frozen=True)
class Rule:
    match: str
    kind: str
    limit: float
    severity: str = "FAIL"

    def describe(self) -> str:
        words = {"floor": f"floor {self.limit:g}", "ceiling": f"ceiling {self.limit:g}",
                 "below_baseline_pct": f"at most {self.limit:g}% below the baseline",
                 "spread_pct": f"GPUs/pairs of one node within {self.limit:g}%"}
        return f"rule {self.match}: {words[self.kind]}"

    def to_dict(self) -> dict:
        return {"match": self.match, self.kind: self.limit, "severity": self.severity}


# Without a rules file: worse than the profile's baseline median by 10 % fails, by 5 % warns (the
# history's regression limit is 10 %; healthy identical GPUs agreed within 0.5 % on BF16, issue 19).
DEFAULT_RULES = (Rule("*", "below_baseline_pct", 10.0, "FAIL"), Rule("*", "below_baseline_pct", 5.0, "WARN"))


def load_rules(path: str) -> tuple:
    """The rules of a YAML (or JSON) file, validated whole; RulesError naming the problem otherwise."""
    origin = f"rules {path}"
    try:
        if path.endswith(".json"):
            data = load_json_bounded(path, max_bytes=MAX_RULES_BYTES, what="rules")
        else:
            data = load_yaml_bounded(path, max_bytes=MAX_RULES_BYTES, what="rules")
    except BoundedLoadError as exc:
        raise RulesError(str(exc)) from None
    return parse_rules(data, origin)


def parse_rules(data: Any, origin: str) -> tuple:
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise RulesError(f"{origin}: must be a mapping with a 'rules' list")
    extra = sorted(str(k) for k in data if k not in ("rules", "schema"))
    if extra:
        raise RulesError(f"{origin}: unknown top-level key(s) {', '.join(extra)}; only 'rules' (and 'schema')")
    if not data["rules"]:
        raise RulesError(f"{origin}: 'rules' is empty: name at least one rule, or leave --rules out for the defaults")
    return tuple(_rule(item, f"{origin}: rules[{index}]") for index, item in enumerate(data["rules"]))


def _rule(item: Any, where: str) -> Rule:
    if not isinstance(item, dict):
        raise RulesError(f"{where}: must be a mapping, got {type(item).__name__}")
    unknown = sorted(str(k) for k in item if k not in RULE_KEYS)
    if unknown:
        raise RulesError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: match, severity, {', '.join(KINDS)}")
    match = item.get("match")
    if not isinstance(match, str) or not match.strip():
        raise RulesError(f"{where}.match: a glob on check_id is required (e.g. 'bench.gpu_matmul.*'), got {match!r}")
    kinds = [k for k in KINDS if k in item]
    if len(kinds) != 1:
        raise RulesError(f"{where} ({match}): name exactly one of {', '.join(KINDS)}; got "
                         f"{', '.join(kinds) or 'none'}")
    kind = kinds[0]
    limit = _limit(item[kind], f"{where}.{kind} ({match})")
    if kind == "below_baseline_pct" and limit >= 100:
        raise RulesError(f"{where}.{kind} ({match}): {item[kind]!r} must be below 100 (a percentage of the baseline)")
    severity = item.get("severity", "FAIL")
    if not isinstance(severity, str) or severity.upper() not in SEVERITIES:
        raise RulesError(f"{where}.severity ({match}): {severity!r} is not one of {', '.join(SEVERITIES)}")
    return Rule(match.strip(), kind, limit, severity.upper())


def _limit(value: Any, where: str) -> float:
    # bool is an int to Python; YAML's `.nan`/`.inf` arrive as floats: all refused by name.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RulesError(f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except OverflowError:
        raise RulesError(f"{where}: {value!r} is too large") from None
    if not math.isfinite(number):
        raise RulesError(f"{where}: {value!r} is not a finite number")
    if number < 0:
        raise RulesError(f"{where}: {value!r} is negative")
    return number
