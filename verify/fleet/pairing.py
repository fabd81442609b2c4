"""Which hosts test RDMA bandwidth against which, and who is to blame when a pair is slow.

A pair test measures two nodes at once, so one slow pair names two suspects. The quick pairing
tests every node once (N/2 pairs at the same time); the full pairing tests every pair, in rounds
where no node is in two tests at once. A node that fails with one partner is re-tested with a
partner that has passed; only a node that fails with two different partners (or with a known-good
one) is marked bad. The controller runs this module (`python3 -m verify.fleet.pairing`) to plan the
rounds the playbook runs.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence


@dataclass(frozen=True)
class PairResult:
    server: str
    client: str
    passed: bool


def quick_rounds(hosts: Sequence[str]) -> list:
    """Every host in exactly one pair of the first round; an odd host out pairs with the first host
    in a second round (that host is busy in round one)."""
    hosts = list(dict.fromkeys(hosts))
    if len(hosts) < 2:
        return []
    first = [(hosts[i], hosts[i + 1]) for i in range(0, len(hosts) - 1, 2)]
    rounds = [first]
    if len(hosts) % 2:
        rounds.append([(hosts[-1], hosts[0])])
    return rounds


def full_rounds(hosts: Sequence[str]) -> list:
    """Every unordered pair once, as a round-robin schedule (circle method): N-1 rounds for even N,
    N rounds for odd N, each round a set of disjoint pairs."""
    hosts = list(dict.fromkeys(hosts))
    if len(hosts) < 2:
        return []
    ring: list = hosts + ([None] if len(hosts) % 2 else [])
    size = len(ring)
    rounds = []
    for _ in range(size - 1):
        pairs = [(ring[i], ring[size - 1 - i]) for i in range(size // 2)]
        rounds.append([p for p in pairs if None not in p])
        ring = [ring[0], ring[-1]] + ring[1:-1]
    return rounds


def retest_round(hosts: Sequence[str], results: Iterable[PairResult]) -> list:
    """Pairs that re-test each suspect (failed, never passed, not yet failed twice) with a partner
    that has passed and that it has not been tested with; each good partner serves one suspect."""
    results = list(results)
    passed = _hosts_with(results, True)
    failed_with = _partners(results, passed_flag=False)
    suspects = [h for h in hosts if h in failed_with and h not in passed and len(failed_with[h]) < 2]
    busy: set = set()
    pairs = []
    for suspect in suspects:
        tried = failed_with[suspect] | _partners(results, passed_flag=True).get(suspect, set())
        partner = next((h for h in hosts if h in passed and h not in busy and h not in tried and h != suspect), None)
        if partner is None:
            continue
        busy.add(partner)
        pairs.append((partner, suspect))
    return pairs


def verdicts(hosts: Sequence[str], results: Iterable[PairResult]) -> dict:
    """host -> 'good' | 'bad' | 'suspect' | 'untested'.

    good: passed with some partner. bad: failed with two different partners, or with a partner
    known to be good. suspect: failed once and no good partner was left to clear or convict it.
    """
    results = list(results)
    passed = _hosts_with(results, True)
    failed_with = _partners(results, passed_flag=False)
    out = {}
    for host in hosts:
        if host in passed:
            out[host] = "good"
        elif host not in failed_with:
            out[host] = "untested"
        elif len(failed_with[host]) >= 2 or failed_with[host] & passed:
            out[host] = "bad"
        else:
            out[host] = "suspect"
    return out


def _hosts_with(results: list, passed: bool) -> set:
    return {h for r in results if r.passed is passed for h in (r.server, r.client)}


def _partners(results: list, passed_flag: bool) -> dict:
    partners: dict = {}
    for r in results:
        if r.passed is passed_flag:
            partners.setdefault(r.server, set()).add(r.client)
            partners.setdefault(r.client, set()).add(r.server)
    return partners


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.pairing", description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("quick", "full", "retest", "verdicts"))
    parser.add_argument("--hosts", required=True, help="JSON list of host names")
    parser.add_argument("--results", default="[]", help="JSON list of {server, client, passed}")
    args = parser.parse_args(argv)
    try:
        hosts = json.loads(args.hosts)
        results = [PairResult(str(r["server"]), str(r["client"]), bool(r["passed"])) for r in json.loads(args.results)]
    except (ValueError, KeyError, TypeError) as exc:
        print(f"pairing: bad --hosts or --results: {exc}", file=sys.stderr)
        return 2
    if args.mode == "quick":
        answer = quick_rounds(hosts)
    elif args.mode == "full":
        answer = full_rounds(hosts)
    elif args.mode == "retest":
        answer = retest_round(hosts, results)
    else:
        answer = verdicts(hosts, results)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
