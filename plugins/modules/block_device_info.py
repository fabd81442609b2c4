#!/usr/bin/python
# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import fnmatch
import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: block_device_info
short_description: List whole block devices matching globs, with their I/O scheduler and read-ahead
description:
  - Matches the names under C(/sys/block) against I(patterns) (shell globs such as C(nvme*n*) or C(loop*)).
  - Leaves out partitions, hidden devices (the per-path nodes of NVMe multipath such as C(nvme0c0n1)),
    and devices with no medium (size 0, e.g. a loop device with no file attached), saying why under C(left_out).
  - Reads only; safe in check mode.
options:
  patterns:
    description: Globs on the device name.
    type: list
    elements: str
    required: true
  sysfs_root:
    description: Where sysfs is mounted (tests point this at a fake tree).
    type: path
    default: /sys
author:
  - tunefleet developers
"""

EXAMPLES = r"""
- name: Find the NVMe namespaces
  tunefleet.gpu_node.block_device_info:
    patterns: ["nvme*n*"]
  register: nvme
"""

RETURN = r"""
devices:
  description: Matching whole devices, sorted by name.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "nvme0n1", "scheduler": "none", "schedulers": ["none", "mq-deadline"], "read_ahead_kb": 128}]
left_out:
  description: Matching names left out, each with the reason.
  returned: always
  type: list
  elements: dict
"""


def _read(path: str):
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def read_device(block_dir: str) -> dict:
    scheduler_menu = _read(os.path.join(block_dir, "queue", "scheduler")) or ""
    selected = [token[1:-1] for token in scheduler_menu.split() if token.startswith("[")]
    read_ahead = _read(os.path.join(block_dir, "queue", "read_ahead_kb"))
    return {
        "name": os.path.basename(block_dir),
        "scheduler": selected[0] if selected else (scheduler_menu or None),
        "schedulers": [token.strip("[]") for token in scheduler_menu.split()],
        "read_ahead_kb": int(read_ahead) if read_ahead and read_ahead.isdigit() else None,
    }


def skip_reason(block_dir: str):
    if os.path.exists(os.path.join(block_dir, "partition")):
        return "a partition: tuning applies to the whole device"
    if _read(os.path.join(block_dir, "hidden")) == "1":
        return "hidden (an NVMe multipath path node; its namespace device is tuned instead)"
    if _read(os.path.join(block_dir, "size")) in ("0", None):
        return "no medium (size 0)"
    if not os.path.exists(os.path.join(block_dir, "queue", "scheduler")):
        return "no request queue"
    return None


def find_devices(sysfs_root: str, patterns: list) -> tuple:
    block_root = os.path.join(sysfs_root, "block")
    devices, skipped = [], []
    for name in sorted(os.listdir(block_root)):
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            continue
        block_dir = os.path.join(block_root, name)
        reason = skip_reason(block_dir)
        if reason:
            skipped.append({"name": name, "reason": reason})
        else:
            devices.append(read_device(block_dir))
    return devices, skipped


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "patterns": {"type": "list", "elements": "str", "required": True},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    bad = [pattern for pattern in module.params["patterns"] if not pattern or any(c in pattern for c in '/" \t\n')]
    if bad:
        module.fail_json(msg=f"storage_device_patterns: {bad} are not device-name globs (no '/', quotes or spaces)")
    devices, skipped = find_devices(module.params["sysfs_root"], module.params["patterns"])
    module.exit_json(changed=False, devices=devices, left_out=skipped)


if __name__ == "__main__":
    main()
