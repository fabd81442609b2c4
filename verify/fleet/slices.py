"""A fleet run cut into slices: `tunefleet verify -i INV --slices N|auto` and `tunefleet report DIR1 DIR2 ...`.

One `ansible-playbook` process runs its strategy on one core (0.36 s of CPU a host, issue 38), so a
10,000-host play spends an hour in that one process whatever the controller's cores. Sliced, the
inventory's hosts are cut into N slices and N `ansible-playbook` processes run playbooks/verify.yml at
once, each with `--limit` its slice, through the same runner code as an unsliced `verify -i`
(verify.fleet.run: the pinned environment, the private scratch directory). AWX / Ansible Automation
Platform slices a job template the same way (job_slice_count; README: Verifying a large fleet): each
slice a job of its own with its run directory, joined afterwards by `tunefleet report DIR1 DIR2 ...`.

How hosts are cut (plan_slices): contiguous blocks of the fleet in name order, near-equal in size, a cut
never inside a unit. A unit is a rack when `--slice-by PREFIX` names the rack groups (every inventory group
whose name starts with PREFIX, kept whole in one slice), else two hosts side by side in name order (the
pairing's round 1 pairs the hosts of a play two by two in its order: verify.fleet.pairing.plan_round).
The tests that need several hosts (pairwise NCCL and RDMA, the multi-node all-reduce, the path MTU peers)
then pair hosts within a slice, as they do within a `--limit`.

How slices are joined (join_run_dirs): every slice ran into a run directory of its own (with --slices:
<run>/slices/slice-NN, claimed by the playbook as any run directory); each host's directory moves (or, for
another tool's directories, is copied) into the one run directory, and the run's side files are joined:
the addresses (fleet_addresses.json: each slice lists every inventory host, those outside it with none),
the archives the unpack refused, the regressions, and the pairwise NCCL rounds, whose blame is computed
again over every slice's rails and outcomes (verify.fleet.blame.write_pairwise), as one run would. The
fleet report is then built once over the joined directory: the same report, outliers, baselines, blame and
path MTU included, as one run with the same node reports (tests/unit/test_fleet_slices.py).

A slice whose playbook failed still leaves its hosts' reports that came back (unpacked here when its own
play did not get that far); its hosts without one are named with the command that re-runs only them
(verify.fleet.rerun), as every host of an unsliced run without a report is.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import multiprocessing
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from verify.bounded_load import MAX_BYTES, BoundedLoadError, loads_json_bytes_bounded
from verify.safe_io import (
    PRIVATE_DIR,
    PRIVATE_FILE,
    UnsafePathError,
    check_plain_component,
    for_terminal,
    open_trusted_dir,
    read_capped,
    write_file_atomic,
    write_in_dir,
)

SLICES_DIR = "slices"  # <run>/slices/slice-NN: each slice's own run directory, kept after the join
MAX_SLICES = 256  # a process each; more than any controller has cores for
# Directories of a run directory that are the run's, never a host's (the playbook and verify.fleet.unpack make them).
RUN_OWN_DIRS = frozenset({SLICES_DIR, "nccl-pairs", "unpack", "ib-fabric"})
HOST_FILES_MAX_BYTES = 64 << 20  # one file of a host's directory, copied (a report is ~100 KB a format)


class SliceError(ValueError):
    """The slicing or the join cannot be done; the message names the option or the directory and why."""


def slice_count(text: str, cores: Optional[int] = None) -> int:
    """--slices: a whole number 1..MAX_SLICES, or `auto`: the controller's core count."""
    if str(text).strip().lower() == "auto":
        return max(1, min(MAX_SLICES, cores if cores is not None else (os.cpu_count() or 1)))
    try:
        value = int(str(text))
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_SLICES:
        raise SliceError(f"--slices {text!r}: a whole number from 1 to {MAX_SLICES}, or auto (the core count)")
    return value


def slice_option(text: str) -> int:
    """argparse's type for --slices: bad input refused by the parser, naming the value and the rule."""
    try:
        return slice_count(text)
    except SliceError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--slices ", "", 1)) from None


