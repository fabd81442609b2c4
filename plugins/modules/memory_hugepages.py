#!/usr/bin/python
"""Reserve 2 MiB huge pages now (total or per NUMA node) and prove the kernel reserved them."""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import EXACT, direction_of, settle
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.module_guard import failing_cleanly

DOCUMENTATION = r"""
module: memory_hugepages
short_description: Reserve 2 MiB huge pages at runtime, in total or per NUMA node
description:
  - With I(total), writes C(/proc/sys/vm/nr_hugepages); with I(per_node), writes
    C(/sys/devices/system/node/nodeN/hugepages/hugepages-2048kB/nr_hugepages) for each node given.
  - Reads every value first and writes only those that differ, so check mode reports what would change.
  - The count is C(at_least) (kernel_rules.DIRECTIONS, C(memory.hugepages_2m)), so a pool already larger
    than asked is kept, never shrunk, unless I(exact) is true.
  - The kernel may reserve fewer pages than asked (not enough free contiguous memory). The module
    reads the count back; when it is short it writes the previous values back and fails, so the
    node is left as it was.
options:
  total:
    description: Total number of 2 MiB pages (the kernel spreads them over the nodes).
    type: int
  per_node:
    description: NUMA node (C(0), C("0") or C(node0)) to number of 2 MiB pages.
    type: dict
    default: {}
  exact:
    description: Set the count asked even where the node has more pages (C(memory_hugepages_exact)).
    type: bool
    default: false
  proc_root:
    description: Root of procfs; tests point it at a fake tree.
    type: path
    default: /proc
  sysfs_root:
    description: Root of sysfs; tests point it at a fake tree.
    type: path
    default: /sys
author: tunefleet developers
"""

RETURN = r"""
pages:
  description: Per path, the page count before and after, the count asked for, and the count to have in force
    (C(wanted), the larger of the two unless I(exact)).
  type: list
  returned: always
paths:
  description: The paths whose count differs from the request.
  type: list
  returned: always
kept:
  description: One line per pool left above the count asked (at_least); empty with I(exact).
  type: list
  returned: always
record:
  description: The total and every node's count file (one pool seen through several files), for the ledger.
  type: list
  returned: always
"""


PAGE_KB = 2048


class HugepagesError(ValueError):
    pass


# The name of the 2 MiB count in kernel_rules.DIRECTIONS (total and per node alike).
DIRECTION_NAME = "memory.hugepages_2m"


@dataclass
class PageTarget:
    label: str
    path: str
    current: int
    wanted: int  # the count to have in force: `asked`, or the node's own larger one (at_least)
    asked: int


