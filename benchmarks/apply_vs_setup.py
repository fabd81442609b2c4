"""A no-change run of playbooks/site.yml against `ansible -m setup` on the same node, in one run.

    python benchmarks/apply_vs_setup.py [--runs 5] [-i inventory/local] [--limit localhost]
                                        [-e @vars.yml] [--apply] [--bin DIR]

Prints the median wall time of several site.yml runs (check mode by default; `--apply` applies
for real: the first run converges the node and is not counted, so the measured runs are the
re-applies that find nothing to do) against the median of `ansible HOST -m setup` (fact
gathering alone), their ratio, and the tasks each host executed: the recap's ok, which already
counts the changed ones (Ansible's strategy increments both for a changed result), and skipped
apart (a skipped task costs time too). Issue 13's targets: <= 3x setup, <= 25 tasks executed.
The two commands alternate, so a machine that gets busier slows both alike.

Runs `ansible` and `ansible-playbook` from --bin (default: next to this python, then PATH) with
this python, from the repository root, with the repository's ansible.cfg unless ANSIBLE_CONFIG
is set. Exit 1 when a run fails or a host is unreachable.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)", re.MULTILINE)
TARGET_RATIO, TARGET_TASKS = 3.0, 25


class RunFailed(RuntimeError):
    pass


def recap(output: str) -> Dict[str, Dict[str, int]]:
    """PLAY RECAP lines -> host -> counts; the last line of a host wins (one play recap per run)."""
    return {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"} for m in RECAP.finditer(output)}


def tool(name: str, bin_dir: Optional[str]) -> str:
    search = [bin_dir] if bin_dir else [str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    found = shutil.which(name, path=os.pathsep.join(search))
    if not found:
        raise SystemExit(f"apply_vs_setup: no {name} in {os.pathsep.join(search)} (install ansible, or pass --bin)")
    return found


def timed(argv: List[str], env: dict) -> tuple:
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - began, done


def run_playbook(argv: List[str], env: dict) -> tuple:
    seconds, done = timed(argv, env)
    counts = recap(done.stdout)
    broken = {h: c for h, c in counts.items() if c["failed"] or c["unreachable"]}
    if done.returncode != 0 or not counts or broken:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
        raise RunFailed(f"{' '.join(argv[1:3])} ... exited {done.returncode}; recap {broken or counts}\n{tail}")
    return seconds, counts


def run_setup(argv: List[str], env: dict) -> float:
    seconds, done = timed(argv, env)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-10:])
        raise RunFailed(f"ansible -m setup exited {done.returncode}\n{tail}")
    return seconds


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each (default 5)")
    parser.add_argument("-i", "--inventory", default="inventory/local")
    parser.add_argument("--limit", default="localhost", help="the host(s) both commands run on")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], help="passed to ansible-playbook")
    parser.add_argument("--playbook", default="playbooks/site.yml")
    parser.add_argument("--apply", action="store_true",
                        help="apply for real (changes the node); default: --check")
    parser.add_argument("--bin", help="directory holding ansible and ansible-playbook")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: at least 1")
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="False")
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    playbook = [sys.executable, tool("ansible-playbook", args.bin), "-i", args.inventory, "--limit", args.limit,
                *[item for value in args.extra_vars for item in ("-e", value)], args.playbook]
    if not args.apply:
        playbook.append("--check")
    setup = [sys.executable, tool("ansible", args.bin), args.limit, "-i", args.inventory, "-m", "ansible.builtin.setup"]
    mode = "apply" if args.apply else "check mode"
    try:
        # Not counted: the first run converges (--apply) and warms caches (both).
        run_playbook(playbook, env)
        run_setup(setup, env)
        site_s, setup_s, counts = [], [], []
        for _ in range(args.runs):
            seconds, run_counts = run_playbook(playbook, env)
            site_s.append(seconds)
            counts.append(run_counts)
            setup_s.append(run_setup(setup, env))
    except RunFailed as exc:
        print(f"apply_vs_setup: {exc}", file=sys.stderr)
        return 1
    site, facts = statistics.median(site_s), statistics.median(setup_s)
    print(f"node {os.uname().nodename}, {args.playbook} in {mode}, {args.runs} runs each (after one not counted)")
    print(f"{'what':34} {'median s':>9} {'min s':>8} {'max s':>8}")
    print(f"{args.playbook + ' (' + mode + ')':34} {site:9.2f} {min(site_s):8.2f} {max(site_s):8.2f}")
    print(f"{'ansible -m setup':34} {facts:9.2f} {min(setup_s):8.2f} {max(setup_s):8.2f}")
    ratio = site / facts
    print(f"ratio {ratio:.1f}x setup (target <= {TARGET_RATIO:g}x: {'met' if ratio <= TARGET_RATIO else 'NOT met'})")
    summary = {"node": os.uname().nodename, "mode": mode, "runs": args.runs, "site_median_s": round(site, 3),
               "setup_median_s": round(facts, 3), "ratio": round(ratio, 2), "hosts": {}}
    for host, last in sorted(counts[-1].items()):
        executed = last["ok"]  # changed tasks are counted in ok too
        steady = all(run.get(host) == last for run in counts)
        print(f"{host}: {executed} tasks executed (recap ok={last['ok']}, changed={last['changed']} of them), "
              f"skipped={last['skipped']}"
              f" (target <= {TARGET_TASKS} executed: {'met' if executed <= TARGET_TASKS else 'NOT met'})"
              + ("" if steady else "; the counts differed between runs"))
        if last["changed"]:
            print(f"{host}: changed={last['changed']}: not a no-change run"
                  + (" (check mode reports what an apply would change: tune the node first)" if not args.apply else ""))
        summary["hosts"][host] = {"executed": executed, "changed": last["changed"], "skipped": last["skipped"],
                                  "steady": steady}
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
