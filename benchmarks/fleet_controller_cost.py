"""What the real verify play costs the controller per host, and what 1,000 hosts would take.

    python benchmarks/fleet_controller_cost.py [--sizes 1,10,50,100] [--forks 50] [--profile-tasks]
                                               [--slices 1,2,auto] [--rows-out FILE] [--json-out FILE]

Runs playbooks/verify.yml with ansible-playbook (the command `tunefleet verify -i` runs through
ansible-runner, with the same pinned environment: verify.fleet.run.ansible_env) against N inventory
hosts. Every host is this machine on the local connection under its own inventory name, and its
node side is real: the bundle shipped, the interpreter search, the desired state rendered, the
config checks run by verify.noderun, the reports fetched and unpacked; each host reads its own copy
of a recorded node tree (verify_node_root, default tests/fixtures/node/snapshots/ci_vm/tree), so
nothing reads or changes this machine's own settings and the benchmark rows SKIP (a tree is not a
live node; this machine has no GPU either). Path MTU is on with one peer named in the inventory: the
addresses are gathered as in a default run, the all-host peer list (issue 38 item 3) is not built, and
the probe itself SKIPs over a tree.

Controller CPU is split from node CPU like this. On the local connection the node side runs as
children of Ansible's forks, so getrusage(RUSAGE_CHILDREN) around ansible-playbook holds both.
Ansible starts every command it runs on a host through its shell (the `executable` setting); here
that shell is a wrapper (SHELL_WRAPPER) that runs /bin/sh and writes the CPU seconds it and its
children used (bash `times`) and its wall time. A command whose text names a host's own directory
(its interpreter and remote tmp live there) is that host's node side; every other command (the
tasks delegated to the controller: unpacking reports, the fleet report) and everything outside the
wrapper (ansible-playbook, its forks) is controller. The fork that runs the wrapper is controller work
a real SSH run also pays (an ssh client instead of a shell). ansible-playbook's own process (the
strategy: one process, it cannot use more than one core) is measured apart by running it under
MAIN_SHIM, which records its RUSAGE_SELF at exit.

The 1,000-host estimate (printed) is the model
    wall(N) = fixed + N * max(main_cpu_per_host, controller_cpu_per_host / cores) + ceil(N / forks) * node_wall
(fixed: the fitted controller CPU of a run of no host, its serial steps; the forks' work spreads over the
controller's cores, the strategy process's does not; each batch of
`forks` hosts waits for its nodes' own work, node_wall: the sum of the wall times of one host's node
commands in the least contended run, plus --node-bench-s for the quick benchmarks, which SKIP here).
It adds the controller's part and the nodes' part as if they never overlapped; the lower bound printed
with it takes the larger of the two.

Sliced (`--slices 1,2,auto`, issue 52: `tunefleet verify -i --slices S`, AWX job slicing): each size runs as S
ansible-playbook processes at once, each with `--limit @FILE` its slice (verify.fleet.slices.plan_slices) into
a run directory of its own, then the slices joined into one and the fleet report built once
(verify.fleet.slices.join_run_dirs, timed in this process: join CPU). The strategy's cost then splits
across the slices, each its own process on its own core, so the model becomes
    wall(N, S) = fixed + N * max(main_cpu_per_host / min(S, cores), controller_cpu_per_host / cores)
                 + N * join_cpu_per_host + ceil(N / (S * forks)) * node_wall
with S * forks hosts at work at once (forks per slice).

CPU seconds (rusage) hold up on a shared machine; wall times there do not: they are printed, and the
estimate uses CPU and the least contended node wall.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from verify.fleet.run import PLAYBOOK, ansible_env, collection_root, link_collection  # noqa: E402 - the repository is put on sys.path first

DEFAULT_TREE = REPO / "tests" / "fixtures" / "node" / "snapshots" / "ci_vm" / "tree"
# The node's python: a bare interpreter, as on a stock node (the venv is the controller's).
NODE_PYTHON = "/usr/bin/python3"

# Every command Ansible runs on a host of this benchmark: /bin/sh -c COMMAND, then one record file
# (start, end, bash `times`: its own then its children's user and system CPU, the command text).
# The variable passes to the commands it starts: verify on the node, and nothing there reads it.
# No subshell before `times`: a subshell's times are its own, not this shell's.
SHELL_WRAPPER = """#!/bin/bash
# Ansible hands the shell a command that starts the shell again (executable -c '...'): record the outer one only.
if [ -n "$TUNEFLEET_BENCH_RECORDING" ]; then exec /bin/sh -c "$2"; fi
export TUNEFLEET_BENCH_RECORDING=1
start=$EPOCHREALTIME
/bin/sh -c "$2"
rc=$?
end=$EPOCHREALTIME
record="{log_dir}/$BASHPID.$RANDOM.$rc"
{{ printf '%s %s\\n' "$start" "$end"; times; printf '%s\\n' "${{2//[$'\\n\\t']/ }}"; }} > "$record"
exit $rc
"""

# ansible-playbook in this process, its own CPU (RUSAGE_SELF: the strategy, not its forks) written at exit.
MAIN_SHIM = """import atexit, os, resource, runpy, sys
out, main_pid = sys.argv[1], os.getpid()
def record():
    if os.getpid() == main_pid:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with open(out, "w") as handle:
            handle.write(f"{usage.ru_utime} {usage.ru_stime}")
