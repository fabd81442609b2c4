"""A no-change playbooks/site.yml (check mode) against 1 and N containers at once: what one more host
costs when Ansible forks (issue 13: N hosts should cost about one).

    python benchmarks/apply_fleet_scale.py [--sizes 1,4] [--runs 3]

The fleet is N systemd containers of the molecule image with the molecule fleet scenario's settings
(benchmarks/container_fleet.py: a namespaced sysctl and the MTU of eth0; the roles that would judge
the machine itself are off). The largest fleet is started once and each size is a --limit of it;
the first run of each size is not counted. Prints, per size, the median wall time and tasks per host,
the time per host, the controller's CPU time, and the cost of each host beyond the first. The
containers share the machine's CPUs with the controller, so on a small machine the wall time of
more hosts grows with their modules' work too; the controller CPU per host is what forks cannot hide.
Check mode only: nothing is changed, in the containers or on the machine. Needs root and podman.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

from apply_vs_setup import REPO, RunFailed, run_playbook, tool
from container_fleet import CONTAINER_VARS, container_fleet, network


def controller_cpu_s() -> float:
    """CPU seconds of the finished child processes: ansible-playbook, its forks and the podman client
    (the modules run inside the containers, children of conmon, and are not counted)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4", help="fleet sizes, comma-separated (default 1,4)")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per size (default 3)")
    args = parser.parse_args()
    try:
        sizes = sorted({int(size) for size in args.sizes.split(",")})
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: whole numbers separated by commas, such as 1,4")
    if sizes[0] < 1 or args.runs < 1:
        parser.error("--sizes and --runs must be at least 1")
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    env.setdefault("CONTAINERS_CONF", str(REPO / "molecule" / "containers.conf"))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; forks from {env['ANSIBLE_CONFIG']}")
    rows = []
    with network(), container_fleet("tf-apply", sizes[-1]) as names, \
            tempfile.TemporaryDirectory(prefix="tunefleet-apply-scale-") as tmp:
        inventory = Path(tmp) / "fleet.json"
        inventory.write_text(json.dumps({"all": {"hosts": dict.fromkeys(names, {}), "vars": CONTAINER_VARS}}))
        for size in sizes:
            argv = [sys.executable, tool("ansible-playbook", None), "-i", str(inventory),
                    "--limit", ",".join(names[:size]), "playbooks/site.yml", "--check"]
            try:
                run_playbook(argv, env)  # not counted: warms the caches
                runs, cpu = [], []
                for _ in range(args.runs):
                    before = controller_cpu_s()
                    runs.append(run_playbook(argv, env))
                    cpu.append(controller_cpu_s() - before)
            except RunFailed as exc:
                print(f"apply_fleet_scale: {size} host(s): {exc}", file=sys.stderr)
                return 1
            wall = statistics.median(seconds for seconds, _ in runs)
            tasks = sorted({counts["ok"] for _, recap in runs for counts in recap.values()})
            rows.append((size, wall, statistics.median(cpu), tasks))
    print(f"{'hosts':>5} {'median s':>9} {'s per host':>11} {'vs 1st size':>12} {'controller CPU s':>17}  tasks/host")
    for size, wall, cpu, tasks in rows:
        per_host = "/".join(map(str, tasks))
        print(f"{size:5} {wall:9.2f} {wall / size:11.2f} {wall / rows[0][1]:11.2f}x {cpu:17.2f}  {per_host}")
    if len(rows) > 1:
        (small, small_wall, small_cpu, _), (big, big_wall, big_cpu, _) = rows[0], rows[-1]
        extra, extra_cpu = (big_wall - small_wall) / (big - small), (big_cpu - small_cpu) / (big - small)
        print(f"each host beyond {small}: +{extra:.2f} s wall ({extra / small_wall * 100:.0f}% of a {small}-host run), "
              f"+{extra_cpu:.2f} s of controller CPU")
    print(json.dumps({"cpus": os.cpu_count(), "sizes": {
        size: {"median_s": round(wall, 3), "controller_cpu_s": round(cpu, 3), "tasks": tasks}
        for size, wall, cpu, tasks in rows}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
