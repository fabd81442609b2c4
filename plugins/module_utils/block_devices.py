# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""Which names under /sys/block are tunable whole devices: one home for the storage role's
module (block_device_info) and for preflight, which refuses named devices that are not there.
Standard library only: this runs on the node's own python3."""
from __future__ import annotations

import fnmatch
import os

from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import kernel_int, parse_choices
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.sysfs import read_text


def read_device(block_dir: str) -> dict:
    scheduler_menu = read_text(os.path.join(block_dir, "queue", "scheduler")) or ""
    selected, offered = parse_choices(scheduler_menu)
    read_ahead = read_text(os.path.join(block_dir, "queue", "read_ahead_kb"))
    return {
        "name": os.path.basename(block_dir),
        "scheduler": selected or scheduler_menu or None,
        "schedulers": offered,
        "read_ahead_kb": kernel_int(read_ahead),
    }


def skip_reason(block_dir: str):
    if os.path.exists(os.path.join(block_dir, "partition")):
        return "a partition: tuning applies to the whole device"
    if read_text(os.path.join(block_dir, "hidden")) == "1":
        return "hidden (an NVMe multipath path node; its namespace device is tuned instead)"
    if read_text(os.path.join(block_dir, "size")) in ("0", None):
        return "no medium (size 0)"
    if not os.path.exists(os.path.join(block_dir, "queue", "scheduler")):
        return "no request queue"
    return None


def find_devices(sysfs_root: str, patterns: list) -> tuple:
    """(devices, left_out): the matching whole devices, and the matching names left out with why."""
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