atexit.register(record)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

TIMES = re.compile(r"(\d+)m([0-9.]+)s")
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=\d+\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", re.M)


@dataclass
class Run:
    hosts: int
    wall_s: float
    controller_cpu_s: float   # ansible-playbook and its forks, the controller's own commands
    main_cpu_s: float         # of which ansible-playbook's own process (the strategy)
    node_cpu_s: float         # every host's node-side commands, all hosts together
    node_wall_per_host_s: float
    tasks_per_host: float     # task results per inventory host (ok + failed + skipped), from the recap
    node_commands_per_host: float
    reports: int              # hosts whose report.json came back
    slices: int = 1           # ansible-playbook processes run at once, each over a slice of the hosts
    main_cpu_max_s: float = 0.0  # the busiest slice's strategy process (with one slice: main_cpu_s)
    join_cpu_s: float = 0.0   # joining the slices' run directories and building the one fleet report (sliced runs)


def host_name(index: int) -> str:
    return f"node{index:04d}"


def prepare_hosts(work: Path, count: int, tree: Path) -> None:
    """One directory per host: its copy of the node tree, its interpreter (a link to NODE_PYTHON whose path
    names the host in every command Ansible runs for it) and its remote tmp."""
    for index in range(1, count + 1):
        home = work / "hosts" / host_name(index)
        if home.exists():
            continue
        home.mkdir(parents=True, mode=0o700)
        shutil.copytree(tree, home / "tree", symlinks=True)
        (home / "tmp").mkdir(mode=0o700)
        os.symlink(NODE_PYTHON, home / "python3")


def inventory(work: Path, count: int) -> dict:
    hosts = {}
    for index in range(1, count + 1):
        home = work / "hosts" / host_name(index)
        hosts[host_name(index)] = {"ansible_python_interpreter": str(home / "python3"),
                                   "ansible_remote_tmp": str(home / "tmp"), "verify_node_root": str(home / "tree")}
    return {"all": {"hosts": hosts, "vars": {
        "ansible_connection": "local",
        # Every host is this machine reached as root: no privilege change to make (and no sudo here).
        "ansible_become": False,
        # What inventory/local/group_vars/all.yml says for this machine, as the recorded tree's desired state did.
        "network_interfaces": [], "storage_allow_no_match": True,
        # Path MTU on, with one peer named: the play gathers the addresses as a default run does, and skips
        # the all-host peer list (issue 38 item 3 bounds it); over a tree the node's probe SKIPs.
        "verify_node_path_mtu": True, "network_path_mtu_peers": ["127.0.0.2"],
    }}}


