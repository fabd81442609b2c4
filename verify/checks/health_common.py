"""What the hardware health checks share: gates, the expected hardware from the profile, thresholds,
PCI address forms and the remediations a fleet operator acts on.

Health is judged whatever the roles' switches say (a tuned node can still be bad hardware), so
these checks never SKIP on `<role>_enabled: false`; they SKIP when there is nothing to read.
"""
from __future__ import annotations

from typing import Optional

from verify.facts.gpu_query import query_gpus
from verify.judging.thresholds import Threshold
from verify.node import Node
from verify.profiles import ProfileError, load_profile, pick_profile, resolve_threshold

ROLE = "health"
# node.memo key: the last run's counters per check id (the history's, or the scheduler state's), so the
# checks judge the increase since then (verify.history.record.counters_of keeps them).
PREVIOUS_COUNTERS = "previous_counters"
# What the operator does next, from least to most disruptive.
RESET_GPU = "drain the GPU's jobs and reset it (nvidia-smi -r -i {index}); if it recurs, drain the node and RMA the GPU"
DRAIN_RMA = "drain the node and open an RMA for the GPU (hardware fault)"
REBOOT = "drain the node and reboot it (the fix is applied at the next driver load); RMA if it recurs"
RESEAT = "drain the node, reseat the card / riser / cable of {what}, check the slot in the BIOS; RMA if it stays"
CHECK_COOLING = "check the GPU's cooling and power feed (fans, airflow, PSU, BMC power brake events)"


def profile(spec: dict, node: Node) -> Optional[dict]:
    """The hardware profile the desired state names (`verify_profile`), `auto` resolved from the
    node's GPUs; None when none is named or none matches. Memoised for the run."""
    if "health_profile" in node.memo:
        return node.memo["health_profile"]
    name = (spec.get("verify") or {}).get("profile")
    chosen = None
    try:
        if name == "auto":
            chosen = pick_profile({"gpus": query_gpus(node).to_dict()})
        elif name:
            chosen = load_profile(str(name))
    except ProfileError:
        chosen = None  # the CLI refuses a bad --profile before checks run; here it is just absent
    node.memo["health_profile"] = chosen
    return chosen


def threshold(key: str, spec: dict, node: Node, derived: Optional[Threshold]) -> Optional[Threshold]:
    return resolve_threshold(key, profile(spec, node), spec, derived)
