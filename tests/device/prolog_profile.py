"""Where one prolog's time goes on a GPU node (issue 39): `tunefleet check --mode prolog` run in-process under
cProfile as the installed hook runs it (--spec, a state directory and a textfile directory, each new and
private), after one unprofiled run that made the state; prints the largest cumulative and own times.

    python3 tests/device/prolog_profile.py [RUNS]
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from verify.cli import main  # noqa: E402


def hook_argv(scratch: str) -> list:
    spec = f"{scratch}/desired_state.json"
    if not Path(spec).exists():
        Path(spec).write_text(subprocess.run([sys.executable, "-m", "verify", "spec"], cwd=REPO, check=True,
                                             capture_output=True, text=True).stdout)
    return ["check", "--mode", "prolog", "--spec", spec, "--no-drain", "--state-dir", f"{scratch}/state",
            "--textfile-dir", f"{scratch}/textfile"]


def best_ms(call, repeats: int = 15) -> str:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    times.sort()
    return f"min {times[0] * 1e3:.2f} / median {times[len(times) // 2] * 1e3:.2f} ms"


def steps(scratch: str) -> None:
    """The prolog's own steps timed without the profiler (its per-call cost distorts small functions)."""
    from verify.safe_io import open_trusted_dir, write_in_dir
    from verify.scheduler import kernel_events, state

    cursor = state.load(f"{scratch}/state")[0].kernel_uptime_s
    print(f"kmsg from boot: {best_ms(lambda: kernel_events.read_kmsg(None))} "
          f"({kernel_events.read_kmsg(None).records} kernel records)")
    print(f"kmsg after the cursor: {best_ms(lambda: kernel_events.read_kmsg(cursor))}")
    saved = Path(f"{scratch}/state/{state.FILE_NAME}")
    payload = saved.read_bytes() if saved.exists() else b"x" * 4096
    for where in (f"{scratch}/state", "/run"):
        fd = open_trusted_dir(where)
        try:
            for durable in (True, False):
                def write(fd=fd, durable=durable) -> None:
                    write_in_dir(fd, "tunefleet-profile-probe", payload, durable=durable)

                print(f"write {len(payload)} bytes in {where} (durable={durable}): {best_ms(write)}")
            os.unlink("tunefleet-profile-probe", dir_fd=fd)
        finally:
            os.close(fd)


# A fresh interpreter started as the hooks' launcher starts it (-I -S, the import directories found, the process
# ended with os._exit as verify.isolated.end_now ends it), stamping the wall clock when its first line runs, when
# the prolog forked its NVML reading (verify.scheduler.nvml.Reading), when it began to wait for the answer, when
# the answer came and when the prolog returned; the parent stamps the start and the end. Between the fork and
# the wait the prolog imports its checks and reads the kernel log while the child reads NVML: a long "wait"
# says NVML is the longer of the two.
STAGED = ("import time; began = time.time(); import os, sys; sys.path[0:0] = [sys.argv[1], *sys.argv[2].split(':')]; "
          "import verify.cli; from verify.scheduler import nvml; marks = {}; start, answer = nvml.Reading.__init__, "
          "nvml.Reading.answer\n"
          "def forked(self, *args):\n    marks['fork'] = time.time(); start(self, *args)\n"
          "def answered(self):\n    marks['wait'] = time.time(); got = answer(self); marks['answer'] = time.time(); "
          "return got\n"
          "nvml.Reading.__init__, nvml.Reading.answer = forked, answered; code = verify.cli.main(sys.argv[3:]); "
          "done = time.time(); stamps = ' '.join(str(marks.get(k, 0.0)) for k in ('fork', 'wait', 'answer')); "
          "sys.stderr.write(f'STAGES {began} {stamps} {done}\\n'); sys.stderr.flush(); os._exit(code)")


def fresh_stages(argv: list, runs: int) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scheduler_modes import hook_launch

    launch = hook_launch(sys.executable)
    python, parent, extra = launch[0], launch[4], launch[5]
    stages: dict = {"start": [], "to fork": [], "fork to wait": [], "wait": [], "after the answer": [], "exit": [],
                    "whole": []}
    for _ in range(runs):
        spawned = time.time()
        done = subprocess.run([python, "-IS", "-c", STAGED, parent, extra, *argv], capture_output=True, text=True)
        ended = time.time()
        line = next((x for x in done.stderr.splitlines() if x.startswith("STAGES ")), None)
        if line is None:
            print(f"fresh process: no stages ({done.returncode}): {done.stderr[-400:]}")
            return
        began, fork, wait, answer, finished = map(float, line.split()[1:])
        for key, value in (("start", began - spawned), ("to fork", fork - began), ("fork to wait", wait - fork),
                           ("wait", answer - wait), ("after the answer", finished - answer),
                           ("exit", ended - finished), ("whole", ended - spawned)):
            stages[key].append(value * 1e3)
    print(f"fresh prolog processes ({runs}), ms p50 / max: " + ", ".join(
        f"{key} {sorted(v)[len(v) // 2]:.1f} / {max(v):.1f}" for key, v in stages.items()))


def run() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory(prefix="tunefleet-profile-") as scratch:
        argv = hook_argv(scratch)
        main(argv)  # the first run makes the state and reads the whole kernel log
        steps(scratch)
        fresh_stages(argv, 30)
        profile = cProfile.Profile()
        walls = []
        for _ in range(runs):
            began = time.perf_counter()
            profile.runcall(main, argv)
            walls.append(time.perf_counter() - began)
        print(f"in-process prolog, imports done: {', '.join(f'{w * 1e3:.1f}' for w in walls)} ms")
        for key in ("cumulative", "tottime"):
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats(key).print_stats(28)
            print(f"== by {key} over {runs} runs")
            print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:6000])


if __name__ == "__main__":
    run()
