"""The controller's side of a whole fleet run, simulated at 1,000 and 10,000 hosts (issue 38 item 4): each
phase timed with the real code, and the ratio of its 10,000-host time to its 1,000-host time (about 10-13
is linear-log; about 100 would be quadratic).

    .venv/bin/python benchmarks/fleet_sim_scale.py [--hosts 1000 10000] [--rails 8] [--peers 3] [--parallel]

Phases, in the order a `tunefleet verify -i` run reaches them once the nodes have answered:
  peer lists    every host's path MTU peers (plugins/filter/verify_node_peers.py, the run_once task)
  plans         pairwise NCCL rounds 1-3 (verify.fleet.pairing.plan_round) and pairwise RDMA quick +
                retest + verdicts, with 10 % of round one's pairs failing (a bad day: a switch down)
  blame         pairwise NCCL blame, each host's result and the pairs summary written
                (verify.fleet.blame.write_pairwise); path MTU blame (blame_path_mtu) over every host's
                path MTU results
  history       the run recorded (verify.fleet.recording.record_fleet: every report appended in one
                transaction, the regression pass, fleet_regressions.json), over a history holding one
                earlier run of the fleet
  report        `tunefleet report DIR`: read every node report, the fleet model (outliers, drift, path MTU
                blame), write JSON, Markdown, HTML and JUnit
  baseline      `tunefleet baseline`: the document from the reports and the history, then every node judged

Node reports: the real captured one (tests/fixtures/fleet, README there) made into N hosts by
verify/fleet/synthetic.py, each host with its own kernel boot id and its path MTU results from the real
check's judge (verify/checks/path_mtu.py) on captured pings (tests/fixtures/node/commands) to the peers
the filter gave it; one host's switch port is left small, so the blame has a host to name.
The node reports are read by one process (load_fleet_dir above PARALLEL_FROM reports uses every CPU,
which would hide the growth in the ratio); --parallel measures as `tunefleet report` runs.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verify.checks import path_mtu  # noqa: E402
from verify.fleet import baseline, model  # noqa: E402
from verify.fleet.blame import blame_path_mtu, write_pairwise  # noqa: E402
from verify.fleet.pairing import (  # noqa: E402
    FAIL,
    MAX_QUICK_ROUNDS,
    PASS,
    Outcome,
    PairResult,
    plan_round,
    quick_rounds,
    retest_round,
    verdicts,
)
from verify.fleet.recording import record_fleet  # noqa: E402
from verify.fleet.report import FORMATS, read_addresses, read_pairs, read_regressions, write_reports  # noqa: E402
from verify.fleet.summary import build_summary  # noqa: E402
from verify.fleet.synthetic import derive_hosts, write_fleet  # noqa: E402
from verify.history import regress  # noqa: E402
from verify.history.cli import RunHistory  # noqa: E402
from verify.history.store import open_store  # noqa: E402

FLEET_FIXTURES = ROOT / "tests" / "fixtures" / "fleet"
PINGS = ROOT / "tests" / "fixtures" / "node" / "commands"
NOMINAL_GBPS = 48.0  # one 400 Gb/s rail, two ranks (benchmarks/pairwise_sim.py)
FLOOR_GBPS = 0.8 * NOMINAL_GBPS
BAD_DAY = 0.10  # share of round one's pairs that fail on one rail
PHASES = ("peer lists", "plans", "blame", "history", "report", "baseline")


def load_filter():
    """The filter plugin, loaded from its file as Ansible loads it (plugins/ is no Python package)."""
    spec = importlib.util.spec_from_file_location("verify_node_peers", ROOT / "plugins/filter/verify_node_peers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_names(count: int) -> list:
    return [f"gpu-{i:05d}" for i in range(count)]


def rail_addresses(count: int, rails: int) -> dict:
    """host -> {rail: address}, as each host publishes them (verify_node_path_mtu_addresses)."""
    return {h: {f"mlx5_{r}": f"10.{r}.{i // 250}.{i % 250 + 1}" for r in range(rails)}
            for i, h in enumerate(host_names(count))}


def ping(name: str) -> path_mtu.PingOutcome:
    record = json.loads((PINGS / f"{name}.json").read_text(encoding="utf-8"))
    return path_mtu.parse_ping(record["stdout"], record["stderr"])


def path_mtu_results(plan: dict, owner: dict, bad: str) -> dict:
    """host -> its path MTU result dicts, judged by the real check from captured pings: a jumbo frame that
    vanishes at the bad host's port (it answers small pings), else a clean 9000-byte reply."""
    ok, dropped, small = ping("ping_ok_9000"), ping("ping_silent_drop"), ping("ping_small_ok")
    return {host: [path_mtu.judge(peer, 9000, *((dropped, small) if bad in (host, owner[peer]) else (ok, None)))
                   .to_dict() for peer in peers]
            for host, peers in plan.items()}


