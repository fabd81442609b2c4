#!/usr/bin/python
# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

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


from ansible_collections.tunefleet.gpu_node.plugins.module_utils.block_devices import (  # noqa: E402,F401
    find_devices,
    read_device,
    skip_reason,
)


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
