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


def test_cli_prints_the_plan_as_json(capsys):
    assert main(["quick", "--hosts", json.dumps(["n1", "n2", "n3", "n4"])]) == 0
    assert json.loads(capsys.readouterr().out) == [[["n1", "n2"], ["n3", "n4"]]]


@pytest.mark.parametrize("bad", ["not json", '{"a": 1}'])
def test_cli_rejects_bad_results_with_one_message(capsys, bad):
    assert main(["verdicts", "--hosts", '["a"]', "--results", bad]) == 2
    assert "pairing: bad --hosts" in capsys.readouterr().err
