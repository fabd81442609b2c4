"""Pairwise NCCL on a simulated 1,000-host fleet: are the planted faults named within 3 rounds, and no
healthy host blamed? And how long does planning take for 10,000 hosts?

The planner and the blame are the real ones (verify/fleet/pairing.py, verify/fleet/blame.py); only the
measurement is simulated: a pair's busbw on a rail = the rail's nominal figure x the slower end's
health x the path's health x (1 + 1% Gaussian noise), judged against a floor at 80% of nominal.
Planted: one node slow on every rail, one rail slow on another node, and one node slow only with
one partner (a bad switch path between them: the partner is its round-1 partner, the only one it
meets in a quick run, so the fault is exercised).

    .venv/bin/python benchmarks/pairwise_sim.py [--hosts 1000] [--rails 8] [--seed 1]
Exit 0 when every planted fault is named in <= 3 rounds with 0 healthy hosts blamed.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from verify.fleet.blame import blame_pairs  # noqa: E402
from verify.fleet.pairing import FAIL, MAX_QUICK_ROUNDS, PASS, Outcome, plan_round  # noqa: E402

NOMINAL_GBPS = 48.0  # one 400 Gb/s rail, two ranks: ~48 GB/s busbw
FLOOR_GBPS = 0.8 * NOMINAL_GBPS


def simulate(n_hosts: int, n_rails: int, seed: int) -> dict:
    rng = random.Random(seed)
    hosts = [f"gpu-{i:05d}" for i in range(n_hosts)]
    rails = [f"mlx5_{r}" for r in range(n_rails)]
    rails_by_host = {h: rails for h in hosts}
    slow_node, slow_rail_host = hosts[137], hosts[420]
    slow_rail = rails[3]
    first = plan_round(hosts, rails_by_host, [], 1)
    path_host = hosts[777]
    path_partner = next(t.a if t.b == path_host else t.b for t in first if path_host in (t.a, t.b))
    bad_path = frozenset((path_host, path_partner))

    def health(host: str, rail: str) -> float:
        if host == slow_node:
            return 0.45
        if host == slow_rail_host and rail == slow_rail:
            return 0.3
        return 1.0

    outcomes: list = []
    rounds_used = 0
    for round_no in range(1, MAX_QUICK_ROUNDS + 1):
        tests = first if round_no == 1 else plan_round(hosts, rails_by_host, outcomes, round_no)
        if not tests:
            break
        rounds_used = round_no
        for test in tests:
            path = 0.5 if frozenset((test.a, test.b)) == bad_path else 1.0
            for rail in test.rails:
                busbw = NOMINAL_GBPS * min(health(test.a, rail), health(test.b, rail)) * path \
                    * (1 + rng.gauss(0, 0.01))
                outcomes.append(Outcome(test.a, test.b, rail, PASS if busbw >= FLOOR_GBPS else FAIL, round_no,
                                        round(busbw, 2), FLOOR_GBPS))
    findings = blame_pairs(hosts, rails_by_host, outcomes)
    blamed = {h for b in findings if b.kind in ("node", "rail") for h in b.hosts}
    named = {
        "slow node": any(b.kind == "node" and b.hosts == (slow_node,) for b in findings),
        "slow rail": any(b.kind == "rail" and b.hosts == (slow_rail_host,) and b.rails == (slow_rail,)
                         for b in findings),
        "slow path": any(b.kind == "path" and set(b.hosts) == bad_path for b in findings),
    }
    return {"rounds": rounds_used, "named": named, "blamed": sorted(blamed),
            "healthy_blamed": sorted(blamed - {slow_node, slow_rail_host}),
            "other_findings": [f"{b.kind}: {b.reason}" for b in findings if b.kind not in ("node", "rail", "path")],
            "pair_tests": len(outcomes)}


def planner_seconds(n_hosts: int, n_rails: int) -> float:
    """Plan round 1, fail the first 1% of pairs, plan round 2 and blame: the controller's work per run."""
    hosts = [f"gpu-{i:05d}" for i in range(n_hosts)]
    rails = [f"mlx5_{r}" for r in range(n_rails)]
    rails_by_host = {h: rails for h in hosts}
    began = time.perf_counter()
    tests = plan_round(hosts, rails_by_host, [], 1)
    failing = len(tests) // 100
    outcomes = [Outcome(t.a, t.b, r, FAIL if i < failing else PASS, 1, 40.0, FLOOR_GBPS)
                for i, t in enumerate(tests) for r in t.rails]
    second = plan_round(hosts, rails_by_host, outcomes, 2)
    blame_pairs(hosts, rails_by_host, outcomes)
    elapsed = time.perf_counter() - began
    assert len(second) == 2 * failing + (n_hosts % 2), "every suspect of round 1 is re-tested in round 2"
    return elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--rails", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    sim = simulate(args.hosts, args.rails, args.seed)
    print(f"simulated fleet: {args.hosts} hosts x {args.rails} rails, {sim['pair_tests']} rail tests")
    print(f"rounds used: {sim['rounds']} (limit {MAX_QUICK_ROUNDS})")
    for fault, ok in sim["named"].items():
        print(f"planted {fault}: {'named' if ok else 'NOT named'}")
    print(f"nodes blamed: {len(sim['blamed'])} {sim['blamed']}")
    print(f"healthy nodes blamed: {len(sim['healthy_blamed'])} {sim['healthy_blamed']}")
    for line in sim["other_findings"]:
        print(f"other finding: {line}")
    for n in (1000, 10000):
        print(f"planner time for {n} hosts x {args.rails} rails (round 1 + round 2 + blame): "
              f"{planner_seconds(n, args.rails):.3f} s")
    ok = all(sim["named"].values()) and not sim["healthy_blamed"] and sim["rounds"] <= MAX_QUICK_ROUNDS \
        and not sim["other_findings"]
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