def plan_slices(hosts: Sequence[str], count: int, units: Optional[Sequence[Sequence[str]]] = None) -> list:
    """The hosts cut into at most `count` slices (lists of host names, each in name order): contiguous in name
    order, near-equal in size, never cutting a unit. `units`: groups of hosts kept whole (the racks); hosts in
    none go two by two in name order. A unit larger than a slice makes its slice larger, never a cut."""
    names = sorted(set(hosts))
    taken: set = set()
    blocks = []
    for unit in units or ():
        members = sorted(set(unit) & set(names) - taken)
        if members:
            blocks.append(members)
            taken.update(members)
    loose = [h for h in names if h not in taken]
    blocks += [loose[i:i + 2] for i in range(0, len(loose), 2)]
    blocks.sort(key=lambda block: block[0])
    count = max(1, min(count, len(blocks)))
    slices: list = [[] for _ in range(count)]
    done = 0
    for block in blocks:
        # The slice whose share of the fleet this block's middle falls in: near-equal slices, in order.
        index = min(count - 1, (2 * done + len(block)) * count // (2 * len(names)))
        slices[index].extend(block)
        done += len(block)
    return [s for s in slices if s]


def rack_units(inventory_list: dict, prefix: str) -> list:
    """The host lists of the inventory groups whose name starts with `prefix` (ansible-inventory --list: a
    group's own hosts and its children's). A host in two of them cannot keep both whole: SliceError."""
    if not prefix:
        return []
    groups = {name: value for name, value in inventory_list.items() if isinstance(value, dict) and name != "_meta"}

    def members(name: str, seen: frozenset) -> set:
        group = groups.get(name) or {}
        out = {str(h) for h in group.get("hosts") or []}
        for child in group.get("children") or []:
            if child not in seen:
                out |= members(child, seen | {child})
        return out

    def descendants(name: str, seen: frozenset) -> set:
        children = set((groups.get(name) or {}).get("children") or []) - seen
        return children.union(*(descendants(c, seen | children) for c in children)) if children else set()

    matched = sorted(g for g in groups if g.startswith(prefix))
    inner = {g for name in matched for g in descendants(name, frozenset({name}))}
    units = []
    owner: dict = {}
    for name in (g for g in matched if g not in inner):  # a rack's own sub-groups are that rack
        hosts = members(name, frozenset({name}))
        for host in sorted(hosts):
            if host in owner:
                raise SliceError(f"--slice-by {prefix}: host {host} is in both {owner[host]} and {name}; "
                                 "name groups that do not share hosts (one a rack)")
            owner[host] = name
        units.append(sorted(hosts))
    if not units:
        raise SliceError(f"--slice-by {prefix}: no inventory group name starts with {prefix!r}")
    return units


# ---------------------------------------------------------------------------------------------------------------
# Joining run directories


@dataclass
class Joined:
    """What join_run_dirs did: each host and the directory it came from, and what it could not join."""

    hosts: dict = field(default_factory=dict)  # host -> source directory
    notes: list = field(default_factory=list)  # side files that could not be read (each is said once)


def host_dirs(run_dir: str) -> list:
    """The host directories of a run directory: each plain-named directory (never a link) that is not the run's
    own (RUN_OWN_DIRS), sorted. A host whose play never got going has none; verify.fleet.rerun names it."""
    fd = open_trusted_dir(run_dir)
    try:
        names = sorted(os.listdir(fd))
        out = []
        for name in names:
            if name in RUN_OWN_DIRS or name.startswith("."):
                continue
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                out.append(name)
        return out
    finally:
        os.close(fd)


def check_joinable(sources: Sequence[str]) -> dict:
    """host -> its source directory; SliceError before anything is moved or written when a directory cannot be
    used, or one host is in two of them (two reports of one host: which is right is the operator's call)."""
    if len(set(map(os.path.abspath, sources))) != len(sources):
        raise SliceError("the same run directory is named twice")
    owner: dict = {}
    for source in sources:
        try:
            names = host_dirs(source)
        except OSError as exc:
            raise SliceError(f"run directory {source}: {exc.strerror or exc}") from None
        for host in names:
            try:
                check_plain_component(host, "host directory name")  # <target>/<host> stays in the target
            except ValueError as exc:
                raise SliceError(f"run directory {source}: {exc}") from None
            if host in owner:
                raise SliceError(f"host {host} has a directory in both {owner[host]} and {source}: join each host's "
                                 "run once (move or remove the other)")
            owner[host] = source
    return owner


def join_run_dirs(sources: Sequence[str], target: str, move: bool = False) -> Joined:
    """Every host directory of `sources` into `target` (moved, or copied file by file: plain files only, never
    through a link), and the run's side files joined there (module docstring). `target` must exist, be ours and
    private, and hold no host directory of its own."""
    for source in sources:
        real, top = os.path.realpath(source), os.path.realpath(target)
        # A slice of --slices lies in <run>/slices/; any other nesting would join a directory into itself.
        if _within(top, real) or (_within(real, top) and not _within(real, os.path.join(top, SLICES_DIR))):
            raise SliceError(f"{target} and {source} lie one in the other: join into a directory of its own")
    owner = check_joinable(sources)
    taken = set(host_dirs(target))
    if taken & set(owner):
        raise SliceError(f"{target} already has a directory for {sorted(taken & set(owner))[0]}")
    joined = Joined()
    target_fd = open_trusted_dir(target)
    try:
        for host, source in sorted(owner.items()):
            if move:
                os.rename(os.path.join(source, host), host, dst_dir_fd=target_fd)
            else:
                copy_host_dir(os.path.join(source, host), target_fd, host)
            joined.hosts[host] = source
    finally:
        os.close(target_fd)
    join_side_files(sources, target, joined)
    return joined


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def copy_host_dir(source: str, target_fd: int, host: str) -> None:
    """A host's report files into target/host (new, private): regular files only, each read through
    read_capped (no link followed), the rest (a sub-directory, a link, a FIFO) left out."""
    os.mkdir(host, PRIVATE_DIR, dir_fd=target_fd)
    fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=target_fd)
    try:
        for entry in sorted(os.scandir(source), key=lambda e: e.name):
            if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                continue
            write_in_dir(fd, entry.name, read_capped(entry.path, HOST_FILES_MAX_BYTES), PRIVATE_FILE, durable=False)
    finally:
        os.close(fd)


