"""How long each scheduler hook takes on this machine (issue 29): `tunefleet check --mode prolog|epilog|
health|npd` against `tunefleet verify --local --no-bench`, in the same run, as the scheduler starts them
(a new process each time: interpreter start, imports, NVML, the kernel log, the checks, the textfile).

    python3 benchmarks/scheduler_modes.py [--runs 100] [--verify-runs 20] [--profile NAME]

Prints p50 / p99 wall seconds per mode over --runs runs (verify over --verify-runs: it is the slow
reference), the budget of each hook (prolog/epilog 0.5 s p99, health 5 s), and, from one in-process run
per mode, where the time goes: NVML's reading per GPU, so the 8-GPU estimate is the 1-GPU time plus
7 x the per-GPU part. State and textfile go to a throwaway directory; nothing is drained (--no-drain).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = {"prolog": 0.5, "epilog": 0.5, "health": 5.0, "npd": 5.0}


def percentile(values: list, pct: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(pct / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def timed(argv: list, runs: int) -> tuple:
    """(wall seconds per run, exit codes seen)."""
    times, codes = [], set()
    subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # warm: not counted
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - start)
        codes.add(done.returncode)
        if done.returncode not in (0, 1, 3):
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-800:]}")
    return times, codes


def nvml_per_gpu() -> tuple:
    """(GPUs, seconds of one in-process NVML reading, seconds per GPU beyond the session's own cost)."""
    sys.path.insert(0, str(REPO))
    from verify.scheduler import nvml

    start = time.perf_counter()
    driver, raw = nvml.read_raw()
    whole = time.perf_counter() - start
    if driver is None:
        return 0, whole, 0.0
    import pynvml

    pynvml.nvmlInit()
    try:
        start = time.perf_counter()
        pynvml.nvmlDeviceGetCount()
        init_only = time.perf_counter() - start
    finally:
        pynvml.nvmlShutdown()
    return len(raw), whole, max(0.0, (whole - init_only)) / max(1, len(raw))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--verify-runs", type=int, default=20)
    parser.add_argument("--profile", default=None,
                        help="hardware profile for the desired state (default: role defaults)")
    args = parser.parse_args()
    python = sys.executable
    chosen = ["--profile", args.profile] if args.profile else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="tunefleet-bench-") as scratch:
        os.chmod(scratch, 0o700)
        for mode in ("prolog", "epilog", "health", "npd"):
            argv = [python, "-m", "verify", "check", "--mode", mode, "--no-drain", *chosen,
                    "--state-dir", f"{scratch}/state", "--textfile-dir", f"{scratch}/textfile"]
            times, codes = timed(argv, args.runs)
            rows.append((mode, times, codes))
        argv = [python, "-m", "verify", "verify", "--local", "--no-bench", "--no-history", "--quiet", *chosen,
                "--format", "json", "--out", f"{scratch}/reports"]
        rows.append(("verify --local --no-bench", *timed(argv, args.verify_runs)))
        prom_lines = Path(f"{scratch}/textfile/tunefleet_health.prom").read_text().count("\n")
    gpus, nvml_s, per_gpu_s = nvml_per_gpu()
    print(f"{'mode':28} {'runs':>5} {'p50 s':>8} {'p99 s':>8} {'budget':>7}  exit codes")
    for mode, times, codes in rows:
        budget = BUDGET_S.get(mode)
        p99 = percentile(times, 99)
        verdict = "" if budget is None else ("ok" if p99 <= budget else "OVER")
        print(f"{mode:28} {len(times):5d} {statistics.median(times):8.3f} {p99:8.3f} "
              f"{(f'{budget:g}' if budget else '-'):>7}  {sorted(codes)} {verdict}")
    print(f"health textfile: {prom_lines} lines")
    if gpus:
        prolog_p99 = percentile(rows[0][1], 99)
        print(f"NVML in-process reading: {nvml_s:.4f} s for {gpus} GPU(s), ~{per_gpu_s:.4f} s per GPU")
        print(f"8-GPU estimate: prolog p99 ~ {prolog_p99 + (8 - gpus) * per_gpu_s:.3f} s "
              f"(this machine's p99 + {8 - gpus} x the per-GPU NVML time; the kernel log and the config checks "
              "do not grow with GPUs, NVLink/IB in health grow with links and ports)")
    else:
        print(f"NVML: not available here ({nvml_s:.4f} s to find out): the modes used nvidia-smi or no GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
