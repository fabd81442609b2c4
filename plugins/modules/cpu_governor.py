#!/usr/bin/python
"""Set the cpufreq scaling governor on every CPU, writing only where it differs."""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cpu_governor
short_description: Set the cpufreq scaling governor on every online CPU
description:
  - Reads C(cpu*/cpufreq/scaling_governor) under I(sysfs_root) and writes I(governor) only to the
    cpufreq policies whose governor differs, so check mode reports exactly what would change.
  - CPUs that share a cpufreq policy are written once.
  - A node without cpufreq (most VMs and containers) is not an error; C(cpufreq) is returned false.
  - Fails before writing anything when a policy does not offer I(governor).
options:
  governor:
    description: The governor to set, e.g. C(performance).
    type: str
    required: true
  sysfs_root:
    description: Root of sysfs; tests point it at a fake tree.
    type: path
    default: /sys
author: tunefleet developers
"""

RETURN = r"""
cpufreq:
  description: Whether any CPU exposes cpufreq.
  type: bool
  returned: always
cpus:
  description: Per CPU, its governor before and after.
  type: list
  returned: always
paths:
  description: The scaling_governor paths that differ from I(governor) (one per policy).
  type: list
  returned: always
"""


@dataclass
class CpuGovernor:
    cpu: str
    path: str
    policy: str
    current: str
    offered: List[str] = field(default_factory=list)


class GovernorError(ValueError):
    pass


def _read(path: str) -> Optional[str]:
    try:
        # errors="replace": odd bytes in sysfs read as U+FFFD, so a governor no CPU offers is refused
        # by name in plan() instead of a UnicodeDecodeError traceback.
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(4096).strip()
    except OSError:
        return None


def _cpu_sort_key(name: str) -> int:
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else -1


def read_governors(sysfs_root: str) -> List[CpuGovernor]:
    """Every CPU that has cpufreq, in CPU order. Offline CPUs have no cpufreq directory."""
    pattern = os.path.join(sysfs_root, "devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")
    found = []
    for path in glob.glob(pattern):
        cpu = path.split(os.sep)[-3]
        current = _read(path)
        if current is None:
            continue
        cpufreq_dir = os.path.dirname(path)
        offered_text = _read(os.path.join(cpufreq_dir, "scaling_available_governors")) or ""
        found.append(CpuGovernor(cpu, path, os.path.realpath(cpufreq_dir), current, offered_text.split()))
    return sorted(found, key=lambda item: _cpu_sort_key(item.cpu))


def plan(cpus: List[CpuGovernor], governor: str) -> List[CpuGovernor]:
    """One CPU per policy whose governor differs; raises if any policy does not offer it."""
    refused = [c for c in cpus if c.offered and governor not in c.offered]
    if refused:
        first = refused[0]
        names = ", ".join(c.cpu for c in refused)
        raise GovernorError(
            f"cpu_governor {governor!r} is not offered by {names} "
            f"(offered: {' '.join(first.offered)}); set cpu_governor to one of those"
        )
    to_write: Dict[str, CpuGovernor] = {}
    for item in cpus:
        if item.current != governor and item.policy not in to_write:
            to_write[item.policy] = item
    return list(to_write.values())


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def apply(sysfs_root: str, governor: str, check_mode: bool) -> dict:
    cpus = read_governors(sysfs_root)
    if not cpus:
        return {"changed": False, "cpufreq": False, "cpus": [], "paths": [],
                "msg": "no cpufreq on this node (common in VMs and containers): governor left alone"}
    changes = plan(cpus, governor)
    before = {c.cpu: c.current for c in cpus}
    if changes and not check_mode:
        for item in changes:
            try:
                _write(item.path, governor)
            except OSError as exc:
                raise GovernorError(f"writing {governor!r} to {item.path}: {exc.strerror}") from exc
        cpus = read_governors(sysfs_root)
        wrong = [c.cpu for c in cpus if c.current != governor]
        if wrong:
            raise GovernorError(f"governor still not {governor!r} on {', '.join(wrong)} after writing it")
        after = {c.cpu: c.current for c in cpus}
    else:
        policies = {c.policy for c in changes}
        after = {c.cpu: (governor if c.policy in policies else c.current) for c in cpus}
    return {
        "changed": bool(changes),
        "cpufreq": True,
        "cpus": [{"cpu": cpu, "before": before[cpu], "after": after.get(cpu, before[cpu])} for cpu in before],
        "paths": [c.path for c in changes],
        "diff": {"before": _lines(before), "after": _lines(after)},
        "msg": f"{len(changes)} cpufreq polic{'y' if len(changes) == 1 else 'ies'} set to {governor}"
        if changes else f"every CPU already uses {governor}",
    }


def _lines(governors: Dict[str, str]) -> str:
    return "".join(f"{cpu}: {gov}\n" for cpu, gov in governors.items())


def main() -> None:
    module = AnsibleModule(
        argument_spec={"governor": {"type": "str", "required": True},
                       "sysfs_root": {"type": "path", "default": "/sys"}},
        supports_check_mode=True,
    )
    try:
        result = apply(module.params["sysfs_root"], module.params["governor"], module.check_mode)
    except GovernorError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