def _read_side(path: str, joined: Joined):
    """A side file as JSON, None when absent; unreadable: said in joined.notes and None (the slice's own fleet
    report said the same)."""
    if not os.path.isfile(path):
        return None
    try:
        return loads_json_bytes_bounded(read_capped(path, MAX_BYTES), "side file")
    except (BoundedLoadError, OSError, ValueError) as exc:
        joined.notes.append(f"{path}: not joined: {str(exc)[:200]}")
        return None


def join_side_files(sources: Sequence[str], target: str, joined: Joined) -> None:
    from verify.fleet.model import ADDRESSES_NAME, REGRESSIONS_NAME
    from verify.fleet.unpack import REFUSED_DIR, REFUSED_NAME

    addresses: dict = {}
    refused: dict = {"hosts": {}, "left_out": {}}
    regressions: Optional[dict] = None
    for source in sources:
        data = _read_side(os.path.join(source, ADDRESSES_NAME), joined)
        if isinstance(data, dict):
            for host, addrs in data.items():
                # Every slice lists every inventory host; a host's addresses come from its own slice (the others
                # list it with none: its facts were not gathered there).
                if addrs or host not in addresses:
                    addresses[host] = addrs
        data = _read_side(os.path.join(source, REFUSED_DIR, REFUSED_NAME), joined)
        if isinstance(data, dict):
            for key in refused:
                if isinstance(data.get(key), dict):
                    refused[key].update(data[key])
        data = _read_side(os.path.join(source, REGRESSIONS_NAME), joined)
        if isinstance(data, dict):
            if regressions is None:
                regressions = {k: v for k, v in data.items() if k not in ("regressions", "drift")}
                regressions.update(regressions=[], drift=[])
            for key in ("regressions", "drift"):
                regressions[key] += data.get(key) if isinstance(data.get(key), list) else []
    if addresses:
        write_file_atomic(os.path.join(target, ADDRESSES_NAME), json.dumps(addresses, sort_keys=True), 0o644)
    if refused["hosts"] or refused["left_out"]:
        write_file_atomic(os.path.join(target, REFUSED_DIR, REFUSED_NAME), json.dumps(refused), create_dir=True)
    if regressions is not None:
        write_file_atomic(os.path.join(target, REGRESSIONS_NAME), json.dumps(regressions, indent=1))
    join_pairs(sources, target, joined)


