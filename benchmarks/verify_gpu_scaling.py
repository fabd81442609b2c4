"""Where `tunefleet verify --local` spends its time as the GPU count grows (issue 39 item 4): the whole
command on the first 1, 2, ..., N GPUs of this machine, each phase's seconds fitted as a + b x GPUs, and the
projection to 8 GPUs (or --target).

    python3 benchmarks/verify_gpu_scaling.py [--counts 1,2,4] [--runs 1] [--target 8] [--verify-args "..."]

For each count it runs `python3 -m verify verify --local --out <tmp>` (plus --verify-args) with
CUDA_VISIBLE_DEVICES set to the first GPUs in nvidia-smi's order (CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA's
numbering follows the PCI bus as nvidia-smi's does), times it around the subprocess, and reads the
report.json `run` section: every entry of `run["phases"]` (phase name -> seconds; nested dicts are named
outer/inner), `duration_s`, `config_checks_s` and `bench.wall_s`. NVML and nvidia-smi ignore
CUDA_VISIBLE_DEVICES: what they read (the inventory, the health checks) covers every GPU at every count,
so only the CUDA side scales here. Default counts: 1, 2 and N (N = the GPUs nvidia-smi lists). Each phase
is fitted by least squares over every run (pure Python); a phase measured at one count only has no slope and
no projection. Without a GPU it says so and exits 3.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
NO_GPU = 3
WHOLE = "whole command (wall, around the subprocess)"
GPU_LIST_ARGV = ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"]
RUN_TIMEOUT_S = 1800.0


def fit_linear(points: list) -> tuple:
    """Least squares a + b x over [(x, y)]: (a, b); b is None where every x is the same (then a is their
    mean y). Raises ValueError on no points."""
    if not points:
        raise ValueError("no points to fit")
    n = len(points)
    sx = sum(x for x, _ in points)
    sy = sum(y for _, y in points)
    sxx = sum(x * x for x, _ in points)
    sxy = sum(x * y for x, y in points)
    spread = n * sxx - sx * sx
    if spread == 0:
        return sy / n, None
    b = (n * sxy - sx * sy) / spread
    return (sy - b * sx) / n, b


def _number(value) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def phase_seconds(run: dict) -> dict:
    """A report's `run` section -> {phase name: seconds}: run["phases"] (nested dicts named outer/inner),
    duration_s, config_checks_s and bench.wall_s, where each is a number."""
    found: dict = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for name, inner in value.items():
                walk(f"{prefix}/{name}" if prefix else str(name), inner)
        elif _number(value) is not None:
            found[prefix] = _number(value)

    walk("", run.get("phases") or {})
    for name in ("duration_s", "config_checks_s"):
        if _number(run.get(name)) is not None:
            found[name] = _number(run[name])
    bench = run.get("bench")
    if isinstance(bench, dict) and _number(bench.get("wall_s")) is not None:
        found["bench.wall_s"] = _number(bench["wall_s"])
    return found


def scaling_rows(measured: dict, target: int) -> list:
    """measured: {GPU count: [{phase: seconds} per run]} -> [(phase, {count: median seconds}, a, b, projection
    at `target` or None)], the whole command first, then by projection (or the largest measurement), largest
    first."""
    phases = sorted({name for runs in measured.values() for run in runs for name in run})
    rows = []
    for phase in phases:
        points = [(count, run[phase]) for count, runs in measured.items() for run in runs if phase in run]
        medians = {count: statistics.median([run[phase] for run in runs if phase in run])
                   for count, runs in sorted(measured.items()) if any(phase in run for run in runs)}
        a, b = fit_linear(points)
        rows.append((phase, medians, a, b, None if b is None else a + b * target))

    def order(row: tuple) -> tuple:
        phase, medians, _, _, projection = row
        return (phase != WHOLE, -(projection if projection is not None else max(medians.values())))

    return sorted(rows, key=order)


def format_table(rows: list, counts: list, target: int) -> list:
    """The table's lines: a row per phase, seconds per GPU count, the fit, the projection to `target`."""
    name_width = max([len("phase"), *(len(row[0]) for row in rows)])
    head = f"{'phase':<{name_width}} " + " ".join(f"{f'{c} GPU':>9}" for c in counts)
    head += f" {'a s':>8} {'b s/GPU':>8} {f'@{target} GPUs':>9}"
    lines = [head]
    for phase, medians, a, b, projection in rows:
        cells = " ".join(f"{medians[c]:9.2f}" if c in medians else f"{'-':>9}" for c in counts)
        slope = f"{b:8.3f}" if b is not None else f"{'-':>8}"
        ahead = f"{projection:9.2f}" if projection is not None else f"{'-':>9}"
        lines.append(f"{phase:<{name_width}} {cells} {a:8.2f} {slope} {ahead}")
    return lines


