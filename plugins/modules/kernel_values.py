#!/usr/bin/python
# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import contextlib
import errno
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import (
    normalise_value,
    parse_choices,
    parse_cpulist,
)

DOCUMENTATION = r"""
---
module: kernel_values
short_description: Write live kernel values (/proc/sys, /sys, /proc/irq) all-or-nothing, with honest check and diff
description:
  - Reads every given path first; fails naming each path that is missing, and each I/O scheduler
    that the device does not offer, before writing anything.
  - Writes only the values that differ, reads each one back, and on any refused or ignored
    write puts back the values it already changed, so a node is never left half-tuned.
  - Compares the way the kernel prints each file, so a second run reports no change
    (whitespace in C(/proc/sys) triples, the bracketed I/O scheduler, CPU lists such as C(0-3) vs C(0,1,2,3)).
  - In check mode nothing is written; the result and the diff say what would change, from what to what.
options:
  values:
    description: Absolute path -> wanted value (string or integer).
    type: dict
    required: true
  tolerate_eio:
    description:
      - Report writes refused with EIO under C(refused) instead of failing. The kernel answers EIO
        for IRQs whose affinity it manages itself; nothing can pin those.
    type: bool
    default: false
  labels:
    description:
      - Path -> the name the user gave it (e.g. the role variable and key), put in front of any
        error about that path, so a refusal names the variable and not only the /proc path.
    type: dict
    default: {}
author:
  - tunefleet developers
"""

EXAMPLES = r"""
- name: Set read-ahead and scheduler of nvme0n1
  tunefleet.gpu_node.kernel_values:
    values:
      /sys/block/nvme0n1/queue/scheduler: none
      /sys/block/nvme0n1/queue/read_ahead_kb: 4096
"""

RETURN = r"""
changes:
  description: One entry per path whose value changed (or would change in check mode).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/proc/sys/vm/swappiness", "before": "60", "after": "0"}]
refused:
  description: Paths whose write the kernel refused with EIO (only with I(tolerate_eio)).
  returned: always
  type: list
  elements: str
"""


class KernelValueError(Exception):
    """A value that cannot be applied; the message names the path and the reason."""


def _kind(path: str) -> str:
    name = os.path.basename(path)
    if name == "scheduler":
        return "scheduler"
    if name.endswith("_list") or name.endswith("cpulist"):
        return "cpulist"
    return "plain"


def current_value(path: str, raw: str) -> str:
    """The value as it should be compared and reported (the selected scheduler, not the menu)."""
    if _kind(path) == "scheduler":
        active, _ = parse_choices(raw)
        return raw.strip() if active is None else active
    return normalise_value(raw)


def offered_schedulers(raw: str) -> list:
    return parse_choices(raw)[1]


def same_value(path: str, current: str, wanted: str) -> bool:
    if _kind(path) == "cpulist":
        try:
            return parse_cpulist(current) == parse_cpulist(wanted)
        except ValueError:
            return False
    return current == normalise_value(wanted)


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as handle:
        return handle.read()


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def plan(values: dict) -> tuple:
    """Read every path, validate every value; return (changes, errors) without writing anything."""
    changes, errors = [], []
    for path, wanted in sorted(values.items()):
        if isinstance(wanted, bool) or not isinstance(wanted, (str, int)):
            errors.append(f"{path}: value {wanted!r} must be a string or an integer, not {type(wanted).__name__}")
            continue
        wanted = normalise_value(wanted)
        if not os.path.isabs(path):
            errors.append(f"{path}: not an absolute path")
            continue
        try:
            raw = _read(path)
        except OSError as exc:
            errors.append(f"{path}: cannot read ({exc.strerror})")
            continue
        if _kind(path) == "scheduler" and wanted not in offered_schedulers(raw):
            errors.append(f"{path}: scheduler {wanted!r} is not offered (offered: {' '.join(offered_schedulers(raw))})")
            continue
        if _kind(path) == "cpulist":
            try:
                parse_cpulist(wanted)
            except ValueError as exc:
                errors.append(f"{path}: {wanted!r} is not a CPU list ({exc})")
                continue
        before = current_value(path, raw)
        if not same_value(path, before, wanted):
            changes.append({"path": path, "before": before, "after": wanted})
    return changes, errors


def apply(changes: list, tolerate_eio: bool = False) -> list:
    """Write each change and read it back; on failure put back what was written, then raise."""
    written, refused = [], []
    for change in changes:
        path = change["path"]
        try:
            _write(path, change["after"])
        except OSError as exc:
            if tolerate_eio and exc.errno == errno.EIO:
                refused.append(path)
                continue
            _undo(written)
            raise KernelValueError(
                f"{path}: the kernel refused {change['after']!r} ({exc.strerror}); "
                f"{len(written)} value(s) written before it were put back"
            ) from exc
        written.append(change)
        observed = current_value(path, _read(path))
        if not same_value(path, observed, change["after"]):
            _undo(written)
            raise KernelValueError(
                f"{path}: wrote {change['after']!r} but the kernel kept {observed!r}; "
                f"all {len(written)} value(s) written in this task were put back"
            )
    return refused


def _undo(written: list) -> None:
    for change in reversed(written):
        # best effort: the error that triggered the undo is the one to report
        with contextlib.suppress(OSError):
            _write(change["path"], change["before"])


def diff_text(changes: list, side: str) -> str:
    return "".join(f"{change['path']} = {change[side]}\n" for change in changes)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "values": {"type": "dict", "required": True},
            "tolerate_eio": {"type": "bool", "default": False},
            "labels": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    changes, errors = plan(module.params["values"])
    labels = module.params["labels"]

    def named(text: str) -> str:  # every error starts with its path
        label = labels.get(text.split(": ", 1)[0])
        return f"{label}: {text}" if label else text

    errors = [named(error) for error in errors]
    if errors:
        module.fail_json(msg="nothing was changed: " + "; ".join(errors), errors=errors)
    refused = []
    if changes and not module.check_mode:
        try:
            refused = apply(changes, module.params["tolerate_eio"])
        except KernelValueError as exc:
            module.fail_json(msg=named(str(exc)))
    applied = [change for change in changes if change["path"] not in refused]
    module.exit_json(
        changed=bool(applied),
        changes=applied,
        refused=refused,
        diff={
            "before_header": "live kernel values",
            "after_header": "live kernel values",
            "before": diff_text(applied, "before"),
            "after": diff_text(applied, "after"),
        },
    )


if __name__ == "__main__":
    main()
