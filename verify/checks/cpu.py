"""CPU frequency governor on every CPU (cpu_governor)."""
from __future__ import annotations

import re

from verify.checks.common import result, role_disabled, section, skip
from verify.kernel_rules import format_cpulist
from verify.node import Node
from verify.result import Status

ROLE = "cpu"
CHECK_ID = "cpu.governor"


def judge(expected: str, governors: dict):
    """governors: cpu number -> governor name."""
    wrong = {cpu: gov for cpu, gov in governors.items() if gov != expected}
    seen = sorted(set(governors.values()))
    details = {"cpus": len(governors), "governors": seen}
    if not wrong:
        return result(CHECK_ID, ROLE, Status.PASS, expected, expected, f"all {len(governors)} CPUs", details=details)
    by_governor: dict = {}
    for cpu, gov in wrong.items():
        by_governor.setdefault(gov, set()).add(cpu)
    summary = "; ".join(f"CPUs {format_cpulist(cpus)}: {gov}" for gov, cpus in sorted(by_governor.items()))
    return result(CHECK_ID, ROLE, Status.FAIL, expected, ", ".join(seen),
                  f"{len(wrong)} of {len(governors)} CPUs are not on {expected} ({summary})", "cpu_governor", details)


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, CHECK_ID)
    if disabled:
        return [disabled]
    expected = section(spec, ROLE).get("governor")
    if not expected:
        return [skip(CHECK_ID, ROLE, "cpu_governor is not set")]
    governors = {}
    for path in node.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"):
        cpu = int(re.search(r"/cpu(\d+)/", path).group(1))
        value = node.read_value(path)
        if value is not None:
            governors[cpu] = value
    if not governors:
        return [skip(CHECK_ID, ROLE, "no cpufreq on this machine (VM or no frequency driver): nothing to set",
                     expected)]
    return [judge(str(expected), governors)]
