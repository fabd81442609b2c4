# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""What the gpu role needs to know about a node (the NVIDIA driver, nvidia-persistenced,
nvidia_peermem, openibd, each GPU's persistence mode), and the parser of nvidia-smi's persistence
answer: one home for the preflight module (which reads the node once, before any role) and the
gpu_persistence module (which turns persistence mode on). Standard library only."""
from __future__ import annotations

import csv
import io
import os
import pwd
from dataclasses import dataclass
from typing import Callable, List, Optional

UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
OWN_UNIT_MARK = "(tunefleet gpu role)"
PERSISTENCE_QUERY = ["--query-gpu=index,pci.bus_id,persistence_mode", "--format=csv"]


class PersistenceError(ValueError):
    pass


@dataclass
class GpuPersistence:
    index: str
    bus_id: str
    mode: str


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


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def gather(root: str, which: Callable[[str], Optional[str]], module_known: Callable[[str], bool],
           user_known: Callable[[str], bool] = user_exists) -> dict:
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
        # The distribution packages create this user and start the daemon as it (--user).
        "persistenced_user": user_known("nvidia-persistenced"),
        "peermem_loaded": peermem_loaded,
        "peermem_available": peermem_loaded or module_known("nvidia_peermem"),
        "openibd_unit": unit_exists(root, "openibd.service"),
        "kernel": os.uname().release,
    }


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
