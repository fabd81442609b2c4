"""Pieces every benchmark shares: thresholds, judging, retries, progress, engine subprocesses.

A benchmark never runs heavy code in the verify process itself: each engine is a module run as
`python3 -m verify.bench.<engine>` through the node's runner, so the runner's timeout kills the
whole process group of a hung run and keeps what it printed.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from verify.judging.thresholds import Threshold, broken_measurement
from verify.result import CheckResult, Status

RESULT_MARKER = "TUNEFLEET_RESULT "
# Exit status an engine uses for "this node cannot run me" (no torch, no GPU): a SKIP, not an ERROR.
CANNOT_RUN = 3
ROLE = "bench"
GB = 1e9  # nccl-tests, perftest --report_gbits and this package: decimal units


def progress(message: str) -> None:
    """Progress goes to stderr so JSON on stdout stays clean."""
    print(f"[tunefleet bench] {message}", file=sys.stderr, flush=True)


@dataclass
class Try:
    """One attempt of a benchmark: its judged result plus the raw output kept for the report."""

    result: CheckResult
    raw: dict = field(default_factory=dict)


def with_retries(attempt: Callable[[int], Try], tries: int, label: str) -> CheckResult:
    """Pass on the first try that passes; otherwise report the last try. Every try is recorded.

    Benchmarks on shared fabrics wobble (Azure/azurehpc PR #690 added the same policy after
    false failures), so one bad sample is not a verdict, but every sample stays in the report.
    """
    tries = max(1, int(tries))
    record = []
    final: Optional[CheckResult] = None
    for index in range(tries):
        progress(f"{label}: try {index + 1}/{tries}")
        outcome = attempt(index)
        summary = {
            "try": index + 1,
            "status": outcome.result.status.value,
            "observed": outcome.result.observed,
            "reason": outcome.result.reason,
        }
        summary.update(outcome.raw)
        record.append(summary)
        final = outcome.result
        progress(f"{label}: try {index + 1} {final.status.value}: {final.reason}")
        if final.status in (Status.PASS, Status.SKIP):
            break
    assert final is not None
    final.details["tries"] = record
    return final


def result(
    check_id: str,
    status: Status,
    reason: str,
    expected: Any = None,
    observed: Any = None,
    remediation: str = "",
    details: Optional[dict] = None,
) -> CheckResult:
    return CheckResult(
        check_id=check_id,
        role=ROLE,
        status=status,
        expected=expected,
        observed=observed,
        reason=reason,
        remediation=remediation,
        details=dict(details or {}),
    )


def judged(
    check_id: str,
    threshold: Threshold,
    value: float,
    reason: str,
    expected: Any,
    observed: Any,
    remediation: str,
    details: dict,
    note: str = "",
    peak: Optional[float] = None,
    peak_source: str = "",
) -> CheckResult:
    """The value judged against the threshold; the fix is named only when it did not PASS.

    A figure that cannot be real (see broken_measurement) is an ERROR, never a PASS or a FAIL.
    """
    broken = broken_measurement(value, peak, peak_source)
    if broken:
        details = dict(details, physical_peak=peak) if peak is not None else details
        return result(check_id, Status.ERROR, f"{reason}: {broken}", expected, observed,
                      "the benchmark's output is not a real measurement: re-run it and read its raw output", details)
    status, why = threshold.judge(value)
    return result(
        check_id, status, f"{reason}: {why}{note}", expected, observed,
        remediation if status != Status.PASS else "", details,
    )


def tail(text: str, limit: int = 4000) -> str:
    """Partial output kept in a report: the end is where a crash explains itself."""
    return text if len(text) <= limit else "...\n" + text[-limit:]


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def package_parent() -> str:
    return str(Path(__file__).resolve().parent.parent.parent)


# Engines run as root on shared nodes, so nothing of the caller's may choose their code: `-I`
# (isolated: no PYTHON* variables, no user site-packages, no script directory or cwd on sys.path,
# Python 3.4+, unlike -P which needs 3.11) and this bootstrap, which puts back only trusted
# directories (engine_sys_path) by their absolute paths, then runs the module as __main__.
_BOOTSTRAP = ("import runpy, sys; extra = sys.argv[1]; sys.argv = sys.argv[2:]; "
              "sys.path[:] = [p for p in (extra.split(':') if extra else []) + sys.path if p]; "
              "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")
# Engines start in a directory root owns, not wherever verify was started.
ENGINE_CWD = "/"
# What an engine keeps of verify's own environment: the GPU, NCCL and thread settings the operator
# set on purpose (NCCL_NVLS_ENABLE=0 on multi-GPU H200s, CUDA_VISIBLE_DEVICES). Never PYTHONPATH,
# LD_PRELOAD, LD_LIBRARY_PATH, TMPDIR or PATH: those would let the caller pick what root runs.
_KEPT_PREFIXES = ("CUDA_", "NCCL_", "NVIDIA_", "NVSHMEM_", "TORCH_", "GLOO_", "OMP_", "MKL_", "UCX_", "LC_")
_KEPT_NAMES = ("LANG", "TZ", "TERM")


def engine_sys_path() -> list:
    """Absolute directories an engine imports from besides the interpreter's own (which -I keeps,
    a venv's site-packages included): this package's parent, then the directories verify itself
    was started with (a node run's work directory; verify_node_pythonpath, where PyTorch may
    live), each only when no one but root and us can change it (verify.safe_io)."""
    from verify.safe_io import check_dir_trusted

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
    """The whole environment of an engine (it replaces verify's, see verify.runner.CleanEnv):
    the fixed root-owned PATH, root's own HOME, and the operator's GPU/NCCL settings."""
    import pwd

    from verify.runner import CleanEnv
    from verify.safe_io import command_path

    env = CleanEnv({name: value for name, value in os.environ.items()
                    if name.startswith(_KEPT_PREFIXES) or name in _KEPT_NAMES})
    env.update({"PATH": command_path(), "HOME": pwd.getpwuid(os.geteuid()).pw_dir, "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def emit_result(payload: dict) -> None:
    """How an engine hands its measurement back: one marked JSON line on stdout."""
    print(RESULT_MARKER + json.dumps(payload, sort_keys=True), flush=True)


def read_result(stdout: str) -> Optional[dict]:
    """The last marked line of an engine's stdout, or None when it never got that far."""
    found = None
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            try:
                found = json.loads(line[len(RESULT_MARKER) :])
            except json.JSONDecodeError:
                found = None
    return found


def module_available(name: str) -> bool:
    """Whether a module could be imported, without importing it (torch takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def parse_size(text: Any) -> int:
    """Bytes from 4096, '1M', '4G', '512MiB' (K/M/G are binary, as nccl-tests reads them)."""
    if isinstance(text, (int, float)):
        return int(text)
    value = str(text).strip().upper().replace("IB", "").replace("B", "")
    factors = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if value and value[-1] in factors:
            return int(float(value[:-1]) * factors[value[-1]])
        return int(value)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"not a size: {text!r} (use bytes or a K/M/G suffix)") from exc


def human_bytes(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"
