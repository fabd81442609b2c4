# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""What the tuning roles plan with, read from the node once (issue 13).

The preflight module calls read_node() after every input is judged and returns the result as the
host fact `tunefleet_node`, before any role runs: a role then spends its one module call on the
change itself (kernel_values), not on reads of its own. Only the roles that will run are read.
Nothing here changes the node. Standard library only: this runs on the node's own python3.
"""
from __future__ import annotations

import glob
import os
import re
from typing import Callable, List, Optional

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import gpu_node, nics
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.block_devices import find_devices
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import (
    PAM_LIMITS_DIR,
    PAM_LIMITS_FILE,
    SYSTEMD_CONF_DIRS,
    SYSTEMD_CONF_FILE,
    kernel_int,
    parse_pam_limits,
    parse_systemd_limits,
)
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.preflight_checks import as_bool, on_root
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.sysfs import read_text

THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
GOVERNOR_GLOB = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"

# run(argv) -> (rc, stdout, stderr), the AnsibleModule.run_command contract.
Runner = Callable[[List[str]], tuple]


def _read(root: str, path: str) -> Optional[str]:
    return read_text(on_root(root, path))


def _cpu_number(path: str) -> int:
    match = re.search(r"/cpu(\d+)/cpufreq/", path)
    return int(match.group(1)) if match else -1


def governor_paths(root: str) -> List[str]:
    """One scaling_governor path per cpufreq policy (the first CPU of each), in CPU order; [] without
    cpufreq (VMs, containers). CPUs of one policy share the file, so one write sets them all."""
    found, policies = [], set()
    for path in sorted(glob.glob(on_root(root, GOVERNOR_GLOB)), key=_cpu_number):
        policy = os.path.realpath(os.path.dirname(path))
        if policy in policies or read_text(path) is None:  # an offline CPU's file cannot be read
            continue
        policies.add(policy)
        found.append("/" + os.path.relpath(path, on_root(root, "/")))
    return found


def _conf_names(root: str, directory: str) -> List[str]:
    try:
        return sorted(name for name in os.listdir(on_root(root, directory)) if name.endswith(".conf"))
    except OSError:
        return []


def limits_in_files(root: str) -> dict:
    """The limits the node's own files set, in the order their readers take them, for the limits role to
    keep a higher one (never lower it): `pam` as [file, domain, type, item, value] (limits.conf, then
    limits.d/*.conf by name), `systemd` as [file, item, value] (system.conf, then the system.conf.d
    drop-ins by name, a later directory replacing a same-named file). The role drops its own files."""
    pam_files = [PAM_LIMITS_FILE] + [f"{PAM_LIMITS_DIR}/{name}" for name in _conf_names(root, PAM_LIMITS_DIR)]
    pam = [[path] + list(entry) for path in pam_files for entry in parse_pam_limits(_read(root, path) or "")]
    dropins: dict = {}
    for directory in SYSTEMD_CONF_DIRS:
        for name in _conf_names(root, directory):
            dropins[name] = f"{directory}/{name}"
    systemd = [[path, item, value] for path in [SYSTEMD_CONF_FILE] + [dropins[name] for name in sorted(dropins)]
               for item, value in parse_systemd_limits([_read(root, path) or ""]).items()]
    return {"pam": pam, "systemd": systemd}


def gpu_persistence_disabled(smi: Optional[str], run: Runner) -> List[str]:
    """Indexes of the GPUs nvidia-smi reports with persistence mode Disabled ([] when it cannot say:
    the gpu_persistence module then asks again and reports the error itself)."""
    if not smi:
        return []
    rc, out, _ = run([smi] + gpu_node.PERSISTENCE_QUERY)
    try:
        return [gpu.index for gpu in gpu_node.parse_query(out) if gpu.mode == "Disabled"] if rc == 0 else []
    except gpu_node.PersistenceError:
        return []


def read_node(root: str, variables: dict, roles: List[str], which: Callable[[str], Optional[str]],
              module_known: Callable[[str], bool], run: Runner) -> dict:
    """The reads of each role in `roles` (those that will run and are enabled), whether systemd runs
    the node, and whether a reboot marker exists (the reboot role, last in site.yml, then calls its
    module only when one does or this run needs a reboot)."""
    marker = variables.get("reboot_marker_path")
    node: dict = {"reboot_marker_present": os.path.lexists(on_root(root, marker))
                  if isinstance(marker, str) and marker.startswith("/") else True,
                  # systemd is the service manager (the limits role re-executes it only then).
                  "systemd": os.path.isdir(on_root(root, "/run/systemd/system"))}
    if "network" in roles:
        node["network"] = nics.discover(on_root(root, "/sys"), variables.get("network_interfaces") or [],
                                        variables.get("network_interface_match") or {},
                                        variables.get("network_persist_backend") or "auto", which, run)
        node["network"]["irqbalance"] = os.path.exists(on_root(root, "/usr/sbin/irqbalance"))
    if "storage" in roles:
        devices, left_out = find_devices(on_root(root, "/sys"), variables.get("storage_device_patterns") or [])
        node["block_devices"] = devices
        node["block_devices_left_out"] = left_out
    if "cpu" in roles:
        node["cpu_governor_paths"] = governor_paths(root)
    if "memory" in roles:
        node["thp"] = os.path.exists(on_root(root, THP_ENABLED))
    if "limits" in roles:
        text = _read(root, "/proc/sys/fs/nr_open")
        node["nr_open"] = kernel_int(text)
        node["limits"] = limits_in_files(root)
    if "gpu" in roles:
        gpu = gpu_node.gather(root, which, module_known)
        wanted = as_bool(variables.get("gpu_persistence_mode", True))
        asked = gpu["driver"] and wanted
        gpu["persistence_disabled"] = gpu_persistence_disabled(gpu["nvidia_smi"], run) if asked else []
        node["gpu"] = gpu
    return node