def read_records(log_dir: Path, work: Path) -> tuple:
    """(node CPU by host, node wall by host, commands by host, controller-side command CPU)."""
    cpu: dict = {}
    wall: dict = {}
    commands: dict = {}
    other_cpu = 0.0
    marker = re.compile(re.escape(str(work / "hosts")) + r"/(node\d{4})/")
    for record in log_dir.iterdir():
        lines = record.read_text().splitlines()
        start, end = (float(x) for x in lines[0].split())
        seconds = [int(m) * 60 + float(s) for m, s in TIMES.findall(" ".join(lines[1:3]))]
        used = sum(seconds)
        host = marker.search(" ".join(lines[3:]))
        if host is None:
            other_cpu += used
            continue
        name = host.group(1)
        cpu[name] = cpu.get(name, 0.0) + used
        wall[name] = wall.get(name, 0.0) + (end - start)
        commands[name] = commands.get(name, 0) + 1
    return cpu, wall, commands, other_cpu


def run_play(work: Path, count: int, forks: int, profile_tasks: bool, pipelining: bool = False,
             slices: int = 1) -> tuple:
    """(Run, the play's stdout); slices > 1: run_sliced_play."""
    if slices > 1:
        return run_sliced_play(work, count, forks, slices, pipelining), ""
    inventory_file = work / f"inventory-{count}.json"
    inventory_file.write_text(json.dumps(inventory(work, count)))
    log_dir = work / f"records-{count}"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(mode=0o700)
    wrapper = work / "shell-wrapper"
    wrapper.write_text(SHELL_WRAPPER.format(log_dir=log_dir))
    wrapper.chmod(0o700)
    reports = work / f"reports-{count}"
    shutil.rmtree(reports, ignore_errors=True)
    main_cpu_file = work / "main-cpu"
    main_cpu_file.unlink(missing_ok=True)
    env = play_env(work, wrapper, forks, pipelining)
    if profile_tasks:
        env.update({"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
                    "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all", "PROFILE_TASKS_SORT_ORDER": "descending"})
    playbook = ansible_playbook()
    argv = [sys.executable, "-c", MAIN_SHIM, str(main_cpu_file), str(playbook), "-i", str(inventory_file),
            str(REPO / PLAYBOOK), "-e", f"verify_node_report_dir={reports}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(REPO))
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{count} hosts: ansible-playbook exited {done.returncode}")
    cpu, node_wall, commands, _ = read_records(log_dir, work)
    node_cpu = sum(cpu.values())
    names = [host_name(i) for i in range(1, count + 1)]
    runs = [p for p in reports.iterdir() if p.is_dir()]
    returned = sum((runs[0] / name / "report.json").is_file() for name in names) if len(runs) == 1 else 0
    if returned != count or len(commands) != count:
        raise SystemExit(f"{count} hosts: {returned} reports came back, {len(commands)} hosts ran node commands")
    recap = {m[0]: int(m[1]) + int(m[3]) + int(m[4]) for m in RECAP.findall(done.stdout) if m[0] in names}
    main_cpu = sum(float(x) for x in main_cpu_file.read_text().split())
    run = Run(hosts=count, wall_s=wall, controller_cpu_s=total - node_cpu, main_cpu_s=main_cpu, node_cpu_s=node_cpu,
              node_wall_per_host_s=sum(node_wall.values()) / count, tasks_per_host=sum(recap.values()) / count,
              node_commands_per_host=sum(commands.values()) / count, reports=returned)
    return run, done.stdout


def ansible_playbook() -> Path:
    """ansible-playbook beside this interpreter (a venv), else the script of the ansible package on the path (a
    device machine's carried site directory, tests/device/sliced_fleet_cost.sh)."""
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.exists():
        return beside
    import ansible

    return Path(ansible.__file__).resolve().parents[1] / "bin" / "ansible-playbook"


def ansible_site() -> dict:
    """PYTHONPATH for ansible-playbook where ansible is not this interpreter's own package (a carried site
    directory): ansible_env pins PYTHONPATH to the checkout alone."""
    if (Path(sys.executable).parent / "ansible-playbook").exists():
        return {}
    import ansible

    return {"PYTHONPATH": f"{REPO}:{Path(ansible.__file__).resolve().parents[1]}"}


def play_env(work: Path, wrapper: Path, forks: int, pipelining: bool) -> dict:
    """The play's environment as `tunefleet verify -i` gives it (verify.fleet.run.ansible_env), the checkout
    linked as the collection tunefleet.gpu_node in the work directory as verify -i links it in its scratch."""
    collections = collection_root(REPO, str(work))
    link_collection(REPO, collections)
    env = dict(ansible_env(REPO, {"ANSIBLE_EXECUTABLE": str(wrapper), "ANSIBLE_FORKS": str(forks),
                                  "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(work / "local-tmp"),
                                  **ansible_site()}, collections=collections))
    if pipelining:
        env["ANSIBLE_PIPELINING"] = "True"
    return env


def run_sliced_play(work: Path, count: int, forks: int, slices: int, pipelining: bool = False) -> Run:
    """The play as `tunefleet verify -i --slices` runs it: one ansible-playbook per slice (--limit @its hosts),
    all at once, each into its own run directory; then the slices joined into one run directory and the fleet
    report built over it (verify.fleet.slices), that part's CPU measured in this process."""
    from verify.fleet.slices import CONTROLLER, join_run_dirs, plan_slices

    inventory_file = work / f"inventory-{count}.json"
    inventory_file.write_text(json.dumps(inventory(work, count)))
    log_dir = work / f"records-{count}-{slices}"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(mode=0o700)
    wrapper = work / "shell-wrapper"
    wrapper.write_text(SHELL_WRAPPER.format(log_dir=log_dir))
    wrapper.chmod(0o700)
    reports = work / f"reports-{count}-{slices}"
    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir(mode=0o700)
    names = [host_name(i) for i in range(1, count + 1)]
    plan = plan_slices(names, slices)
    env = play_env(work, wrapper, forks, pipelining)
    playbook = ansible_playbook()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    started = []
    for index, hosts in enumerate(plan, 1):
        limit = work / f"slice-{count}-{index}.hosts"
        limit.write_text("".join(f"{h}\n" for h in hosts + [CONTROLLER]))  # the controller plays' host too
        main_cpu_file = work / f"main-cpu-{index}"
        main_cpu_file.unlink(missing_ok=True)
        slice_reports = reports / f"slice-{index}"
        argv = [sys.executable, "-c", MAIN_SHIM, str(main_cpu_file), str(playbook), "-i", str(inventory_file),
                str(REPO / PLAYBOOK), "--limit", f"@{limit}", "-e", f"verify_node_report_dir={slice_reports}"]
        out = open(work / f"slice-{count}-{index}.out", "w")  # noqa: SIM115 - closed once its process ends
        started.append((subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
                                         cwd=str(REPO)), out, main_cpu_file, slice_reports))
    for process, out, _, _ in started:
        process.wait()
        out.close()
    played = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    failed = [i for i, (p, *_rest) in enumerate(started, 1) if p.returncode != 0]
    if failed:
        raise SystemExit(f"{count} hosts, {slices} slices: slice(s) {failed} failed; see {work}/slice-{count}-*.out")
    run_dirs = [str(next(p for p in slice_reports.iterdir() if p.is_dir())) for *_x, slice_reports in started]
    joined = reports / "joined"
    joined.mkdir(mode=0o700)
    self_before = time.process_time()
    join_run_dirs(run_dirs, str(joined), move=True)
    from verify.fleet.slices import build_fleet_report

    build_fleet_report(str(joined))
    join_cpu = time.process_time() - self_before
    wall = (played - began) + (time.perf_counter() - played)
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cpu, node_wall, commands, _ = read_records(log_dir, work)
    node_cpu = sum(cpu.values())
    returned = sum((joined / name / "report.json").is_file() for name in names)
    if returned != count or len(commands) != count or not (joined / "fleet_report.json").is_file():
        raise SystemExit(f"{count} hosts, {slices} slices: {returned} reports came back, {len(commands)} hosts ran "
                         "node commands")
    mains = [sum(float(x) for x in f.read_text().split()) for _p, _o, f, _r in started]
    return Run(hosts=count, wall_s=wall, controller_cpu_s=total - node_cpu + join_cpu, main_cpu_s=sum(mains),
               node_cpu_s=node_cpu, node_wall_per_host_s=sum(node_wall.values()) / count, tasks_per_host=0.0,
               node_commands_per_host=sum(commands.values()) / count, reports=returned, slices=len(plan),
               main_cpu_max_s=max(mains), join_cpu_s=join_cpu)


