"""Running an engine: a module of this package run as its own process, isolated, that hands back one
marked JSON line.

Anything that must import torch (or other heavy, crash-prone code) runs as an engine, never in the
verify process: `engine_argv` runs the module with the same interpreter under `-I`, `engine_env` gives
it the allow-listed environment, and the node's runner kills its whole process group when it hangs,
keeping what it printed. The engine prints `RESULT_MARKER` + JSON (`emit_result`) or exits `CANNOT_RUN`
when the node cannot run it (no torch, no GPU: a SKIP, never an ERROR); the caller finds the line with
`read_result` and checks it against the engine's PAYLOAD_SCHEMA (verify.payload_schema.checked_payload)
before reading a field. Engine-side helpers live here too (cuda_torch, torch_bus_id, restrict_visible: what
an engine does before and after torch starts). The benchmarks run engines, so this lives in the runner
layer, below them; the scheduler's hooks never import it (they start no engine).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

from verify.runner import DEFAULT_CWD, clean_env
from verify.safe_io import check_dir_trusted

RESULT_MARKER = "TUNEFLEET_RESULT "
# Exit status an engine uses for "this node cannot run me" (no torch, no GPU): a SKIP, not an ERROR.
CANNOT_RUN = 3


def package_parent() -> str:
    """The directory that holds the verify package (what an engine or a node run imports it from)."""
    return str(Path(__file__).resolve().parent.parent)


# Engines run as root on shared nodes, so nothing of the caller's may choose their code: `-I`
# (isolated: no PYTHON* variables, no user site-packages, no script directory or cwd on sys.path,
# Python 3.4+, unlike -P which needs 3.11) and this bootstrap, which puts back only trusted
# directories (engine_sys_path) by their absolute paths, then runs the module as __main__.
_BOOTSTRAP = ("import runpy, sys; extra = sys.argv[1]; sys.argv = sys.argv[2:]; "
              "sys.path[:] = [p for p in (extra.split(':') if extra else []) + sys.path if p]; "
              "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")
# Engines start in a directory root owns, not wherever verify was started (verify.runner's own default).
ENGINE_CWD = DEFAULT_CWD


def engine_sys_path() -> list:
    """Absolute directories an engine imports from besides the interpreter's own (which -I keeps,
    a venv's site-packages included): this package's parent, then the directories verify itself
    was started with (a node run's work directory; verify_node_pythonpath, where PyTorch may
    live), each only when no one but root and us can change it (verify.safe_io)."""
    kept: list = []
    for entry in [package_parent(), *sys.path]:
        if not entry or not os.path.isabs(entry) or entry in kept or not os.path.isdir(entry):
            continue
        try:
            check_dir_trusted(entry)
        except OSError:
            continue
        kept.append(entry)
    return kept


def engine_argv(module: str, args: list) -> list:
    """argv that runs one engine module with the same interpreter as verify, isolated (see _BOOTSTRAP)."""
    return [sys.executable, "-I", "-u", "-c", _BOOTSTRAP, ":".join(engine_sys_path()), module,
            *[str(a) for a in args]]


def engine_env(extra: Optional[dict] = None) -> dict:
    """The whole environment of an engine: verify.runner.clean_env (the fixed root-owned PATH, root's
    own HOME, the operator's GPU/NCCL settings, nothing else of the caller's) plus unbuffered output."""
    return clean_env(dict({"PYTHONUNBUFFERED": "1"}, **(extra or {})))


def emit_result(payload: dict) -> None:
    """How an engine hands its measurement back: one marked JSON line on stdout."""
    print(RESULT_MARKER + json.dumps(payload, sort_keys=True), flush=True)


def read_result(stdout: str) -> Optional[Any]:
    """The last marked line of an engine's stdout, or None when it never got that far.

    What comes back is whatever JSON the line held: check it against the engine's schema
    (checked_payload) before anything reads a field of it.
    """
    found = None
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            try:
                found = json.loads(line[len(RESULT_MARKER) :])
            except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; deep nesting recurses
                found = None
    return found


def cuda_torch():
    """Inside an engine: (torch, "") when torch imports and sees a CUDA device, else (None, why not), the
    line an engine prints to stderr before it exits CANNOT_RUN. torch is imported only here, in the engine."""
    try:
        import torch
    except ImportError as exc:
        return None, f"torch is not importable: {exc}"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    return torch, ""


def torch_bus_id(props) -> Optional[str]:
    """'00000000:18:00.0' as nvidia-smi prints it, from torch's device properties (torch >= 2.2), else None."""
    if not hasattr(props, "pci_bus_id"):
        return None
    return f"{getattr(props, 'pci_domain_id', 0):08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


def normal_bus(text: Optional[str]) -> str:
    """'0000:18:00.0' / '00000000:18:00.0' -> '00000000:18:00.0' (NVML's form, upper case); '' for None."""
    if not text:
        return ""
    parts = str(text).strip().upper().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    return ":".join([parts[0][-8:].zfill(8), *parts[1:]])


def restrict_visible(exclude: set) -> str:
    """Hide the GPUs whose bus ids are in `exclude` from CUDA before torch starts (so no context is ever
    created on them: another user's job holds them), keeping the caller's own CUDA_VISIBLE_DEVICES choice.

    Runs under CUDA_DEVICE_ORDER=PCI_BUS_ID, where an integer entry of CUDA_VISIBLE_DEVICES is NVML's
    index (both list the devices by bus id); UUID entries are matched by prefix. Returns what was done,
    for the payload; an entry it cannot read (MIG) leaves the variable as it was and says so."""
    if not exclude:
        return ""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # without NVML nothing can be hidden by bus id: the caller skips by ordinal
        return f"not restricted: NVML unavailable ({exc})"
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    uuids = [text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
    buses = [normal_bus(text(pynvml.nvmlDeviceGetPciInfo(h).busId)) for h in handles]
    asked = os.environ.get("CUDA_VISIBLE_DEVICES")
    chosen = list(range(len(handles)))
    if asked is not None:
        chosen = []
        for entry in (e.strip() for e in asked.split(",")):
            if entry.isdigit() and int(entry) < len(handles):
                chosen.append(int(entry))
            elif entry.startswith("GPU-") and any(u.startswith(entry) for u in uuids):
                chosen.append(next(i for i, u in enumerate(uuids) if u.startswith(entry)))
            elif entry:
                return f"not restricted: CUDA_VISIBLE_DEVICES entry {entry[:40]!r} is not a GPU index or UUID"
            else:
                break  # CUDA stops at the first invalid entry
    kept = [i for i in chosen if buses[i] not in exclude]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(uuids[i] for i in kept) if kept else "-1"
    return f"hidden from CUDA: {', '.join(sorted(exclude))}"
