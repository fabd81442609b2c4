"""How long each scheduler hook takes on this machine (issue 29): `tunefleet check --mode prolog|epilog|
health|npd` against `tunefleet verify --local --no-bench`, in the same run, as the scheduler starts them
(a new process each time: interpreter start, imports, NVML, the kernel log, the checks, the textfile).

    python3 benchmarks/scheduler_modes.py [--runs 100] [--verify-runs 20] [--profile NAME] [--busy]

Each hook starts as the installed launcher starts it (roles/scheduler_hooks, tunefleet-check: the interpreter
with -I -S, importing only verify and the directories of pynvml, jinja2, markupsafe and yaml); one more row
starts the prolog as `python -m verify`, site-packages' .pth files included, as the tunefleet command does.
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

--busy (issue 39 item 5): the same timings while a job holds nearly all memory of every GPU (torch: ~90 % of
each GPU's free memory) and keeps each computing (a BF16 matmul loop), as a HealthCheckProgram meets a node
in use. While the hooks run, `nvidia-smi --query-compute-apps` is sampled in a loop: a hook that created a
CUDA context (or started a process that did) would be listed, so the run reports every listed pid that is a
hook's or a hook's descendant (exit 1 if any). The job is stopped with SIGTERM and says how it ended.
Without a GPU (no nvidia-smi, no GPU listed, no torch with CUDA) it says "--busy needs a GPU" and exits 3.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from verify.isolated import HOOK_BOOTSTRAP, HOOK_MODULES, import_entries  # noqa: E402

HOOK_IMPORTS = tuple(name for name in HOOK_MODULES if name != "verify")  # verify comes from this checkout
BUDGET_S = {"prolog": 0.5, "epilog": 0.5, "health": 5.0, "npd": 5.0, "prolog, no --spec (cached)": 0.5,
            "prolog, python -m (site)": 0.5}
NO_GPU = 3  # --busy without a GPU
BUSY_FRACTION = 0.9  # of each GPU's free memory the busy job holds
MATMUL_N = 8192  # the busy job's BF16 matmul: 1.1 TFLOP a launch, milliseconds on an H100
SYNC_EVERY = 8  # launches queued per GPU before the busy job waits for them
READY_TIMEOUT_S = 300.0  # torch import + a context and an allocation on every GPU
GPU_LIST_ARGV = ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"]
COMPUTE_APPS_ARGV = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]


def percentile(values: list, pct: float) -> float:
    """Nearest-rank percentile of the values."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(pct / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def timed(argv: list, runs: int, pids: Optional[set] = None) -> tuple:
    """(wall seconds per run, exit codes seen); one warm-up run first, not counted. `pids` collects each
    run's process id (--busy compares them with the compute apps nvidia-smi lists)."""
    times, codes = [], set()
    for run in range(runs + 1):
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if pids is not None:
            pids.add(proc.pid)
        _, stderr = proc.communicate()
        if run == 0:
            continue  # the warm-up
        times.append(time.perf_counter() - start)
        codes.add(proc.returncode)
        if proc.returncode not in (0, 1, 3) + ((2,) if "npd" in argv else ()):  # npd: 2 is "unknown" (an ERROR)
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {stderr[-800:]}")
    return times, codes


# ---- --busy: a job on every GPU while the hooks run -------------------------------------------------------