class Clock:
    """Wall and CPU seconds of this process (on a shared machine, CPU is what the code costs; the wall
    adds the waits for the other tenants and for the disk's fsyncs)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __add__(self, other: Clock) -> Clock:
        total = Clock()
        total.wall, total.cpu = self.wall + other.wall, self.cpu + other.cpu
        return total


def timed(func, *args, **kwargs) -> tuple:
    clock = Clock()
    wall, cpu = time.perf_counter(), time.process_time()
    value = func(*args, **kwargs)
    clock.wall, clock.cpu = time.perf_counter() - wall, time.process_time() - cpu
    return clock, value


def plans(hosts: list, rails: list) -> tuple:
    """The planners of one run, timed alone (the simulated measurements are not): (Clock, outcomes,
    rdma verdicts)."""
    rng = random.Random(5)
    rails_by_host = {h: rails for h in hosts}
    spent = Clock()
    outcomes: list = []
    for round_no in range(1, MAX_QUICK_ROUNDS + 1):
        seconds, tests = timed(plan_round, hosts, rails_by_host, outcomes, round_no)
        spent += seconds
        for test in tests:
            fails = round_no == 1 and rng.random() < BAD_DAY
            for rail in test.rails:
                busbw = NOMINAL_GBPS * (0.5 if fails and rail == rails[0] else 1.0) * (1 + rng.gauss(0, 0.01))
                outcomes.append(Outcome(test.a, test.b, rail, PASS if busbw >= FLOOR_GBPS else FAIL, round_no,
                                        round(busbw, 2), FLOOR_GBPS))
    seconds, rounds = timed(quick_rounds, hosts)
    spent += seconds
    results = [PairResult(a, b, rng.random() >= BAD_DAY) for pairs in rounds for a, b in pairs]
    seconds, retest = timed(retest_round, hosts, results)
    spent += seconds
    results += [PairResult(a, b, True) for a, b in retest]
    seconds, judged = timed(verdicts, hosts, results)
    return spent + seconds, outcomes, judged


def simulate(count: int, rails_count: int, peers_per_interface: int, work: Path, peers_filter) -> dict:
    hosts = host_names(count)
    rails = [f"mlx5_{r}" for r in range(rails_count)]
    seconds: dict = {}
    published = rail_addresses(count, rails_count)
    seconds["peer lists"], plan = timed(peers_filter.verify_node_path_mtu_peer_map, published, peers_per_interface)
    probes = {len(p) for p in plan.values()}

    seconds["plans"], outcomes, rdma = plans(hosts, rails)

    # The run directory as the play leaves it: node reports, addresses, the pairwise results.
    run_dir = work / f"run-{count}-b"
    report, measurement = (json.loads((FLEET_FIXTURES / "node_report_ci_vm.json").read_text()),
                           json.loads((FLEET_FIXTURES / "crossnode_allreduce_gloo_2node.json").read_text())[0])
    owner = {addr: host for host, by_rail in published.items() for addr in by_rail.values()}
    bad = hosts[count // 3]
    mtu_results = path_mtu_results(plan, owner, bad)
    generated = derive_hosts(report, measurement, count, slow_hosts=4, odd_driver_hosts=3)
    for index, node in enumerate(generated):
        node["facts"]["boot_id"] = f"00000000-0000-4000-8000-{index:012d}"  # one machine per host
        node["results"].extend(mtu_results[node["host"]])
    write_fleet(run_dir, generated)
    del generated, mtu_results
    (run_dir / model.ADDRESSES_NAME).write_text(json.dumps({h: list(a.values()) for h, a in published.items()}))

    reported = {h: {"rails": {r: {"address": published[h][r]} for r in rails}, "error": ""} for h in hosts}
    blame_pairs_s, summary = timed(write_pairwise, str(run_dir), reported, outcomes)
    nodes_for_blame = [model.parse_node_report(json.loads((run_dir / h / model.NODE_REPORT_NAME).read_text()), h)
                       for h in hosts]
    blame_mtu_s, blamed = timed(blame_path_mtu, nodes_for_blame, {h: list(a.values()) for h, a in published.items()})
    del nodes_for_blame
    seconds["blame"] = blame_pairs_s + blame_mtu_s

    # The history holds the same fleet's previous run (recorded untimed under another run key).
    history = work / f"history-{count}.sqlite"
    previous = work / f"run-{count}-a"
    os.rename(run_dir, previous)
    prepared = RunHistory(open_store(str(history)), regress.Settings(), argparse.Namespace())
    record_fleet(prepared, str(previous))
    os.rename(previous, run_dir)
    seconds["history"], document = timed(record_fleet, prepared, str(run_dir))
    prepared.close()

    # `tunefleet report DIR`, step by step as verify.fleet.report.main runs it.
    read_s, (nodes, errors) = timed(model.load_fleet_dir, str(run_dir))

    def model_and_write():
        side: list = []
        addresses = read_addresses(run_dir, side)
        regressions = read_regressions(run_dir, side)
        pairs = read_pairs(run_dir, side)
        fleet_ = build_summary(nodes, errors + side, addresses)
        fleet_.regressions = regressions
        with contextlib.redirect_stdout(io.StringIO()):
            write_reports(fleet_, run_dir, FORMATS, pairs=pairs)
        return fleet_

    rest_s, fleet = timed(model_and_write)
    seconds["report"] = read_s + rest_s

    def baseline_phase():
        with open_store(str(history), create=False) as store:
            past = store.latest_runs(baseline.HISTORY_RUNS)
        document_ = baseline.build(nodes, past)
        return document_, baseline.judge(nodes, document_)

    seconds["baseline"], (base_doc, base_findings) = timed(baseline_phase)
    shutil.rmtree(run_dir, ignore_errors=True)
    return {
        "seconds": seconds, "probes_per_host": sorted(probes), "report_read_cpu_s": read_s.cpu,
        "pair_tests": len(outcomes), "pair_findings": len(summary["findings"]),
        "rdma_bad": sum(v == "bad" for v in rdma.values()),
        "mtu_blamed": sorted(blamed), "planted_mtu": bad, "bad_hosts": len(fleet.bad_hosts),
        "regressions": len(document["regressions"]) if document else None,
        "baseline_profiles": len(base_doc["profiles"]), "baseline_findings": len(base_findings),
    }


def _ratio(small: Clock, large: Clock, sizes: int) -> str:
    if sizes < 2:
        return ""
    return f"{large.cpu / small.cpu:>8.1f}" if small.cpu > 0 else f"{'-':>8}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rails", type=int, default=8)
    parser.add_argument("--peers", type=int, default=3, help="path MTU peers per host and interface")
    parser.add_argument("--parallel", action="store_true", help="read node reports with every CPU, as the CLI does")
    args = parser.parse_args(argv)
    if not args.parallel:
        model.PARALLEL_FROM = sys.maxsize
    peers_filter = load_filter()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.rails} rails, "
          f"{args.peers} path MTU peers per host and rail; node reports read by "
          f"{'every CPU' if args.parallel else 'one process'}")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="tunefleet-fleet-sim-") as tmp:
        for count in args.hosts:
            runs[count] = simulate(count, args.rails, args.peers, Path(tmp), peers_filter)
            r = runs[count]
            print(f"{count} hosts: path MTU probes per host {r['probes_per_host']} "
                  f"(all pairs: {(count - 1) * args.rails}); {r['pair_tests']} pair rail tests, "
                  f"{r['pair_findings']} pairwise findings, {r['rdma_bad']} RDMA hosts bad; path MTU blamed "
                  f"{r['mtu_blamed']} (planted {r['planted_mtu']}); {r['bad_hosts']} bad hosts in the report; "
                  f"{r['regressions']} regressions; baseline {r['baseline_profiles']} profile(s), "
                  f"{r['baseline_findings']} finding(s); report: reading the node reports "
                  f"{r['report_read_cpu_s']:.2f} s of CPU")
    counts = sorted(runs)
    ratio = f"{f'{counts[-1]}/{counts[0]}':>8}" if len(counts) > 1 else ""
    print(f"{'phase':<12}" + "".join(f"{f'{c} hosts CPU (wall)':>26}" for c in counts) + ratio + " (CPU)")
    totals = {c: Clock() for c in counts}
    for phase in PHASES:
        row = f"{phase:<12}"
        for c in counts:
            clock = runs[c]["seconds"][phase]
            totals[c] = totals[c] + clock
            row += f"{clock.cpu:>14.3f} s ({clock.wall:7.2f} s)"
        print(row + _ratio(runs[counts[0]]["seconds"][phase], runs[counts[-1]]["seconds"][phase], len(counts)))
    print(f"{'total':<12}" + "".join(f"{totals[c].cpu:>14.3f} s ({totals[c].wall:7.2f} s)" for c in counts)
          + _ratio(totals[counts[0]], totals[counts[-1]], len(counts)))
    ok = all(r["mtu_blamed"] == [r["planted_mtu"]] and r["probes_per_host"] == [args.peers * args.rails]
             for c, r in runs.items() if c > args.peers + 1)
    print("OK: the planted path MTU host is blamed at every size, probes per host bounded" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
