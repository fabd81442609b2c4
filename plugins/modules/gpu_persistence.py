#!/usr/bin/python
"""Turn GPU persistence mode on now, only where nvidia-smi reports it Disabled."""
from __future__ import annotations

from typing import List

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.gpu_node import (
    PERSISTENCE_QUERY,
    GpuPersistence,
    PersistenceError,
    parse_query,
)
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.module_guard import failing_cleanly

DOCUMENTATION = r"""
module: gpu_persistence
short_description: Enable NVIDIA persistence mode now, where it is off
description:
  - Queries C(nvidia-smi --query-gpu=index,pci.bus_id,persistence_mode --format=csv) and runs
    C(nvidia-smi -pm 1) only when a GPU reports C(Disabled), so a node already on reports no change
    and check mode reports what would change.
  - Keeping it on across reboots is the job of the C(nvidia-persistenced) service (the gpu role's drop-in).
options:
  nvidia_smi:
    description: Path of nvidia-smi.
    type: path
    default: nvidia-smi
author: tunefleet developers
"""

RETURN = r"""
gpus:
  description: Per GPU, its index, PCI bus id, and persistence mode before and after.
  type: list
  returned: always
"""


def _report(before: List[GpuPersistence], after: List[GpuPersistence]) -> dict:
    after_by_bus = {gpu.bus_id: gpu.mode for gpu in after}
    gpus = [{"index": g.index, "bus_id": g.bus_id, "before": g.mode, "after": after_by_bus.get(g.bus_id, g.mode)}
            for g in before]
    return {
        "gpus": gpus,
        "diff": {"before": "".join(f"GPU {g['index']} ({g['bus_id']}): {g['before']}\n" for g in gpus),
                 "after": "".join(f"GPU {g['index']} ({g['bus_id']}): {g['after']}\n" for g in gpus)},
    }


def main() -> None:
    module = AnsibleModule(argument_spec={"nvidia_smi": {"type": "path", "default": "nvidia-smi"}},
                           supports_check_mode=True)
    with failing_cleanly(module, "tunefleet.gpu_node.gpu_persistence"):
        smi = module.params["nvidia_smi"]

        def query() -> List[GpuPersistence]:
            rc, out, err = module.run_command([smi] + PERSISTENCE_QUERY)
            if rc != 0:
                module.fail_json(msg=f"nvidia-smi persistence query failed (rc {rc}): {(err or out).strip()}")
            try:
                return parse_query(out)
            except PersistenceError as exc:
                module.fail_json(msg=str(exc))

        before = query()
        disabled = [gpu for gpu in before if gpu.mode == "Disabled"]
        if not disabled:
            module.exit_json(changed=False, msg=f"persistence mode already Enabled on {len(before)} GPU(s)",
                             **_report(before, before))
        if module.check_mode:
            after = [GpuPersistence(g.index, g.bus_id, "Enabled") for g in before]
            module.exit_json(changed=True, msg=f"would run nvidia-smi -pm 1 ({len(disabled)} GPU(s) Disabled)",
                             **_report(before, after))
        rc, out, err = module.run_command([smi, "-pm", "1"])
        if rc != 0:
            module.fail_json(msg=f"nvidia-smi -pm 1 failed (rc {rc}): {(err or out).strip()}")
        after = query()
        still = [g.index for g in after if g.mode != "Enabled"]
        if still:
            module.fail_json(msg=f"persistence mode still Disabled on GPU {', '.join(still)} after nvidia-smi -pm 1")
        module.exit_json(changed=True, msg=f"persistence mode enabled on {len(disabled)} GPU(s)",
                         **_report(before, after))


if __name__ == "__main__":
    main()