def count_gpus(run=subprocess.run) -> tuple:
    """(GPUs nvidia-smi lists, why none)."""
    try:
        out = run(GPU_LIST_ARGV, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return 0, "nvidia-smi is not installed"
    except subprocess.TimeoutExpired:
        return 0, "nvidia-smi did not answer in 60 s"
    if out.returncode != 0:
        said = (out.stderr or out.stdout).strip().splitlines()
        return 0, f"nvidia-smi exited {out.returncode}: {said[-1] if said else '(no output)'}"
    count = sum(1 for line in out.stdout.splitlines() if line.strip().isdigit())
    return count, "" if count else "nvidia-smi lists no GPU"


def parse_compute_apps(text: str) -> list:
    """`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader` -> [(pid, name,
    used memory as printed)]; lines that are not such a row (a "No running processes found" note) are skipped."""
    apps = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            apps.append((int(parts[0]), ",".join(parts[1:-1]), parts[-1]))
    return apps


def parent_chain(pid: int, proc_root: str = "/proc") -> list:
    """The pids above `pid` (its parent, the parent's parent, ... up to init), from /proc/<pid>/status."""
    chain = []
    while pid > 1 and len(chain) < 64:
        try:
            with open(f"{proc_root}/{pid}/status", encoding="utf-8", errors="replace") as status:
                ppid = next((int(line.split()[1]) for line in status if line.startswith("PPid:")), 0)
        except (OSError, ValueError, IndexError):
            break
        if ppid <= 0:
            break
        chain.append(ppid)
        pid = ppid
    return chain


def hooks_among_apps(seen: dict, hook_pids: set) -> list:
    """[(pid, name, the hook pid it is or descends from)] of the compute apps seen: `seen` is pid -> (name,
    parent chain when first seen). Empty: no hook process ever held a CUDA context."""
    found = []
    for pid, (name, parents) in sorted(seen.items()):
        hook = pid if pid in hook_pids else next((p for p in parents if p in hook_pids), None)
        if hook is not None:
            found.append((pid, name, hook))
    return found


class ComputeAppsSampler(threading.Thread):
    """Runs COMPUTE_APPS_ARGV in a loop until stopped; keeps every pid listed with its name and parent chain."""

    def __init__(self, interval_s: float = 0.0):
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.stop = threading.Event()
        self.samples = 0
        self.seen: dict = {}
        self.failures: list = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                out = subprocess.run(COMPUTE_APPS_ARGV, capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.failures.append(str(exc))
                self.stop.wait(1.0)
                continue
            if out.returncode != 0:
                self.failures.append(f"exit {out.returncode}: {(out.stderr or out.stdout).strip()[-200:]}")
            self.samples += 1
            for pid, name, _ in parse_compute_apps(out.stdout):
                if pid not in self.seen:
                    self.seen[pid] = (name, parent_chain(pid))
            self.stop.wait(self.interval_s)


def hold_gpus(fraction: float) -> int:
    """The busy job (run as `scheduler_modes.py --hold-gpus F`): a matmul buffer set and a block of F x the
    free memory on every GPU, then BF16 matmuls on each until SIGTERM. Prints one "READY {json}" line."""
    try:
        import torch  # the busy job is the one process here that must hold CUDA contexts
    except ImportError as exc:
        print(f"torch is not importable: {exc}", file=sys.stderr)
        return NO_GPU
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print("torch sees no CUDA device", file=sys.stderr)
        return NO_GPU
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    work, held, report = [], [], {"gpus": torch.cuda.device_count(), "held_mib": [], "total_mib": []}
    for device in range(torch.cuda.device_count()):
        with torch.cuda.device(device):
            a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
            b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
            out = torch.empty(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
            free, total = torch.cuda.mem_get_info(device)
            size = int(free * fraction)
            while True:  # one block; a fragmented device gets a slightly smaller one
                try:
                    held.append(torch.empty(size, dtype=torch.uint8, device=device))
                    break
                except torch.cuda.OutOfMemoryError:
                    size = int(size * 0.95)
                    if size < (1 << 30):
                        raise
            work.append((device, a, b, out))
            report["held_mib"].append(round(size / 2**20))
            report["total_mib"].append(round(total / 2**20))
    print("READY " + json.dumps(report), flush=True)
    rounds = 0
    while not stop.is_set():
        for device, a, b, out in work:
            with torch.cuda.device(device):
                torch.matmul(a, b, out=out)
        rounds += 1
        if rounds % SYNC_EVERY == 0:
            for device, *_ in work:
                torch.cuda.synchronize(device)
    for device, *_ in work:
        torch.cuda.synchronize(device)
    print(f"STOPPED after {rounds} matmul rounds on every GPU", flush=True)
    return 0


class BusyJob:
    """The busy job as a child process: started, waited on until READY, stopped with SIGTERM."""

    def __init__(self, python: str, fraction: float):
        self.proc = subprocess.Popen([python, str(Path(__file__).resolve()), "--hold-gpus", str(fraction)],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list = []
        self.errors: list = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.errors), daemon=True).start()

    def _read(self, stream, into: list) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))
            if line.startswith("READY "):
                self.ready.set()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> Optional[dict]:
        """The job's READY report, or None when it exited or hung first (stderr_tail says why)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None and not self.ready.is_set():
            self.ready.wait(0.2)
        if not self.ready.is_set():
            return None
        return json.loads(next(line for line in self.lines if line.startswith("READY "))[len("READY "):])

    def stop(self) -> str:
        """SIGTERM, then how it ended ("STOPPED after ..." and its exit status, or that it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "did not stop within 60 s of SIGTERM: killed"
        time.sleep(0.1)  # the reader threads take the last lines
        said = next((line for line in self.lines if line.startswith("STOPPED")), "no STOPPED line")
        return f"{said}; exit {self.proc.returncode}"

    def stderr_tail(self) -> str:
        return " | ".join(self.errors[-3:]) or "(nothing on stderr)"


def report_busy(job: dict, ended: str, sampler: ComputeAppsSampler, hook_pids: set, job_pid: int) -> tuple:
    """(lines, hook processes seen) of a --busy run."""
    held = ", ".join(f"{h}/{t} MiB" for h, t in zip(job["held_mib"], job["total_mib"]))
    lines = [f"busy job (pid {job_pid}): {job['gpus']} GPU(s), held {held}, a BF16 {MATMUL_N}^2 matmul loop on each; "
             f"{ended}"]
    hooks = hooks_among_apps(sampler.seen, hook_pids)
    others = sorted(pid for pid in sampler.seen if pid != job_pid and pid not in {h[0] for h in hooks})
    listed = sorted(sampler.seen)
    lines.append(f"compute apps: {sampler.samples} samples of `{' '.join(COMPUTE_APPS_ARGV)}` while {len(hook_pids)} "
                 f"hook processes ran; pids listed {listed}" + (f" (not ours: {others})" if others else ""))
    if sampler.failures:
        lines.append(f"compute apps: {len(sampler.failures)} samples failed, last: {sampler.failures[-1]}")
    if hooks:
        lines += [f"HOOK PROCESS HELD A CUDA CONTEXT: pid {pid} ({name}), " +
                  ("a hook itself" if pid == hook else f"started under hook pid {hook}") for pid, name, hook in hooks]
    else:
        lines.append("no hook process (nor any process a hook started) ever appeared among the compute apps")
    if sampler.samples == 0:
        lines.append("compute apps were never read: nothing is shown about the hooks' contexts")
    return lines, hooks


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


def hook_launch(python: str) -> list:
    """The command line of the installed hooks' launcher (roles/scheduler_hooks, tunefleet-check.j2): this
    interpreter isolated and without site, importing verify from this checkout and the rest from where this
    interpreter finds them (verify.isolated.import_entries, as the role asks at install)."""
    entries = import_entries(HOOK_IMPORTS)  # this process runs `python`: it finds what the hooks' python finds
    extra = [entries[name] for name in HOOK_IMPORTS if name in entries]
    return [python, "-IS", "-c", HOOK_BOOTSTRAP, str(REPO), ":".join(dict.fromkeys(extra))]


def time_modes(args: argparse.Namespace, python: str, pids: Optional[set]) -> tuple:
    """(rows of (name, times, exit codes), lines of the health textfile): every hook as the installed launcher
    starts it, the prolog once more as `python -m verify` (the tunefleet command's start, site included), then
    verify as reference."""
    chosen = ["--profile", args.profile] if args.profile else []
    launch = hook_launch(python)
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
            argv = [*launch, "check", "--mode", mode, "--spec", spec_file, *hook]
            rows.append((mode, *timed(argv, args.runs, pids)))
        argv = [*launch, "check", "--mode", "prolog", *chosen, *hook]
        rows.append(("prolog, no --spec (cached)", *timed(argv, args.runs, pids)))
        argv = [python, "-m", "verify", "check", "--mode", "prolog", "--spec", spec_file, *hook]
        rows.append(("prolog, python -m (site)", *timed(argv, args.runs, pids)))
        if args.verify_runs:
            argv = [python, "-m", "verify", "verify", "--local", "--no-bench", "--no-history", "--quiet", "--spec",
                    spec_file, "--format", "json", "--out", f"{scratch}/reports"]
            rows.append(("verify --local --no-bench", *timed(argv, args.verify_runs, pids)))
        prom_lines = Path(f"{scratch}/textfile/tunefleet_health.prom").read_text().count("\n")
    return rows, prom_lines


def print_rows(rows: list, prom_lines: int, title: str) -> None:
    print(title)
    print(f"{'mode':28} {'runs':>5} {'p50 s':>8} {'p99 s':>8} {'budget':>7}  exit codes")
    for mode, times, codes in rows:
        budget = BUDGET_S.get(mode)
        p99 = percentile(times, 99)
        verdict = "" if budget is None else ("ok" if p99 <= budget else "OVER")
        print(f"{mode:28} {len(times):5d} {statistics.median(times):8.3f} {p99:8.3f} "
              f"{(f'{budget:g}' if budget else '-'):>7}  {sorted(codes)} {verdict}")
    print(f"health textfile: {prom_lines} lines")


def run_busy(args: argparse.Namespace, python: str) -> int:
    gpus, why = count_gpus()
    if not gpus:
        print(f"--busy needs a GPU: {why}", file=sys.stderr)
        return NO_GPU
    job = BusyJob(python, args.busy_fraction)
    ready = job.wait_ready()
    if ready is None:
        ended = job.stop()
        code = job.proc.returncode
        print(f"--busy needs a GPU: the busy job did not start ({ended}): {job.stderr_tail()}", file=sys.stderr)
        return NO_GPU if code == NO_GPU else 2
    sampler = ComputeAppsSampler()
    hook_pids: set = set()
    sampler.start()
    try:
        rows, prom_lines = time_modes(args, python, hook_pids)
    finally:
        sampler.stop.set()
        sampler.join(timeout=60)
        ended = job.stop()
    print_rows(rows, prom_lines, f"busy: every GPU held and computing ({gpus} GPU(s) listed by nvidia-smi)")
    lines, hooks = report_busy(ready, ended, sampler, hook_pids, job.proc.pid)
    for line in lines:
        print(line)
    for line in report_nvml(nvml_timings(args.nvml_runs), percentile(rows[0][1], 99)):
        print(line)
    return 1 if hooks else 0


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--verify-runs", type=int, default=20, help="0: no verify --local row")
    parser.add_argument("--nvml-runs", type=int, default=20, help="fresh NVML sessions timed in-process")
    parser.add_argument("--profile", default=None,
                        help="hardware profile for the desired state (default: role defaults)")
    parser.add_argument("--busy", action="store_true",
                        help="time the hooks while a job holds ~90%% of every GPU's memory and keeps it computing")
    parser.add_argument("--busy-fraction", type=float, default=BUSY_FRACTION, help=argparse.SUPPRESS)
    parser.add_argument("--hold-gpus", type=float, default=None, help=argparse.SUPPRESS)  # the busy job itself
    args = parser.parse_args(argv)
    if args.hold_gpus is not None:
        return hold_gpus(args.hold_gpus)
    if args.runs < 1 or args.verify_runs < 0 or not 0.0 < args.busy_fraction < 1.0:
        parser.error(f"--runs {args.runs} must be >= 1, --verify-runs {args.verify_runs} >= 0 (and the busy "
                     f"fraction {args.busy_fraction} between 0 and 1)")
    python = sys.executable
    # As roles/scheduler_hooks installs the hooks: byte-compiled, so no run compiles verify (where
    # PYTHONDONTWRITEBYTECODE is set, an uncompiled tree cost the prolog ~0.1 s of compiling on 4x H200).
    # pynvml too (every hook imports it): a venv installed with --no-compile has no bytecode for it; on 4x H200
    # its import took 16 ms compiled, 74 ms under -X importtime uncompiled (the prolog's p99 moved within noise).
    nvml = subprocess.run([python, "-I", "-c", "import pynvml; print(pynvml.__file__)"], capture_output=True,
                          text=True, check=False).stdout.strip()
    subprocess.run([python, "-I", "-m", "compileall", "-q", str(REPO / "verify"), *([nvml] if nvml else [])],
                   check=False, stdout=subprocess.DEVNULL)
    if args.busy:
        return run_busy(args, python)
    rows, prom_lines = time_modes(args, python, None)
    print_rows(rows, prom_lines, "idle")
    for line in report_nvml(nvml_timings(args.nvml_runs), percentile(rows[0][1], 99)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
