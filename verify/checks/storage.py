"""I/O scheduler and read_ahead_kb for every block device matching storage_device_patterns."""
from __future__ import annotations

import fnmatch

from verify.checks.common import bracketed_choice, result, role_disabled, section, skip
from verify.kernel_rules import parse_choices
from verify.node import Node
from verify.result import Status

ROLE = "storage"


def matched_devices(node: Node, patterns: list) -> list:
    return [d for d in node.listdir("/sys/block") if any(fnmatch.fnmatch(d, str(p)) for p in patterns)]


def judge_scheduler(device: str, expected: str, scheduler_text: str):
    check_id = f"storage.scheduler.{device}"
    active = bracketed_choice(scheduler_text)
    _, available = parse_choices(scheduler_text)
    if active == expected:
        return result(check_id, ROLE, Status.PASS, expected, active)
    reason = f"{device} uses {active}, the desired state says {expected}"
    if expected not in available:
        reason += f" (this kernel offers only {', '.join(available)})"
    return result(check_id, ROLE, Status.FAIL, expected, active, reason, "storage_scheduler",
                  {"available": available})


def judge_read_ahead(device: str, expected: int, observed: int):
    check_id = f"storage.read_ahead_kb.{device}"
    if observed == expected:
        return result(check_id, ROLE, Status.PASS, expected, observed)
    return result(check_id, ROLE, Status.FAIL, expected, observed,
                  f"{device} reads ahead {observed} KiB, the desired state says {expected}", "storage_read_ahead_kb")


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, "storage")
    if disabled:
        return [disabled]
    storage = section(spec, ROLE)
    patterns = storage.get("device_patterns") or []
    scheduler = storage.get("scheduler")
    read_ahead = storage.get("read_ahead_kb")
    devices = matched_devices(node, patterns)
    if not devices:
        return [skip("storage", ROLE, f"no block device matches storage_device_patterns {patterns}")]
    results = []
    for device in devices:
        queue = f"/sys/block/{device}/queue"
        if scheduler:
            text = node.read_value(f"{queue}/scheduler")
            if text is None:
                results.append(skip(f"storage.scheduler.{device}", ROLE, f"{queue}/scheduler is absent", scheduler))
            else:
                results.append(judge_scheduler(device, str(scheduler), text))
        if read_ahead is not None:
            observed = node.read_int(f"{queue}/read_ahead_kb")
            if observed is None:
                results.append(skip(f"storage.read_ahead_kb.{device}", ROLE, f"{queue}/read_ahead_kb is absent"))
            else:
                results.append(judge_read_ahead(device, int(read_ahead), observed))
    return results or [skip("storage", ROLE, "storage_scheduler and storage_read_ahead_kb are unset")]
