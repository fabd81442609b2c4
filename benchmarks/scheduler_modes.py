"""How long each scheduler hook takes on this machine (issue 29): `tunefleet check --mode prolog|epilog|
health|npd` against `tunefleet verify --local --no-bench`, in the same run, as the scheduler starts them
(a new process each time: interpreter start, imports, NVML, the kernel log, the checks, the textfile).

    python3 benchmarks/scheduler_modes.py [--runs 100] [--verify-runs 20] [--profile NAME]

The modes get `--spec FILE` as the installed hooks do (roles/scheduler_hooks renders it at install); one
more row runs the prolog without --spec, from the state directory's cached rendering (the first run of
that row renders and is not counted). Prints p50 / p99 wall seconds per mode over --runs runs (verify
over --verify-runs: it is the slow reference) and the budget of each hook (prolog/epilog 0.5 s p99,
health 5 s).

NVML, timed by itself in this process over --nvml-runs fresh sessions: the pynvml import, nvmlInit, the
driver version and GPU count, each GPU's readings (verify.scheduler.nvml.read_gpu: the handle and every
query the prolog makes) and nvmlShutdown. Only the per-GPU part grows with the GPUs, so the 8-GPU
estimate is this machine's prolog p99 plus (8 - GPUs here) x the per-GPU p99. State and textfile go to a
throwaway directory; nothing is drained (--no-drain).
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
BUDGET_S = {"prolog": 0.5, "epilog": 0.5, "health": 5.0, "npd": 5.0, "prolog, no --spec (cached)": 0.5}


def percentile(values: list, pct: float) -> float:
    """Nearest-rank percentile of the values."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(pct / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def timed(argv: list, runs: int) -> tuple:
    """(wall seconds per run, exit codes seen); one warm-up run first, not counted."""
    times, codes = [], set()
    subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - start)
        codes.add(done.returncode)
        if done.returncode not in (0, 1, 3):
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-800:]}")
    return times, codes


def nvml_timings(sessions: int) -> dict:
    """Seconds of each part of the prolog's NVML reading, each in its own fresh session; {} without NVML.

    Keys: import_s (once), and lists init_s, system_s (driver version + count), gpu_s (one entry per GPU
    per session: read_gpu alone), shutdown_s; gpus: how many GPUs NVML lists; error: why not measured."""
    sys.path.insert(0, str(REPO))
    from verify.scheduler import nvml

    start = time.perf_counter()
    try:
        import pynvml  # the benchmark that needs NVML imports it (verify's node side never does at start)
    except ImportError:
        return {"error": "pynvml is not installed"}
    timings: dict = {"import_s": time.perf_counter() - start, "init_s": [], "system_s": [], "gpu_s": [],
                     "shutdown_s": [], "gpus": 0}
    for _ in range(sessions):
        start = time.perf_counter()
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return {"error": f"NVML did not initialise: {exc}"}
        try:
            timings["init_s"].append(time.perf_counter() - start)
            start = time.perf_counter()
            pynvml.nvmlSystemGetDriverVersion()
            count = pynvml.nvmlDeviceGetCount()
            timings["system_s"].append(time.perf_counter() - start)
            timings["gpus"] = count
            for index in range(count):
                start = time.perf_counter()
                nvml.read_gpu(pynvml, index)
                timings["gpu_s"].append(time.perf_counter() - start)
        finally:
            start = time.perf_counter()
            pynvml.nvmlShutdown()
            timings["shutdown_s"].append(time.perf_counter() - start)
    return timings


def report_nvml(timings: dict, prolog_p99: float) -> list:
    if timings.get("error") or not timings.get("gpus"):
        return [f"NVML: not measured here ({timings.get('error') or 'NVML lists no GPU'}): the modes used "
                "nvidia-smi or saw no GPU; no 8-GPU estimate from this machine"]
    gpus, per_gpu = timings["gpus"], timings["gpu_s"]

    def ms(values: list) -> str:
        return f"p50 {statistics.median(values) * 1e3:.2f} ms, p99 {percentile(values, 99) * 1e3:.2f} ms"

    per_gpu_p99 = percentile(per_gpu, 99)
    return [
        f"NVML ({gpus} GPU(s), {len(timings['init_s'])} fresh sessions): import pynvml "
        f"{timings['import_s'] * 1e3:.1f} ms (once); nvmlInit {ms(timings['init_s'])}; "
        f"driver + count {ms(timings['system_s'])}; shutdown {ms(timings['shutdown_s'])}",
        f"NVML per GPU (handle + every prolog query, read_gpu): {ms(per_gpu)} over {len(per_gpu)} readings",
        f"8-GPU estimate: prolog p99 ~ {prolog_p99 + (8 - gpus) * per_gpu_p99:.3f} s = this machine's p99 "
        f"{prolog_p99:.3f} s + {8 - gpus} x the per-GPU p99 {per_gpu_p99 * 1e3:.2f} ms (import, init and "
        "shutdown are paid once whatever the count; the kernel log and the config checks do not grow with "
        "GPUs; in health the NVLink and IB checks grow with links and ports). An upper bound: the prolog reads "
        "the GPUs in parallel threads, which only a machine with 8 GPUs can show",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--verify-runs", type=int, default=20)
    parser.add_argument("--nvml-runs", type=int, default=20, help="fresh NVML sessions timed in-process")
    parser.add_argument("--profile", default=None,
                        help="hardware profile for the desired state (default: role defaults)")
    args = parser.parse_args()
    python = sys.executable
    chosen = ["--profile", args.profile] if args.profile else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="tunefleet-bench-") as scratch:
        os.chmod(scratch, 0o700)
        spec_file = f"{scratch}/desired_state.json"
        rendered = subprocess.run([python, "-m", "verify", "spec", *chosen], cwd=REPO, capture_output=True, text=True)
        if rendered.returncode:
            raise SystemExit(f"tunefleet spec failed: {rendered.stderr[-800:]}")
        Path(spec_file).write_text(rendered.stdout)
        hook = ["--no-drain", "--state-dir", f"{scratch}/state", "--textfile-dir", f"{scratch}/textfile"]
        for mode in ("prolog", "epilog", "health", "npd"):
            argv = [python, "-m", "verify", "check", "--mode", mode, "--spec", spec_file, *hook]
            rows.append((mode, *timed(argv, args.runs)))
        argv = [python, "-m", "verify", "check", "--mode", "prolog", *chosen, *hook]
        rows.append(("prolog, no --spec (cached)", *timed(argv, args.runs)))
        argv = [python, "-m", "verify", "verify", "--local", "--no-bench", "--no-history", "--quiet", "--spec",
                spec_file, "--format", "json", "--out", f"{scratch}/reports"]
        rows.append(("verify --local --no-bench", *timed(argv, args.verify_runs)))
        prom_lines = Path(f"{scratch}/textfile/tunefleet_health.prom").read_text().count("\n")
    print(f"{'mode':28} {'runs':>5} {'p50 s':>8} {'p99 s':>8} {'budget':>7}  exit codes")
    for mode, times, codes in rows:
        budget = BUDGET_S.get(mode)
        p99 = percentile(times, 99)
        verdict = "" if budget is None else ("ok" if p99 <= budget else "OVER")
        print(f"{mode:28} {len(times):5d} {statistics.median(times):8.3f} {p99:8.3f} "
              f"{(f'{budget:g}' if budget else '-'):>7}  {sorted(codes)} {verdict}")
    print(f"health textfile: {prom_lines} lines")
    for line in report_nvml(nvml_timings(args.nvml_runs), percentile(rows[0][1], 99)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
