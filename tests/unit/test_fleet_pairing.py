"""Pairing plans for pairwise RDMA tests and who is blamed when a pair fails."""
from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verify.fleet.pairing import PairResult, full_rounds, main, quick_rounds, retest_round, verdicts

host_lists = st.lists(st.text(alphabet="abcdefgh0123", min_size=1, max_size=4), min_size=0, max_size=12, unique=True)


@given(host_lists)
def test_quick_pairing_tests_every_host_and_no_host_twice_in_a_round(hosts):
    rounds = quick_rounds(hosts)
    tested = {h for r in rounds for pair in r for h in pair}
    assert tested == (set(hosts) if len(hosts) >= 2 else set())
    for r in rounds:
        in_round = [h for pair in r for h in pair]
        assert len(in_round) == len(set(in_round))
    assert sum(len(r) for r in rounds) == (len(hosts) + 1) // 2 if len(hosts) >= 2 else not rounds


def test_quick_pairing_odd_host_pairs_with_the_first_in_a_second_round():
    assert quick_rounds(["a", "b", "c"]) == [[("a", "b")], [("c", "a")]]


@given(host_lists)
def test_full_pairing_covers_every_pair_exactly_once_in_disjoint_rounds(hosts):
    rounds = full_rounds(hosts)
    pairs = [frozenset(p) for r in rounds for p in r]
    assert sorted(map(sorted, pairs)) == sorted(map(sorted, map(frozenset, itertools.combinations(hosts, 2))))
    for r in rounds:
        in_round = [h for pair in r for h in pair]
        assert len(in_round) == len(set(in_round))
    if len(hosts) >= 2:
        assert len(rounds) == (len(hosts) - 1 if len(hosts) % 2 == 0 else len(hosts))


def test_a_failed_pair_is_retested_with_hosts_that_passed():
    hosts = ["a", "b", "c", "d"]
    first = [PairResult("a", "b", False), PairResult("c", "d", True)]
    retest = retest_round(hosts, first)
    assert retest == [("c", "a"), ("d", "b")]
    assert verdicts(hosts, first) == {"a": "suspect", "b": "suspect", "c": "good", "d": "good"}


def test_only_the_host_that_fails_again_is_marked_bad():
    hosts = ["a", "b", "c", "d"]
    results = [PairResult("a", "b", False), PairResult("c", "d", True),
               PairResult("c", "a", True), PairResult("d", "b", False)]
    assert verdicts(hosts, results) == {"a": "good", "b": "bad", "c": "good", "d": "good"}
    assert retest_round(hosts, results) == []


def test_without_a_good_partner_a_failing_pair_stays_suspect():
    results = [PairResult("a", "b", False)]
    assert retest_round(["a", "b"], results) == []
    assert verdicts(["a", "b", "c"], results) == {"a": "suspect", "b": "suspect", "c": "untested"}


def _retest_by_scanning(hosts, results):
    """retest_round's rule read literally: per suspect, the first host of the fleet that passed, is not
    busy and was not tried with it (a scan of the fleet per suspect, quadratic on a bad day)."""
    passed = {h for r in results if r.passed for h in (r.server, r.client)}
    failed_with, passed_with = {}, {}
    for r in results:
        side = passed_with if r.passed else failed_with
        side.setdefault(r.server, set()).add(r.client)
        side.setdefault(r.client, set()).add(r.server)
    busy, pairs = set(), []
    for suspect in [h for h in hosts if h in failed_with and h not in passed and len(failed_with[h]) < 2]:
        tried = failed_with[suspect] | passed_with.get(suspect, set())
        partner = next((h for h in hosts if h in passed and h not in busy and h not in tried and h != suspect), None)
        if partner is not None:
            busy.add(partner)
            pairs.append((partner, suspect))
    return pairs


@given(host_lists, st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11), st.booleans()), max_size=30))
def test_the_retest_keeps_its_rule_with_a_cursor(hosts, raw):
    results = [PairResult(hosts[a % len(hosts)], hosts[b % len(hosts)], ok) for a, b, ok in raw
               if hosts and hosts[a % len(hosts)] != hosts[b % len(hosts)]]
    assert retest_round(hosts, results) == _retest_by_scanning(hosts, results)


def test_a_bad_day_at_ten_thousand_hosts_retests_every_suspect_once():
    hosts = [f"gpu-{i:05d}" for i in range(10_000)]
    first = [PairResult(a, b, i % 5 != 0) for i, (a, b) in enumerate(quick_rounds(hosts)[0])]  # 20 % fail
    retest = retest_round(hosts, first)
    suspects = {h for r in first if not r.passed for h in (r.server, r.client)}
    assert sorted(s for _, s in retest) == sorted(suspects)
    assert len({p for p, _ in retest}) == len(retest)  # each good partner serves one suspect


def test_cli_prints_the_plan_as_json(capsys):
    assert main(["quick", "--hosts", json.dumps(["n1", "n2", "n3", "n4"])]) == 0
    assert json.loads(capsys.readouterr().out) == [[["n1", "n2"], ["n3", "n4"]]]


@pytest.mark.parametrize("bad", ["not json", '{"a": 1}'])
def test_cli_rejects_bad_results_with_one_message(capsys, bad):
    assert main(["verdicts", "--hosts", '["a"]', "--results", bad]) == 2
    assert "pairing: bad --hosts" in capsys.readouterr().err