def join_pairs(sources: Sequence[str], target: str, joined: Joined) -> None:
    """Every slice's pairwise NCCL rails and round outcomes (<slice>/nccl-pairs/rails.json, round-N.json) into
    one blame over all of them, written as one run writes it: each host's crossnode-nccl-pairs.json and
    <target>/nccl-pairs/summary.json (verify.fleet.blame.write_pairwise)."""
    from verify.fleet.blame import write_pairwise
    from verify.fleet.pairing import Outcome

    reported: dict = {}
    outcomes: list = []
    found = False
    for source in sources:
        pairs_dir = os.path.join(source, "nccl-pairs")
        rails = _read_side(os.path.join(pairs_dir, "rails.json"), joined)
        if not isinstance(rails, dict):
            continue
        found = True
        reported.update(rails)
        for name in sorted(os.listdir(pairs_dir)):
            if not (name.startswith("round-") and name.endswith(".json")):
                continue
            data = _read_side(os.path.join(pairs_dir, name), joined)
            for item in data if isinstance(data, list) else []:
                try:
                    outcomes.append(Outcome.from_dict(item))
                except (KeyError, TypeError, ValueError) as exc:
                    joined.notes.append(f"{os.path.join(pairs_dir, name)}: an outcome left out: {exc}")
    if not found:
        return
    reported = {h: reported[h] for h in sorted(reported)}  # the hosts in name order, whatever the slices' order
    # Round by round, each round's tests in slice order: the order one run over the fleet in name order writes.
    write_pairwise(target, reported, sorted(outcomes, key=lambda o: o.round))
    write_file_atomic(os.path.join(target, "nccl-pairs", "rails.json"), json.dumps(reported), create_dir=True)


# ---------------------------------------------------------------------------------------------------------------
# `tunefleet report DIR1 DIR2 ...`


