"""Running an engine: a module of this package run as its own process, isolated, that hands back one
marked JSON line.

Anything that must import torch (or other heavy, crash-prone code) runs as an engine, never in the
verify process: `engine_argv` runs the module with the same interpreter under `-I`, `engine_env` gives
it the allow-listed environment, and the node's runner kills its whole process group when it hangs,
keeping what it printed. The engine prints `RESULT_MARKER` + JSON (`emit_result`) or exits `CANNOT_RUN`
when the node cannot run it (no torch, no GPU: a SKIP, never an ERROR); the caller finds the line with
`read_result` and checks it against the engine's PAYLOAD_SCHEMA (`checked_payload`) before reading a
field. Benchmarks (verify.bench) and facts (verify.facts.peer_access) both run engines, so this lives
in the runner layer, below both.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
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


# ---- engine payload schemas ---------------------------------------------------------------------
# The one check at the boundary where an engine's JSON enters verify: each engine module declares
# PAYLOAD_SCHEMA, a dict of field -> what it holds: a type or a tuple of types (NUMBER is int or
# float, never bool), a nested schema (a dict), ListOf(item) for a list of items, Maybe(spec) for a
# field that may be absent or null. Judges then read fields without meeting KeyError or TypeError.
NUMBER = (int, float)


@dataclass(frozen=True)
class ListOf:
    item: Any
    may_be_empty: bool = False


@dataclass(frozen=True)
class Maybe:
    spec: Any


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}")


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def schema_problems(value: Any, spec: Any, where: str = "") -> list:
    """Every way `value` differs from `spec`, each naming the field: ["rows[2].busbw_gbps: missing"]."""
    here = where or "the payload"
    if isinstance(spec, Maybe):
        return [] if value is None else schema_problems(value, spec.spec, where)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return [f"{here}: expected an object, got {_kind(value)}"]
        found = []
        for name, inner in spec.items():
            if name in value:
                found += schema_problems(value[name], inner, _join(where, name))
            elif not isinstance(inner, Maybe):
                found.append(f"{_join(where, name)}: missing")
        return found
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            return [f"{here}: expected a list, got {_kind(value)}"]
        if not value and not spec.may_be_empty:
            return [f"{here}: empty list"]
        found = []
        for index, item in enumerate(value):
            found += schema_problems(item, spec.item, f"{where}[{index}]")
        return found
    types = spec if isinstance(spec, tuple) else (spec,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        return [f"{here}: expected {' or '.join(t.__name__ for t in types)}, got {_kind(value)}"]
    return []


def checked_payload(payload: Any, schema: dict) -> tuple:
    """(payload fit to judge or None, problems) at the boundary where an engine's result enters.

    A list of objects at the top level (rows, gpus) keeps its well-formed items, so they are still
    judged: only the malformed ones are dropped, each named in the problems. Any other field that
    is missing or of the wrong type leaves nothing safe to judge (None).
    """
    if not isinstance(payload, dict):
        return None, schema_problems(payload, schema)
    kept, problems, fatal = dict(payload), [], False
    for name, spec in schema.items():
        rows = spec.spec if isinstance(spec, Maybe) and isinstance(payload.get(name), list) else spec
        if isinstance(rows, ListOf) and isinstance(rows.item, dict) and isinstance(payload.get(name), list):
            good = []
            for index, item in enumerate(payload[name]):
                wrong = schema_problems(item, rows.item, f"{name}[{index}]")
                problems += wrong
                if not wrong:
                    good.append(item)
            kept[name] = good
            if not payload[name] and not rows.may_be_empty:
                problems.append(f"{name}: empty list")
                fatal = True
            elif not good and payload[name]:
                fatal = True
            continue
        wrong = schema_problems(payload.get(name), spec, name) if name in payload else (
            [] if isinstance(spec, Maybe) else [f"{name}: missing"])
        problems += wrong
        fatal = fatal or bool(wrong)
    return (None if fatal else kept), problems


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
