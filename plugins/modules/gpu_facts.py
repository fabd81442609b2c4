#!/usr/bin/python
"""What the gpu role needs to know about a node before it changes anything (read-only)."""
from __future__ import annotations

import os
from typing import Callable, Optional

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: gpu_facts
short_description: Detect the NVIDIA driver, nvidia-persistenced, nvidia_peermem and openibd on a node
description:
  - Read-only; safe in check mode. The gpu role skips every task when C(driver) is false.
options:
  root:
    description: Prefix for /proc, /sys and the systemd unit directories; tests point it at a fake tree.
    type: path
    default: /
author: tunefleet developers
"""

RETURN = r"""
gpu_node:
  description: C(driver), C(nvidia_smi), C(persistenced), C(persistenced_unit), C(peermem_loaded),
    C(peermem_available), C(openibd_unit), C(kernel) and C(reason) (why the driver counts as absent).
  type: dict
  returned: always
"""


UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
# The gpu role writes its own nvidia-persistenced unit where the driver shipped none; that one
# carries this mark, so a second run still knows there is no distribution unit to drop into.
OWN_UNIT_MARK = "(tunefleet gpu role)"


def unit_exists(root: str, unit: str) -> bool:
    """A unit installed by anything but the gpu role itself."""
    for directory in UNIT_DIRS:
        path = os.path.join(root, directory, unit)
        if not os.path.exists(path):
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                if OWN_UNIT_MARK in handle.read():
                    continue
        except OSError:
            pass
        return True
    return False


def gather(root: str, which: Callable[[str], Optional[str]], module_known: Callable[[str], bool]) -> dict:
    proc_driver = os.path.join(root, "proc/driver/nvidia/version")
    smi = which("nvidia-smi")
    has_proc = os.path.exists(proc_driver)
    missing = [what for what, present in (("nvidia-smi", smi), ("/proc/driver/nvidia", has_proc)) if not present]
    peermem_loaded = os.path.isdir(os.path.join(root, "sys/module/nvidia_peermem"))
    return {
        "driver": not missing,
        "reason": f"no NVIDIA driver on this node (no {' and no '.join(missing)})" if missing else "",
        "nvidia_smi": smi,
        "persistenced": which("nvidia-persistenced"),
        "persistenced_unit": unit_exists(root, "nvidia-persistenced.service"),
        "peermem_loaded": peermem_loaded,
        "peermem_available": peermem_loaded or module_known("nvidia_peermem"),
        "openibd_unit": unit_exists(root, "openibd.service"),
        "kernel": os.uname().release,
    }


def main() -> None:
    module = AnsibleModule(argument_spec={"root": {"type": "path", "default": "/"}}, supports_check_mode=True)

    def which(name: str) -> Optional[str]:
        return module.get_bin_path(name, opt_dirs=["/usr/bin", "/usr/local/bin", "/usr/sbin", "/sbin"])

    def module_known(name: str) -> bool:
        modinfo = module.get_bin_path("modinfo", opt_dirs=["/usr/sbin", "/sbin"])
        if not modinfo:
            return False
        rc, _out, _err = module.run_command([modinfo, "-n", name])
        return rc == 0

    module.exit_json(changed=False, gpu_node=gather(module.params["root"], which, module_known))


if __name__ == "__main__":
    main()