def report_main(args) -> int:
    """`tunefleet report DIR`: the fleet report (verify.fleet.report); with several DIRs (the slices of one fleet
    run: AWX slice jobs, or runs by rack) they are joined first into one new run directory, --out or a new one
    beside the first DIR, and its fleet report built there."""
    from verify.fleet.report import main as build

    directories = list(args.directory) if isinstance(args.directory, (list, tuple)) else [args.directory]
    if len(directories) == 1:
        return build(argparse.Namespace(**dict(vars(args), directory=directories[0])))
    try:
        target = joined_target(directories[0], getattr(args, "out", None))
        joined = join_run_dirs(directories, target)
    except (SliceError, ValueError) as exc:
        print(f"tunefleet report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tunefleet report: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for note in joined.notes:
        print(f"tunefleet report: WARN {for_terminal(note)}", file=sys.stderr)
    print(f"joined {len(joined.hosts)} hosts of {len(directories)} run directories into {target}")
    return build(argparse.Namespace(**dict(vars(args), directory=target, out=None)))


def joined_target(first: str, out: Optional[str]) -> str:
    """The joined run directory: --out (made private, or one that is empty), else a new run directory beside
    the first DIR (verify.fleet.rundir)."""
    from verify.fleet.rundir import claim_run_dir, new_run_dir

    if not out:
        return new_run_dir(os.path.dirname(os.path.abspath(first)))
    if not os.path.lexists(out):
        os.close(open_trusted_dir(out, create=True, mode=PRIVATE_DIR))
    try:
        return claim_run_dir(out)
    except UnsafePathError as exc:
        raise SliceError(f"--out {out}: {exc.strerror or exc}") from None


# ---------------------------------------------------------------------------------------------------------------
# `tunefleet verify -i INV --slices N`


@dataclass
class SliceJob:
    index: int  # 1-based
    hosts: list
    run_dir: str  # the slice's own run directory, <run>/slices/slice-NN
    limit_file: str  # its hosts, one a line: ansible-playbook --limit @FILE


@dataclass
class SliceResult:
    index: int
    rc: Optional[int]
    status: str
    failed: dict = field(default_factory=dict)  # host -> [task: message], as verify.fleet.run.Progress keeps
    unreachable: list = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # the slice's processes (ansible-playbook and its forks), from RUSAGE_CHILDREN


# The host the playbook's controller plays run on (playbooks/verify.yml: tunefleet_verify_controller, default the
# implicit localhost): a --limit without it leaves those plays without a host, and the node play without the run
# directory they make.
CONTROLLER = "localhost"


def slice_jobs(run_dir: str, plan: Sequence[Sequence[str]]) -> list:
    """<run>/slices/slice-NN (0700, empty: the playbook claims it) and its limit file (its hosts and the
    controller), for each slice."""
    parent = os.path.join(run_dir, SLICES_DIR)
    os.close(open_trusted_dir(parent, create=True, mode=PRIVATE_DIR))
    jobs = []
    width = max(2, len(str(len(plan))))
    for index, hosts in enumerate(plan, 1):
        name = f"slice-{index:0{width}d}"
        slice_dir = os.path.join(parent, name)
        os.close(open_trusted_dir(slice_dir, create=True, mode=PRIVATE_DIR))
        limit_file = write_file_atomic(os.path.join(parent, f"{name}.hosts"),
                                       "".join(f"{h}\n" for h in list(hosts) + [CONTROLLER]))
        jobs.append(SliceJob(index, list(hosts), slice_dir, limit_file))
    return jobs


def run_jobs(jobs: Sequence[SliceJob], run_one: Callable[[SliceJob], SliceResult], parallel: bool = True) -> list:
    """Each job by run_one, all at once in a process each (one ansible-playbook and its event handling a
    core, never one Python process's GIL for all of them); a slice that died says so as its result."""
    if not parallel or len(jobs) == 1:
        return [_guarded(run_one, job) for job in jobs]
    context = multiprocessing.get_context("fork")
    started = []
    for job in jobs:
        mine, theirs = context.Pipe(duplex=False)
        process = context.Process(target=_child, args=(run_one, job, theirs), name=f"tunefleet-slice-{job.index}")
        process.start()
        theirs.close()
        started.append((job, process, mine))
    results = []
    for job, process, mine in started:
        try:
            result = mine.recv()
        except EOFError:
            result = None
        process.join()
        if not isinstance(result, SliceResult):
            result = SliceResult(job.index, None, f"died (exit {process.exitcode})")
        results.append(result)
    return results


def _child(run_one, job: SliceJob, conn) -> None:
    conn.send(_guarded(run_one, job))
    conn.close()


def _guarded(run_one, job: SliceJob) -> SliceResult:
    try:
        return run_one(job)
    except Exception as exc:  # noqa: BLE001 - one slice's failure must not lose the others' reports
        return SliceResult(job.index, None, f"failed: {type(exc).__name__}: {str(exc)[:300]}")


@dataclass(frozen=True)
class Playbook:
    """How verify.fleet.run runs the playbook, handed in by it (this module is below it: no import back).
    run(args, run_dir, progress): playbooks/verify.yml through ansible-runner into run_dir, its outcome's rc and
    status; progress(): a new event printer (verify.fleet.run.Progress); env(extra): the environment of every
    Ansible command (verify.fleet.run.ansible_env)."""

    run: Callable
    progress: Callable
    env: Callable


def playbook_slice(args, playbook: Playbook) -> Callable[[SliceJob], SliceResult]:
    """run_one for a real run: playbooks/verify.yml over one slice (--limit @its hosts file) into its own run
    directory, through verify.fleet.run's runner code, as an unsliced `verify -i` runs it."""

    def run_one(job: SliceJob) -> SliceResult:
        slice_args = copy.copy(args)
        slice_args.limit = "@" + job.limit_file
        progress = playbook.progress()
        began = time.perf_counter()
        before = _children_cpu()
        outcome = playbook.run(slice_args, Path(job.run_dir), progress)
        return SliceResult(job.index, outcome.rc, str(outcome.status), dict(progress.failed),
                           sorted(progress.unreachable), time.perf_counter() - began, _children_cpu() - before)

    return run_one


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class SlicedOutcome:
    """What verify.fleet.run.finish reads of a run: its rc and status (the worst slice's)."""

    rc: Optional[int]
    status: str
    results: list


def run_sliced(args, run_dir: Path, hosts: Sequence[str], progress, playbook: Optional[Playbook] = None,
               run_one: Optional[Callable[[SliceJob], SliceResult]] = None, write: Callable[[str], None] = print,
               inventory_list: Optional[dict] = None) -> SlicedOutcome:
    """`tunefleet verify -i INV --slices N`: the hosts planned into slices, each slice's playbook run at once
    into <run>/slices/slice-NN, their host directories and side files joined into run_dir and the fleet report
    built there once. progress (verify.fleet.run.Progress) gets every slice's failed and unreachable hosts."""
    count = slice_count(str(args.slices))
    prefix = getattr(args, "slice_by", None)
    try:
        if CONTROLLER in hosts and count > 1:
            raise SliceError(f"--slices: the inventory names {CONTROLLER} as a host to verify, and every slice's "
                             f"controller plays run there: verify it in a run of its own (--limit '!{CONTROLLER}' "
                             "for the sliced run)")
        if prefix and inventory_list is None:
            inventory_list = inventory_groups(args.inventory, playbook.env)
        plan = plan_slices(hosts, count, rack_units(inventory_list or {}, prefix) if prefix else None)
    except SliceError as exc:
        write(f"tunefleet verify: {exc}")
        return SlicedOutcome(2, "refused before any slice ran", [])
    jobs = slice_jobs(str(run_dir), plan)
    write(f"{len(hosts)} hosts in {len(jobs)} slices of {min(map(len, plan))} to {max(map(len, plan))} hosts, "
          f"run at once ({os.cpu_count() or 1} cores here)")
    if run_one is None:
        run_one = playbook_slice(args, playbook)
    results = run_jobs(jobs, run_one)
    for job, result in zip(jobs, results):
        progress.failed.update(result.failed)
        progress.unreachable.update(result.unreachable)
        if result.rc != 0 or result.status != "successful":
            write(f"slice {job.index} of {len(jobs)} ({len(job.hosts)} hosts, {job.hosts[0]} .. {job.hosts[-1]}) "
                  f"ended {result.status} (rc {result.rc}): its hosts without a report are named below")
            unpack_leftovers(job.run_dir, write)
    joined = join_run_dirs([job.run_dir for job in jobs], str(run_dir), move=True)
    for note in joined.notes:
        write(f"tunefleet verify: WARN {for_terminal(note)}")
    build_fleet_report(str(run_dir), getattr(args, "world_readable", False))
    worst = next((r for r in results if r.rc != 0 or r.status != "successful"), None)
    if worst is None:
        return SlicedOutcome(0, "successful", results)
    return SlicedOutcome(worst.rc if worst.rc not in (0, None) else 1, worst.status, results)


def unpack_leftovers(slice_dir: str, write: Callable[[str], None]) -> None:
    """A slice whose play stopped before its own unpack (verify.fleet.unpack) keeps the archives its nodes sent:
    unpacked here, so every report that came back is in the fleet report."""
    from verify.fleet.unpack import main as unpack

    if os.path.isfile(os.path.join(slice_dir, "fleet_report.json")):
        return
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        unpack([slice_dir])
    for line in out.getvalue().splitlines():
        write(f"  {line}")


def build_fleet_report(run_dir: str, world_readable: bool = False) -> int:
    """The fleet report over the joined run directory, in the formats the playbook's last play writes (the
    summary is printed by verify.fleet.run.finish)."""
    from verify.fleet.report import main as build

    with contextlib.redirect_stdout(io.StringIO()):
        return build(argparse.Namespace(directory=run_dir, format="json,md,html,junit", out=None,
                                        world_readable=world_readable, baseline=None, rules=None))


INVENTORY_TIMEOUT_S = 300  # as verify.fleet.run's: a dynamic inventory asks a cloud API, a hung one must not hang


def inventory_groups(inventory: str, env: Callable) -> dict:
    """ansible-inventory --list of the inventory (already checked by verify.fleet.run.check_inventory), run as
    every Ansible command is (env: verify.fleet.run.ansible_env, in `/`): the groups --slice-by reads."""
    from verify.runner import DEFAULT_CWD, run_command

    tool = Path(sys.executable).parent / "ansible-inventory"
    argv = [str(tool) if tool.exists() else "ansible-inventory", "-i", os.path.abspath(inventory), "--list"]
    done = run_command(argv, timeout_s=INVENTORY_TIMEOUT_S, env=env({"ANSIBLE_NOCOLOR": "1"}), cwd=DEFAULT_CWD)
    if not done.ok:
        raise SliceError(f"--slice-by: ansible-inventory --list of {inventory} failed: {done.stderr.strip()[:300]}")
    try:
        data = loads_json_bytes_bounded(done.stdout.encode("utf-8"), f"ansible-inventory --list of {inventory}")
    except BoundedLoadError as exc:
        raise SliceError(f"--slice-by: {exc}") from None
    return data if isinstance(data, dict) else {}
