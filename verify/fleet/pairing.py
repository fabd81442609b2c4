"""Which hosts test RDMA bandwidth against which, and who is to blame when a pair is slow.

A pair test measures two nodes at once, so one slow pair names two suspects. The quick pairing
tests every node once (N/2 pairs at the same time); the full pairing tests every pair, in rounds
where no node is in two tests at once. A node that fails with one partner is re-tested with a
partner that has passed; only a node that fails with two different partners (or with a known-good
one) is marked bad. The controller runs this module (`python3 -m verify.fleet.pairing`) to plan the
rounds the playbook runs.

The pairwise NCCL test plans per rail (an HCA or cluster NIC, the same name on every node): a unit is
(host, rail), a round is a list of disjoint PairTests each naming the rails both ends have, and
plan_round(round 1 -> quick pairing; later rounds -> every unsettled unit with a partner that passed)
settles a quick run in at most MAX_QUICK_ROUNDS. Every step is linear in the outcomes, so 10,000 hosts
plan in well under a second. Who is then blamed, and with what evidence, is verify/fleet/blame.py's.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from verify.bounded_load import load_json_bounded, loads_json_bounded


@dataclass(frozen=True)
class PairResult:
    server: str
    client: str
    passed: bool


# A quick run: round 1 pairs every host once; rounds 2 and 3 re-test what round 1 left unsettled.
MAX_QUICK_ROUNDS = 3
# Outcome statuses of one pair test on one rail.
PASS, FAIL, ERROR = "pass", "fail", "error"


@dataclass(frozen=True)
class PairTest:
    """One pair test of a round: both hosts start at once; `rails` run one after the other."""

    a: str
    b: str
    rails: tuple

    def to_json(self) -> list:
        return [self.a, self.b, list(self.rails)]


@dataclass(frozen=True)
class Outcome:
    """One pair test on one rail. `culprit`: for ERROR, the host that could not take part (unreachable,
    the rail absent), "" when the error names neither end."""

    a: str
    b: str
    rail: str
    status: str
    round: int = 1
    busbw_gbps: Optional[float] = None
    floor_gbps: Optional[float] = None
    culprit: str = ""
    reason: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> Outcome:
        status = str(data["status"]).lower()
        if status not in (PASS, FAIL, ERROR):
            raise ValueError(f"outcome status {data['status']!r} is not pass, fail or error")
        return cls(str(data["a"]), str(data["b"]), str(data.get("rail", "all")), status, int(data.get("round", 1)),
                   _number(data.get("busbw_gbps")), _number(data.get("floor_gbps")), str(data.get("culprit") or ""),
                   str(data.get("reason") or ""))

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "rail": self.rail, "status": self.status, "round": self.round,
                "busbw_gbps": self.busbw_gbps, "floor_gbps": self.floor_gbps, "culprit": self.culprit,
                "reason": self.reason}


@dataclass
class Unit:
    """What the outcomes say about one (host, rail)."""

    passed_with: set
    failed_with: set
    errors: int = 0


def _number(value) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def unit_states(outcomes: Iterable[Outcome]) -> dict:
    """(host, rail) -> Unit. An ERROR counts against its culprit only (or both ends when it names none)."""
    units: dict = {}
    for o in outcomes:
        for me, other in ((o.a, o.b), (o.b, o.a)):
            unit = units.get((me, o.rail))
            if unit is None:
                unit = units[(me, o.rail)] = Unit(set(), set())
            if o.status == PASS:
                unit.passed_with.add(other)
            elif o.status == FAIL:
                unit.failed_with.add(other)
            elif o.culprit in ("", me):
                unit.errors += 1
    return units


def unit_verdict(host: str, rail: str, units: dict) -> str:
    """'good' | 'bad' | 'suspect' | 'error' | 'untested' for one (host, rail).

    good: passed with some partner. bad: failed with two partners, or with one that passed with a
    third. suspect: failed, nothing settles it yet. error: only errors (could not take part).
    """
    unit = units.get((host, rail))
    if unit is None:
        return "untested"
    if unit.passed_with:
        return "good"
    if unit.failed_with:
        if len(unit.failed_with) >= 2:
            return "bad"
        partner = next(iter(unit.failed_with))
        other = units.get((partner, rail))
        if other is not None and other.passed_with:
            return "bad"
        return "suspect"
    return "error" if unit.errors else "untested"


def fleet_rails(rails_by_host: dict) -> list:
    """Every rail some host has, in a stable order."""
    return sorted({r for rails in rails_by_host.values() for r in rails})


def plan_round(hosts: Sequence[str], rails_by_host: dict, outcomes: Iterable[Outcome], round_no: int) -> list:
    """The PairTests of round `round_no` (1-based) of a quick run.

    Round 1 pairs every host once (an odd host out waits for round 2, where it meets a partner that
    passed). Later rounds pair each host with an unsettled rail (suspect, or never measured because
    its partner could not take part) with a host it has not met yet that passed on that rail, and the
    test runs every shared rail that one end has unsettled and the other has passed: partners are
    chosen per rail, never "good on every rail", so two pairs that each failed a different rail in
    round 1 settle each other in round 2 (a host can be a suspect on one rail and the known-good
    partner on another). Each host is in one test per round. A host that was ever the culprit of an
    error (unreachable) is not planned again: it would only stall its partner.
    """
    hosts = list(dict.fromkeys(hosts))
    rails_of = {h: tuple(sorted(set(rails_by_host.get(h) or ()))) for h in hosts}
    if round_no <= 1:
        tests = []
        for i in range(0, len(hosts) - 1, 2):
            a, b = hosts[i], hosts[i + 1]
            shared = tuple(r for r in rails_of[a] if r in set(rails_of[b]))
            if shared:
                tests.append(PairTest(a, b, shared))
        return tests
    if round_no > MAX_QUICK_ROUNDS:
        return []
    outcomes = list(outcomes)
    units = unit_states(outcomes)
    culprits = {o.culprit for o in outcomes if o.status == ERROR and o.culprit}
    met = {frozenset((o.a, o.b)) for o in outcomes}
    open_rails: dict = {}
    good_rails: dict = {}
    good_on: dict = {}  # rail -> hosts that passed on it, in fleet order
    for host in hosts:
        if host in culprits:
            continue
        verdicts_here = {rail: unit_verdict(host, rail, units) for rail in rails_of[host]}
        unsettled = tuple(rail for rail, v in verdicts_here.items() if v in ("suspect", "untested", "error"))
        if unsettled:
            open_rails[host] = unsettled
        good_rails[host] = frozenset(rail for rail, v in verdicts_here.items() if v == "good")
        for rail in good_rails[host]:
            good_on.setdefault(rail, []).append(host)
    busy: set = set()
    tests = []
    cursor = dict.fromkeys(good_on, 0)  # busy hosts stay busy all round: never scanned again
    for host, unsettled in open_rails.items():
        if host in busy:
            continue
        partner = _free_partner(host, unsettled, good_on, cursor, busy, met)
        if partner is None:
            continue  # a fleet with many suspects and few good partners leaves the rest for the next round
        partner_open = open_rails.get(partner, ())
        rails = tuple(r for r in rails_of[host] if r in rails_of[partner] and (
            (r in unsettled and r in good_rails[partner]) or (r in partner_open and r in good_rails[host])))
        busy.update((host, partner))
        tests.append(PairTest(partner, host, rails))
    return tests


def _free_partner(host: str, unsettled: tuple, good_on: dict, cursor: dict, busy: set, met: set) -> Optional[str]:
    """The first host not busy this round, not yet met, that passed on one of `unsettled`. Busy hosts
    at the front of a rail's list are skipped for good (cursor), so a round stays near-linear."""
    for rail in unsettled:
        candidates = good_on.get(rail, ())
        start = cursor.get(rail, 0)
        while start < len(candidates) and candidates[start] in busy:
            start += 1
        cursor[rail] = start
        for index in range(start, len(candidates)):
            partner = candidates[index]
            if partner != host and partner not in busy and frozenset((host, partner)) not in met:
                return partner
    return None


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
    that has passed and that it has not been tested with; each good partner serves one suspect.

    Partners are the hosts that passed, in fleet order; the busy ones at the front are skipped for good
    (cursor), so a bad day with thousands of suspects stays near-linear, not a scan of the fleet each."""
    results = list(results)
    passed = _hosts_with(results, True)
    failed_with = _partners(results, passed_flag=False)
    suspects = [h for h in hosts if h in failed_with and h not in passed and len(failed_with[h]) < 2]
    passed_with = _partners(results, passed_flag=True)
    candidates = [h for h in dict.fromkeys(hosts) if h in passed]
    busy: set = set()
    cursor = 0
    pairs = []
    for suspect in suspects:
        tried = failed_with[suspect] | passed_with.get(suspect, set())
        while cursor < len(candidates) and candidates[cursor] in busy:
            cursor += 1
        partner = next((candidates[i] for i in range(cursor, len(candidates))
                        if candidates[i] not in busy and candidates[i] not in tried), None)
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


def rails_of_hosts(data: dict) -> dict:
    """host -> [rail names] from {host: [rail, ...]} or from what `python -m verify.fleet.nccl_pair rails`
    printed on each host, {host: {"rails": {name: {...}}, "error": "..."}} (a host with an error has none)."""
    out = {}
    for host, value in data.items():
        if isinstance(value, dict):
            value = [] if value.get("error") else list(value.get("rails") or {})
        out[str(host)] = [str(r) for r in value]
    return out


def load_outcomes(paths: Sequence[str]) -> list:
    """Every Outcome in these JSON files (each a list of Outcome dicts, as nccl_pair collect writes)."""
    outcomes = []
    for path in paths:
        data = load_json_bounded(path, what="pair outcomes")
        outcomes.extend(Outcome.from_dict(o) for o in (data if isinstance(data, list) else [data]))
    return outcomes


def _arg(text: str):
    """A JSON argument, or @FILE holding it (a 1,000-host fleet's outcomes do not fit one argv string)."""
    if text.startswith("@"):
        return load_json_bounded(text[1:], what="argument file")
    return loads_json_bounded(text, "argument")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.pairing", description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("quick", "full", "retest", "verdicts", "round"))
    parser.add_argument("--hosts", required=True, help="JSON list of host names (or @FILE)")
    parser.add_argument("--results", default="[]",
                        help="JSON list of {server, client, passed}; round: of outcomes (or @FILE)")
    parser.add_argument("--outcomes", nargs="*", default=[], help="round: files of earlier rounds' outcomes")
    parser.add_argument("--rails", default="{}", help="round: JSON {host: [rail, ...]} (or @FILE)")
    parser.add_argument("--round", type=int, default=1, help="round: which round to plan (1-based)")
    args = parser.parse_args(argv)
    try:
        hosts = [str(h) for h in _arg(args.hosts)]
        if args.mode == "round":
            outcomes = [Outcome.from_dict(o) for o in _arg(args.results)] + load_outcomes(args.outcomes)
            tests = plan_round(hosts, rails_of_hosts(_arg(args.rails)), outcomes, args.round)
            print(json.dumps([t.to_json() for t in tests]))
            return 0
        results = [PairResult(str(r["server"]), str(r["client"]), bool(r["passed"])) for r in json.loads(args.results)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"pairing: bad --hosts, --rails, --results or --outcomes: {exc}", file=sys.stderr)
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