def node_number(key: object) -> int:
    """0, '0' and 'node0' all name NUMA node 0."""
    text = str(key).strip()
    match = re.fullmatch(r"(?:node)?(\d+)", text)
    if isinstance(key, bool) or not match:
        raise HugepagesError(f"memory_hugepages_2m_per_node: {key!r} is not a NUMA node (use 0, '0' or 'node0')")
    return int(match.group(1))


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def default_page_kb(proc_root: str) -> Optional[int]:
    try:
        with open(os.path.join(proc_root, "meminfo"), encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Hugepagesize:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _count(value: object, what: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HugepagesError(f"{what}: {value!r} is not a page count (a whole number >= 0)")
    return value


def targets(total: Optional[int], per_node: Dict[object, object], proc_root: str, sysfs_root: str) -> List[PageTarget]:
    if total is not None and per_node:
        raise HugepagesError("memory_hugepages_2m and memory_hugepages_2m_per_node are both set: choose one")
    if total is not None:
        total = _count(total, "memory_hugepages_2m")
        page_kb = default_page_kb(proc_root)
        if page_kb != PAGE_KB:
            raise HugepagesError(
                f"the default huge page size here is {page_kb} kB, so vm.nr_hugepages would not count 2 MiB "
                "pages; use memory_hugepages_2m_per_node instead"
            )
        path = os.path.join(proc_root, "sys/vm/nr_hugepages")
        current = _read_int(path)
        if current is None:
            raise HugepagesError(f"cannot read {path}: this kernel has no huge page support")
        return [PageTarget("total", path, current, total, total)]
    found = []
    for key, value in sorted(per_node.items(), key=lambda item: node_number(item[0])):
        node = node_number(key)
        count = _count(value, f"memory_hugepages_2m_per_node[{key!r}]")
        path = os.path.join(sysfs_root, f"devices/system/node/node{node}/hugepages/hugepages-{PAGE_KB}kB/nr_hugepages")
        current = _read_int(path)
        if current is None:
            nodes = sorted(n for n in os.listdir(os.path.join(sysfs_root, "devices/system/node"))
                           if re.fullmatch(r"node\d+", n)) if os.path.isdir(
                os.path.join(sysfs_root, "devices/system/node")) else []
            raise HugepagesError(
                f"memory_hugepages_2m_per_node: NUMA node {node} has no 2 MiB huge pages here "
                f"({path} missing; nodes on this host: {', '.join(nodes) or 'none'})"
            )
        found.append(PageTarget(f"node{node}", path, current, count, count))
    return found


def alias_paths(proc_root: str, sysfs_root: str) -> List[str]:
    """Every file that shows the same 2 MiB pool: the total and each node's share.

    Writing one changes the others, so the ledger must hold all of them from before the first
    write, whichever one tunefleet writes; otherwise a restore puts back a count tunefleet set.
    """
    total = os.path.join(proc_root, "sys/vm/nr_hugepages")
    pattern = f"devices/system/node/node[0-9]*/hugepages/hugepages-{PAGE_KB}kB/nr_hugepages"
    nodes = sorted(glob.glob(os.path.join(sysfs_root, pattern)))
    return [p for p in [total] + nodes if os.path.exists(p)]


def write_value(path: str, value: int) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(str(value))


def settle_targets(found: List[PageTarget], exact: bool) -> List[str]:
    """Never shrink a larger pool (at_least) unless `exact`: each target's `wanted` becomes the count
    to have in force. Returns one line per pool kept above the count asked (the result's `kept` and msg)."""
    direction = direction_of(DIRECTION_NAME, [DIRECTION_NAME] if exact else [])
    kept = []
    for target in found:
        target.wanted = int(settle(direction, target.current, target.asked))
        if direction != EXACT and target.wanted > target.asked:
            kept.append(f"{target.label}: {target.current} pages kept, more than the {target.asked} asked "
                        "(at_least; memory_hugepages_exact: true sets the count asked)")
    return kept


def apply(total: Optional[int], per_node: Dict[object, object], proc_root: str, sysfs_root: str,
          check_mode: bool, writer: Callable[[str, int], None] = write_value, exact: bool = False) -> dict:
    wanted = targets(total, per_node, proc_root, sysfs_root)
    kept = settle_targets(wanted, exact)
    to_write = [t for t in wanted if t.current != t.wanted]
    warnings = []
    after = {t.path: t.wanted for t in wanted}
    if to_write and not check_mode:
        for target in to_write:
            try:
                writer(target.path, target.wanted)
            except OSError as exc:
                not_restored = _put_back(to_write, writer)
                raise HugepagesError(
                    f"writing {target.wanted} to {target.path}: {exc.strerror}; previous counts restored.{not_restored}"
                ) from exc
        after = {t.path: _read_int(t.path) for t in wanted}
        short = [t for t in to_write if t.wanted > t.current and (after[t.path] or 0) < t.wanted]
        if short:
            not_restored = _put_back(to_write, writer)
            detail = "; ".join(f"{t.label}: {after[t.path]} of {t.wanted}" for t in short)
            raise HugepagesError(
                f"the kernel reserved fewer 2 MiB huge pages than asked ({detail}): not enough free contiguous "
                f"memory. Previous counts restored ({', '.join(f'{t.label}: {t.current}' for t in to_write)}). "
                f"Lower the count, free memory, or reserve them at boot.{not_restored}"
            )
        for t in to_write:
            if (after[t.path] or 0) > t.wanted:
                warnings.append(f"{t.label}: {after[t.path]} pages remain instead of {t.wanted}: pages in use are "
                                "released when their users free them")
    pages = [{"name": t.label, "path": t.path, "before": t.current, "after": after[t.path], "wanted": t.wanted,
              "asked": t.asked} for t in wanted]
    return {
        "changed": bool(to_write),
        "pages": pages,
        "paths": [t.path for t in to_write],
        "record": alias_paths(proc_root, sysfs_root),
        "warnings": warnings,
        "diff": {"before": "".join(f"{p['name']}: {p['before']}\n" for p in pages),
                 "after": "".join(f"{p['name']}: {p['after']}\n" for p in pages)},
        "kept": kept,
        "msg": "; ".join([f"{p['name']} {p['before']} -> {p['after']}" for p in pages if p["before"] != p["after"]]
                         + kept) or "2 MiB huge pages already as asked",
    }


def _put_back(targets_written: List[PageTarget], writer: Callable[[str, int], None]) -> str:
    """Write the previous counts back; returns what could not be put back, for the error message."""
    failed = []
    for target in targets_written:
        try:
            writer(target.path, target.current)
        except OSError as exc:
            failed.append(f"{target.path} ({exc.strerror})")
    return f" COULD NOT put back: {', '.join(failed)}." if failed else ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "total": {"type": "int"},
            "per_node": {"type": "dict", "default": {}},
            "exact": {"type": "bool", "default": False},
            "proc_root": {"type": "path", "default": "/proc"},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    with failing_cleanly(module, "tunefleet.gpu_node.memory_hugepages"):
        params = module.params
        try:
            result = apply(params["total"], params["per_node"], params["proc_root"], params["sysfs_root"],
                           module.check_mode, exact=params["exact"])
        except HugepagesError as exc:
            module.fail_json(msg=str(exc))
        for warning in result.pop("warnings"):
            module.warn(warning)
        module.exit_json(**result)


if __name__ == "__main__":
    main()
