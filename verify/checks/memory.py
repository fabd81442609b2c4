"""Huge pages (2 MiB total and per NUMA node, 1 GiB boot-time) and transparent huge pages.

A huge page count of 0 in the desired state means "not managed by the memory role" (SKIP).
"""
from __future__ import annotations

from verify.checks.common import bracketed_choice, result, role_disabled, section, skip
from verify.kernel_rules import AT_LEAST, direction_of
from verify.node import Node
from verify.result import Status

ROLE = "memory"
PAGES_2M = "hugepages-2048kB"
PAGES_1G = "hugepages-1048576kB"


def judge_count(check_id: str, variable: str, expected: int, observed: int, where: str, boot_time: bool = False,
                direction: str = AT_LEAST):
    """Fewer pages than asked FAIL; more PASS where the count is at_least (kernel_rules: the role
    keeps a larger pool), else WARN (memory_hugepages_exact: the role would have shrunk it)."""
    if observed == expected:
        return result(check_id, ROLE, Status.PASS, expected, observed)
    if observed > expected and direction == AT_LEAST:
        return result(check_id, ROLE, Status.PASS, expected, observed,
                      f"{where} has {observed} pages, more than the {expected} asked: kept (at_least)")
    if observed > expected:
        return result(check_id, ROLE, Status.WARN, expected, observed,
                      f"{where} has {observed} pages, more than the {expected} asked (memory held back; "
                      "memory_hugepages_exact is true)", variable)
    hint = " (1 GiB pages are reserved at boot: a reboot is pending?)" if boot_time else \
        " (memory too fragmented to reserve them all?)"
    return result(check_id, ROLE, Status.FAIL, expected, observed,
                  f"{where} has {observed} pages, fewer than the {expected} asked{hint}", variable)


def check_hugepages(memory: dict, node: Node) -> list:
    results = []
    per_node = memory.get("hugepages_2m_per_node") or {}
    total = int(memory.get("hugepages_2m") or 0)
    exact = ["memory.hugepages_2m"] if memory.get("hugepages_exact") is True else []
    direction_2m = direction_of("memory.hugepages_2m", exact)
    if per_node:
        for numa, count in sorted(per_node.items(), key=lambda kv: str(kv[0])):
            path = f"/sys/devices/system/node/node{numa}/hugepages/{PAGES_2M}/nr_hugepages"
            observed = node.read_int(path)
            check_id = f"memory.hugepages_2m.node{numa}"
            if observed is None:
                results.append(result(check_id, ROLE, Status.FAIL, int(count), None,
                                      f"NUMA node {numa} does not exist on this machine",
                                      "memory_hugepages_2m_per_node"))
            else:
                results.append(judge_count(check_id, "memory_hugepages_2m_per_node", int(count), observed,
                                           f"NUMA node {numa}", direction=direction_2m))
    if total:
        observed = node.read_int(f"/sys/kernel/mm/hugepages/{PAGES_2M}/nr_hugepages")
        if observed is None:
            results.append(skip("memory.hugepages_2m", ROLE, "this kernel has no 2 MiB huge pages", total))
        else:
            results.append(judge_count("memory.hugepages_2m", "memory_hugepages_2m", total, observed, "the node",
                                       direction=direction_2m))
    if not per_node and not total:
        results.append(skip("memory.hugepages_2m", ROLE, "memory_hugepages_2m is 0: not managed"))
    gigantic = int(memory.get("hugepages_1g") or 0)
    if gigantic:
        observed = node.read_int(f"/sys/kernel/mm/hugepages/{PAGES_1G}/nr_hugepages")
        if observed is None:
            results.append(result("memory.hugepages_1g", ROLE, Status.FAIL, gigantic, None,
                                  "this CPU/kernel offers no 1 GiB huge pages", "memory_hugepages_1g"))
        else:
            results.append(judge_count("memory.hugepages_1g", "memory_hugepages_1g", gigantic, observed, "the node",
                                       boot_time=True, direction=direction_of("memory.hugepages_1g")))
    return results


def check_thp(memory: dict, node: Node) -> list:
    results = []
    for knob in ("enabled", "defrag"):
        expected = memory.get(f"thp_{knob}")
        check_id = f"memory.thp_{knob}"
        if not expected:
            results.append(skip(check_id, ROLE, f"memory_thp_{knob} is not set"))
            continue
        text = node.read_value(f"/sys/kernel/mm/transparent_hugepage/{knob}")
        if text is None:
            results.append(skip(check_id, ROLE, "this kernel has no transparent huge pages", expected))
            continue
        active = bracketed_choice(text)
        status = Status.PASS if active == expected else Status.FAIL
        reason = "" if status is Status.PASS else f"THP {knob} is {active}, the desired state says {expected}"
        results.append(result(check_id, ROLE, status, expected, active, reason, f"memory_thp_{knob}"))
    return results


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, "memory")
    if disabled:
        return [disabled]
    memory = section(spec, ROLE)
    return check_hugepages(memory, node) + check_thp(memory, node)
