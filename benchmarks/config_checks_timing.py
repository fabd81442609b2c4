"""How long the config checks take on this machine, next to `ansible localhost -m setup`.

    python benchmarks/config_checks_timing.py [--vars inventory/local/group_vars/all.yml] [--runs 5]

Prints the median of: the checks alone (in-process, after imports), a whole
`python3 -m verify verify --local --no-bench` in a fresh interpreter (imports, facts, reports),
and `ansible localhost -m setup` (fact gathering, the usual first step of any play).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def spec_for(vars_files: list) -> dict:
    from verify.local_run import build_spec

    return build_spec(None, None, vars_files, "localhost")


def time_checks(spec: dict, runs: int) -> list:
    from verify.checks import run_checks
    from verify.node import Node

    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run_checks(spec, Node())
        times.append(time.perf_counter() - start)
    return times


def time_command(argv: list, runs: int, env=None) -> list:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO, check=False)
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vars", action="append", default=[])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    spec = spec_for(args.vars)
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "desired.json"
        spec_file.write_text(json.dumps(spec))
        rows = [("config checks only (in-process)", time_checks(spec, args.runs))]
        rows.append(("verify --local --no-bench (fresh python3)", time_command(
            [sys.executable, "-m", "verify", "verify", "--local", "--spec", str(spec_file), "--no-bench",
             "--quiet", "--format", "json", "--out", tmp], args.runs)))
        ansible = shutil.which("ansible", path=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
        if ansible:
            env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False")
            rows.append(("ansible localhost -m setup", time_command(
                [ansible, "localhost", "-c", "local", "-m", "ansible.builtin.setup"], args.runs, env)))
    print(f"{'what':44} {'median s':>9} {'min s':>8} {'max s':>8}   ({args.runs} runs, {os.uname().nodename})")
    for label, times in rows:
        print(f"{label:44} {statistics.median(times):9.3f} {min(times):8.3f} {max(times):8.3f}")
    print(f"torch imported by the checks: {'torch' in sys.modules}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