def list_gpus(run=subprocess.run) -> tuple:
    """([nvidia-smi GPU indices], why none)."""
    try:
        out = run(GPU_LIST_ARGV, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return [], "nvidia-smi is not installed"
    except subprocess.TimeoutExpired:
        return [], "nvidia-smi did not answer in 60 s"
    if out.returncode != 0:
        said = (out.stderr or out.stdout).strip().splitlines()
        return [], f"nvidia-smi exited {out.returncode}: {said[-1] if said else '(no output)'}"
    indices = [int(line) for line in (line.strip() for line in out.stdout.splitlines()) if line.isdigit()]
    return indices, "" if indices else "nvidia-smi lists no GPU"


def parse_counts(text: Optional[str], available: int) -> list:
    """--counts '1,2,4' (default 1, 2 and every GPU) -> sorted distinct counts; a count above the GPUs here or
    below 1 is refused by name."""
    if not text:
        return sorted({1, min(2, available), available})
    counts = []
    for word in text.split(","):
        if not word.strip().isdigit() or not 1 <= int(word) <= available:
            raise ValueError(f"--counts {text!r}: {word.strip()!r} is not a GPU count from 1 to {available}")
        counts.append(int(word))
    return sorted(set(counts))


def run_once(python: str, indices: list, extra: list) -> tuple:
    """(wall seconds, exit status, report's run section or None, stderr tail) of one verify --local."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(i) for i in indices), CUDA_DEVICE_ORDER="PCI_BUS_ID")
    with tempfile.TemporaryDirectory(prefix="tunefleet-scaling-") as out:
        argv = [python, "-m", "verify", "verify", "--local", "--out", out, *extra]
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, timeout=RUN_TIMEOUT_S)
        wall = time.perf_counter() - start
        try:
            run = json.loads((Path(out) / "report.json").read_text()).get("run")
        except (OSError, ValueError):
            run = None
    return wall, done.returncode, run if isinstance(run, dict) else None, done.stderr[-600:]


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default=None, help="comma list of GPU counts (default 1, 2 and every GPU)")
    parser.add_argument("--runs", type=int, default=1, help="runs per count")
    parser.add_argument("--target", type=int, default=8, help="GPU count to project to")
    parser.add_argument("--verify-args", default="", help="more arguments for verify --local, one string")
    args = parser.parse_args(argv)
    indices, why = list_gpus()
    if not indices:
        print(f"verify_gpu_scaling needs a GPU: {why}", file=sys.stderr)
        return NO_GPU
    try:
        counts = parse_counts(args.counts, len(indices))
        if args.runs < 1 or args.target < 1:
            raise ValueError(f"--runs {args.runs} and --target {args.target} must be at least 1")
    except ValueError as exc:
        parser.error(str(exc))
    extra = shlex.split(args.verify_args)
    measured: dict = {}
    failed = []
    for count in counts:
        for _ in range(args.runs):
            wall, code, run, stderr = run_once(sys.executable, indices[:count], extra)
            print(f"{count} GPU(s): verify --local exited {code} in {wall:.2f} s", flush=True)
            if run is None:
                failed.append(f"{count} GPU(s): no report.json run section (exit {code}): {stderr.strip()[-300:]}")
                continue
            measured.setdefault(count, []).append({WHOLE: wall, **phase_seconds(run)})
    if not measured:
        print("\n".join(failed), file=sys.stderr)
        return 2
    print(f"\nseconds per phase (median of {args.runs} run(s) per count), fit a + b x GPUs, "
          f"projection to {args.target} GPUs:")
    for line in format_table(scaling_rows(measured, args.target), counts, args.target):
        print(line)
    for line in failed:
        print(f"not measured: {line}")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