def slope(points: list) -> tuple:
    """Least squares line through (x, y): (slope, intercept); one point: (y / x, 0)."""
    if len(points) < 2:
        x, y = points[0]
        return y / x, 0.0
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    rise = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return rise, mean_y - rise * mean_x


def estimate_wall_s(hosts: int, fixed_s: float, main_per_host: float, controller_per_host: float,
                    node_wall_per_host: float, cores: int, forks: int, slices: int = 1,
                    join_per_host: float = 0.0) -> tuple:
    """(the model of the module docstring, its lower bound): the controller's part and the nodes' part added, as
    if the controller never worked while the nodes did; the bound takes the larger of the two, as if it always did.
    slices: ansible-playbook processes at once, each with `forks` forks: the strategy's share splits over
    min(slices, cores) cores, S * forks hosts work at once, and the join and fleet report (serial) follow."""
    controller_s = hosts * max(main_per_host / min(slices, cores), controller_per_host / cores)
    controller_s += hosts * join_per_host
    nodes_s = math.ceil(hosts / (forks * slices)) * node_wall_per_host
    return fixed_s + controller_s + nodes_s, fixed_s + max(controller_s, nodes_s)


def host_rows(run_dir: Path, host: str, work: Path) -> list:
    """One host's report rows (check, status, expected, observed), the work directory's path made neutral."""
    report = json.loads((run_dir / host / "report.json").read_text())
    rows = [[r["check_id"], r["status"], r.get("expected"), r.get("observed")] for r in report["results"]]
    return json.loads(json.dumps(rows).replace(str(work), "<work>"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,50,100")
    parser.add_argument("--forks", type=int, default=50, help="Ansible forks (ansible.cfg: 50)")
    parser.add_argument("--cores", type=int, default=16, help="controller cores of the 1,000-host estimate")
    parser.add_argument("--estimate-forks", type=int, default=250, help="forks of the 1,000-host estimate")
    parser.add_argument("--node-bench-s", type=float, default=31.4,
                        help="wall of a node's quick benchmarks added to the estimate (31.4 s: the quick set on "
                             "2x H200, docs/measurements.md; they SKIP here)")
    parser.add_argument("--from-json", type=Path, nargs="+",
                        help="fit and estimate from runs saved by --json-out instead of measuring")
    parser.add_argument("--tree", type=Path, default=DEFAULT_TREE, help="the node tree every host reads a copy of")
    parser.add_argument("--profile-tasks", action="store_true",
                        help="also print ansible.posix.profile_tasks' table of the largest size (its callback "
                             "costs CPU: the figures of that run include it)")
    parser.add_argument("--rows-out", type=Path, help="write the first host's report rows here (before/after diff)")
    parser.add_argument("--json-out", type=Path, help="write the measured runs here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (records, reports) and say where")
    parser.add_argument("--pipelining", action="store_true",
                        help="ANSIBLE_PIPELINING=True: one command per module instead of four (mkdir, chmod, python, "
                             "rm), as ansible.cfg's ssh_connection pipelining does over SSH")
    parser.add_argument("--slices", default="1",
                        help="comma list of slice counts each size runs with (auto: this machine's cores), e.g. "
                             "1,2,auto: S ansible-playbook processes at once, joined into one fleet report (issue 52)")
    parser.add_argument("--estimate-slices", type=int, default=0,
                        help="slices of the sliced estimate (default: --cores); --estimate-forks is then the "
                             "forks of all slices together")
    args = parser.parse_args()
    if args.from_json:
        saved = [Run(**r) for path in args.from_json for r in json.loads(path.read_text())]
        runs = sorted(saved, key=lambda r: r.hosts)
        for run in runs:
            print_run(run)
        return fit_and_estimate(runs, args)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    slice_counts = sorted({os.cpu_count() or 1 if s.strip() == "auto" else int(s) for s in args.slices.split(",")})
    print(f"{os.uname().nodename}: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; forks {args.forks}; "
          f"pipelining {'on' if args.pipelining else 'off'}; node tree {args.tree}")
    runs = []
    work = Path(tempfile.mkdtemp(prefix="tunefleet-fleet-cost-"))
    try:
        if args.keep:
            print(f"work directory (kept): {work}")
        prepare_hosts(work, max(sizes), args.tree)
        print(f"{'hosts':>5} {'wall s':>8} {'ctrl CPU s':>10} {'(main)':>8} {'node CPU s':>10} "
              f"{'node wall/host':>14} {'tasks/host':>10} {'node cmds/host':>14} {'slices':>6} {'(main max)':>10} "
              f"{'join CPU s':>10}")
        for size, slices in ((size, s) for size in sizes for s in slice_counts if s == 1 or s <= size):
            profile = args.profile_tasks and size == sizes[-1] and slices == 1
            run, stdout = run_play(work, size, args.forks, profile, args.pipelining, slices)
            runs.append(run)
            if args.json_out:  # after each run: a long benchmark interrupted keeps what it measured
                args.json_out.write_text(json.dumps([asdict(r) for r in runs], indent=1) + "\n")
            print_run(run, "  (profile_tasks on)" if profile else "")
            print(f"      load average {os.getloadavg()[0]:.1f} after this run (a shared machine)", flush=True)
            if profile:
                table = stdout[stdout.rfind("=" * 20):] if "=" * 20 in stdout else stdout[-6000:]
                print("profile_tasks (wall per task, all hosts of the task together):")
                print(table.strip()[-8000:])
            if args.rows_out and size == sizes[0] and slices == 1:
                run_dir = next(p for p in (work / f"reports-{size}").iterdir() if p.is_dir())
                args.rows_out.write_text(json.dumps(host_rows(run_dir, host_name(1), work), indent=1) + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return fit_and_estimate(runs, args)


def print_run(run: Run, note: str = "") -> None:
    print(f"{run.hosts:5} {run.wall_s:8.1f} {run.controller_cpu_s:10.1f} {run.main_cpu_s:8.1f} "
          f"{run.node_cpu_s:10.1f} {run.node_wall_per_host_s:14.2f} {run.tasks_per_host:10.1f} "
          f"{run.node_commands_per_host:14.1f} {run.slices:6} {run.main_cpu_max_s or run.main_cpu_s:10.1f} "
          f"{run.join_cpu_s:10.2f}{note}", flush=True)


def fit_and_estimate(runs: list, args) -> int:
    sliced = [r for r in runs if r.slices > 1]
    runs = [r for r in runs if r.slices == 1]
    sizes = [r.hosts for r in runs]
    controller, controller_fixed = slope([(r.hosts, r.controller_cpu_s) for r in runs])
    main_cpu, _ = slope([(r.hosts, r.main_cpu_s) for r in runs])
    node, _ = slope([(r.hosts, r.node_cpu_s) for r in runs])
    wall, _ = slope([(r.hosts, r.wall_s) for r in runs])
    # The least contended run's: on this shared machine every node's commands wait for the CPU the other hosts
    # and the controller use; a real node runs its own steps alone.
    node_wall = min(r.node_wall_per_host_s for r in runs)
    print(f"per extra host (least squares over {sizes}): controller CPU {controller:.2f} s (of which the strategy "
          f"process {main_cpu:.2f} s), node CPU {node:.2f} s, wall here {wall:.2f} s; controller fixed cost "
          f"{controller_fixed:.1f} s CPU")
    # The run's own steps on the controller (start, run directory, bundle, fleet report) are serial and CPU-bound:
    # the fitted fixed CPU stands for their wall (the smallest run's wall here holds its node's wall and the
    # machine's other load too).
    fixed = max(controller_fixed, 0.0)
    print(f"node wall per host: {node_wall:.1f} s measured here (least contended run), {node:.1f} s if a node's steps "
          "took their CPU time (an idle node runs them one after another)")
    for hosts in (1000, 10000):
        for checks_s, bench_s in ((node_wall, 0.0), (node_wall, args.node_bench_s), (node, args.node_bench_s)):
            node_s = checks_s + bench_s
            estimate, bound = estimate_wall_s(hosts, fixed, main_cpu, controller, node_s, args.cores,
                                              args.estimate_forks)
            what = f"config checks + {bench_s:.0f} s of quick benchmarks" if bench_s else "config checks"
            print(f"{hosts} hosts, {what}, {args.cores}-core controller, {args.estimate_forks} forks: about "
                  f"{estimate / 60:.1f} min (at least {bound / 60:.1f}) = {fixed:.0f} s fixed + {hosts} x "
                  f"max({main_cpu:.2f} s strategy, {controller:.2f} s / {args.cores} cores) + "
                  f"{math.ceil(hosts / args.estimate_forks)} batches x {node_s:.1f} s node wall")
    return estimate_sliced(sliced, runs, args, (fixed, main_cpu, controller, node_wall, node))


def estimate_sliced(sliced: list, unsliced: list, args, fit: tuple) -> int:
    """The sliced runs beside the unsliced run of the same size, and the model for 10,000 and 100,000 hosts with
    the strategy's share split over the slices (module docstring)."""
    fixed, main_cpu, controller, node_wall, node = fit
    by_size = {r.hosts: r for r in unsliced}
    for run in sliced:
        base = by_size.get(run.hosts)
        if base is None:
            continue
        print(f"{run.hosts} hosts in {run.slices} slices: controller CPU {run.controller_cpu_s / run.hosts:.2f} s a "
              f"host (unsliced {base.controller_cpu_s / base.hosts:.2f}), strategy {run.main_cpu_s / run.hosts:.2f} s "
              f"a host over {run.slices} processes, the busiest {run.main_cpu_max_s:.1f} s (unsliced "
              f"{base.main_cpu_s:.1f} s in one), join and fleet report {run.join_cpu_s:.2f} s CPU; "
              f"wall {run.wall_s:.0f} s "
              f"(unsliced {base.wall_s:.0f} s, on a shared machine)")
    # Per extra host: the fleet report's own start (templates, the summary) is a fixed cost, not a host's.
    sizes = {r.hosts for r in sliced}
    join = max(0.0, slope([(r.hosts, r.join_cpu_s) for r in sliced])[0]) if len(sizes) > 1 else \
        max((r.join_cpu_s / r.hosts for r in sliced), default=0.0)
    slices = args.estimate_slices or args.cores
    forks = max(1, args.estimate_forks // slices)
    for hosts in (10000, 100000):
        for checks_s, bench_s in ((node_wall, args.node_bench_s), (node, args.node_bench_s)):
            node_s = checks_s + bench_s
            estimate, bound = estimate_wall_s(hosts, fixed, main_cpu, controller, node_s, args.cores, forks,
                                              slices=slices, join_per_host=join)
            print(f"{hosts} hosts sliced, config checks + {bench_s:.0f} s of quick benchmarks, {args.cores}-core "
                  f"controller, {slices} slices x {forks} forks: about {estimate / 60:.1f} min (at least "
                  f"{bound / 60:.1f}) = {fixed:.0f} s fixed + {hosts} x (max({main_cpu:.2f} s strategy / "
                  f"{min(slices, args.cores)}, {controller:.2f} s / {args.cores} cores) + {join:.4f} s join) + "
                  f"{math.ceil(hosts / (forks * slices))} batches x {node_s:.1f} s node wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
