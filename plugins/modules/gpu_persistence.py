#!/usr/bin/python
"""Turn GPU persistence mode on now, only where nvidia-smi reports it Disabled."""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import List

from ansible.module_utils.basic import AnsibleModule

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


QUERY = ["--query-gpu=index,pci.bus_id,persistence_mode", "--format=csv"]


class PersistenceError(ValueError):
    pass


@dataclass
class GpuPersistence:
    index: str
    bus_id: str
    mode: str


def _column_name(header: str) -> str:
    """'fan.speed [%]' -> 'fan.speed': nvidia-smi appends units to some header cells."""
    return header.strip().split(" [", 1)[0]


def parse_query(text: str) -> List[GpuPersistence]:
    """Rows of an `nvidia-smi --query-gpu=... --format=csv` answer that includes the three columns."""
    try:
        rows = [row for row in csv.reader(io.StringIO(text), skipinitialspace=True) if row]
    except csv.Error as exc:  # a field over csv's size limit, a NUL byte
        raise PersistenceError(f"nvidia-smi answer is not CSV: {exc}") from None
    if not rows:
        raise PersistenceError("nvidia-smi printed nothing for the persistence query")
    header = [_column_name(cell) for cell in rows[0]]
    missing = [name for name in ("index", "pci.bus_id", "persistence_mode") if name not in header]
    if missing:
        raise PersistenceError(f"nvidia-smi answer has no column {', '.join(missing)}: {rows[0][:4]}")
    at = {name: header.index(name) for name in ("index", "pci.bus_id", "persistence_mode")}
    gpus = []
    for row in rows[1:]:
        if len(row) != len(header):
            raise PersistenceError(f"nvidia-smi row has {len(row)} cells, header has {len(header)}")
        mode = row[at["persistence_mode"]].strip()
        if mode not in ("Enabled", "Disabled"):
            raise PersistenceError(f"GPU {row[at['index']]}: persistence mode {mode!r} (expected Enabled or Disabled)")
        gpus.append(GpuPersistence(row[at["index"]].strip(), row[at["pci.bus_id"]].strip(), mode))
    return gpus


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
    smi = module.params["nvidia_smi"]

    def query() -> List[GpuPersistence]:
        rc, out, err = module.run_command([smi] + QUERY)
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
    module.exit_json(changed=True, msg=f"persistence mode enabled on {len(disabled)} GPU(s)", **_report(before, after))


if __name__ == "__main__":
    main()
