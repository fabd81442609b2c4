"""Pairwise NCCL per rail: the round planner and the blame (verify/fleet/pairing.py, blame.py)."""
from __future__ import annotations

import json

from verify.fleet.blame import blame_pairs, pair_host_results
from verify.fleet.pairing import ERROR, FAIL, PASS, Outcome, main, plan_round
from verify.result import Status

RAILS = ["mlx5_0", "mlx5_1"]


def fleet(n: int) -> tuple:
    hosts = [f"n{i}" for i in range(n)]
    return hosts, {h: RAILS for h in hosts}


def run_rounds(hosts, rails_by_host, measure) -> tuple:
    """Drive the real planner; measure(a, b, rail, round) -> Outcome. Returns (outcomes, rounds used)."""
    outcomes, used = [], 0
    for round_no in (1, 2, 3):
        tests = plan_round(hosts, rails_by_host, outcomes, round_no)
        if not tests:
            break
        used = round_no
        busy = [h for t in tests for h in (t.a, t.b)]
        assert len(busy) == len(set(busy)), "no host is in two tests of one round"
        outcomes += [measure(t.a, t.b, r, round_no) for t in tests for r in t.rails]
    return outcomes, used


def slow(bad_units=(), bad_pairs=()):
    def measure(a, b, rail, round_no):
        bad = (a, rail) in bad_units or (b, rail) in bad_units or frozenset((a, b)) in bad_pairs
        return Outcome(a, b, rail, FAIL if bad else PASS, round_no, 10.0 if bad else 45.0, 36.0)
    return measure


def test_a_slow_node_is_blamed_on_every_rail_and_its_partner_cleared_with_a_note():
    hosts, rails = fleet(8)
    outcomes, used = run_rounds(hosts, rails, slow({("n2", r) for r in RAILS}))
    findings = blame_pairs(hosts, rails, outcomes)
    assert [(b.kind, b.hosts, b.rails) for b in findings] == [("node", ("n2",), tuple(RAILS))]
    assert used == 2
    assert len({o.a for o in findings[0].evidence} | {o.b for o in findings[0].evidence}) >= 3  # two partners + n2
    results = pair_host_results(hosts, outcomes, findings)
    assert results["n2"].status is Status.FAIL and "every rail" in results["n2"].reason
    assert results["n3"].status is Status.PASS and "n2" in results["n3"].reason  # its round-1 partner
    assert [h for h, r in results.items() if r.status is not Status.PASS] == ["n2"]


def test_a_slow_rail_is_named_not_the_node():
    hosts, rails = fleet(6)
    outcomes, _ = run_rounds(hosts, rails, slow({("n5", "mlx5_1")}))
    findings = blame_pairs(hosts, rails, outcomes)
    assert [(b.kind, b.hosts, b.rails) for b in findings] == [("rail", ("n5",), ("mlx5_1",))]
    assert "mlx5_1 of n5" in findings[0].reason and "GB/s" in findings[0].reason


def test_a_pair_slow_only_together_names_the_path_and_blames_neither_host():
    hosts, rails = fleet(6)
    outcomes, used = run_rounds(hosts, rails, slow(bad_pairs={frozenset(("n0", "n1"))}))
    findings = blame_pairs(hosts, rails, outcomes)
    assert [(b.kind, b.hosts, b.status) for b in findings] == [("path", ("n0", "n1"), Status.WARN)]
    results = pair_host_results(hosts, outcomes, findings)
    assert {h for h, r in results.items() if r.status is Status.FAIL} == set()
    assert results["n0"].status is Status.WARN


def test_odd_host_out_meets_a_passing_partner_in_round_two():
    hosts, rails = fleet(5)
    assert all("n4" not in (t.a, t.b) for t in plan_round(hosts, rails, [], 1))
    outcomes, used = run_rounds(hosts, rails, slow({("n4", r) for r in RAILS}))
    findings = blame_pairs(hosts, rails, outcomes)
    assert used == 2 and [(b.kind, b.hosts) for b in findings] == [("node", ("n4",))]


def test_a_host_unreachable_mid_round_is_an_error_and_its_partner_is_retested():
    hosts, rails = fleet(6)

    def measure(a, b, rail, round_no):
        if "n3" in (a, b):
            return Outcome(a, b, rail, ERROR, round_no, culprit="n3", reason="n3 did not answer")
        return Outcome(a, b, rail, PASS, round_no, 45.0, 36.0)

    outcomes, used = run_rounds(hosts, rails, measure)
    assert used == 2  # n2 (n3's partner) is measured again with a good partner, n3 never again
    assert all("n3" not in (o.a, o.b) for o in outcomes if o.round == 2)
    findings = blame_pairs(hosts, rails, outcomes)
    assert [(b.kind, b.hosts, b.status) for b in findings] == [("unreachable", ("n3",), Status.ERROR)]
    results = pair_host_results(hosts, outcomes, findings)
    assert results["n2"].status is Status.PASS and results["n3"].status is Status.ERROR


def test_a_rail_missing_on_one_node_is_an_error_naming_it_and_never_planned_there():
    hosts, rails = fleet(4)
    rails["n1"] = ["mlx5_0"]
    assert plan_round(hosts, rails, [], 1)[0].rails == ("mlx5_0",)
    outcomes, _ = run_rounds(hosts, rails, slow())
    findings = blame_pairs(hosts, rails, outcomes)
    assert [(b.kind, b.hosts, b.rails) for b in findings] == [("missing_rail", ("n1",), ("mlx5_1",))]
    assert "do not exist on n1" in findings[0].reason
    # n0's mlx5_1 had no partner in round 1: round 2 measured it with a good host
    assert any(o.rail == "mlx5_1" and "n0" in (o.a, o.b) for o in outcomes)


def test_partners_are_chosen_per_rail_so_two_pairs_each_failing_a_different_rail_settle_each_other():
    """Seen in the molecule pairwise run: n0-n1 failed eth1 once (noise), n2-n3 failed eth2 (n2's rail is
    slow). No host passed on every rail, yet each passed on the rail the other pair failed."""
    hosts = ["n0", "n1", "n2", "n3"]
    rails = {h: ["eth1", "eth2"] for h in hosts}
    first = [Outcome("n0", "n1", "eth1", FAIL, 1, 0.046, 0.06), Outcome("n0", "n1", "eth2", PASS, 1, 0.12, 0.06),
             Outcome("n2", "n3", "eth1", PASS, 1, 0.12, 0.06), Outcome("n2", "n3", "eth2", FAIL, 1, 0.01, 0.06)]
    second = plan_round(hosts, rails, first, 2)
    # Each test settles one end's eth1 and the other end's eth2: every open unit is measured in round 2.
    assert {(frozenset((t.a, t.b)), t.rails) for t in second} == {(frozenset(("n0", "n2")), ("eth1", "eth2")),
                                                                  (frozenset(("n1", "n3")), ("eth1", "eth2"))}
    measured = [Outcome(t.a, t.b, r, FAIL if (r == "eth2" and "n2" in (t.a, t.b)) else PASS, 2, 0.1, 0.06)
                for t in second for r in t.rails]
    findings = blame_pairs(hosts, rails, first + measured)
    assert [(b.kind, b.hosts, b.rails) for b in findings][0] == ("rail", ("n2",), ("eth2",))
    assert plan_round(hosts, rails, first + measured, 3) == []  # nothing left open


def test_quick_run_never_plans_a_fourth_round():
    hosts, rails = fleet(4)
    assert plan_round(hosts, rails, [Outcome("n0", "n1", "mlx5_0", FAIL)], 4) == []


def test_ten_thousand_hosts_are_planned_and_judged():
    # the time it takes is benchmarks/pairwise_sim.py's to print (a timed unit test only measures its host)
    hosts, rails = fleet(10000)
    first = plan_round(hosts, rails, [], 1)
    outcomes = [Outcome(t.a, t.b, r, FAIL if i < 50 else PASS) for i, t in enumerate(first) for r in t.rails]
    second = plan_round(hosts, rails, outcomes, 2)
    findings = blame_pairs(hosts, rails, outcomes)
    assert len(first) == 5000 and len(second) == 100 and findings


def test_cli_plans_a_round_and_refuses_a_bad_outcome(capsys):
    rails = json.dumps({"a": ["eth1"], "b": ["eth1"], "c": ["eth1"], "d": ["eth1"]})
    assert main(["round", "--hosts", '["a","b","c","d"]', "--rails", rails, "--round", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == [["a", "b", ["eth1"]], ["c", "d", ["eth1"]]]
    bad = json.dumps([{"a": "a", "b": "b", "rail": "eth1", "status": "maybe"}])
    assert main(["round", "--hosts", '["a","b"]', "--rails", rails, "--round", "2", "--results", bad]) == 2
    assert "not pass, fail or error" in capsys.readouterr().err


def test_cli_plans_round_two_from_outcome_files(tmp_path, capsys):
    """The playbook hands the planner files (@FILE, --outcomes), since a big fleet's outcomes overflow argv."""
    from verify.fleet.pairing import main as pairing_main

    (tmp_path / "hosts.json").write_text(json.dumps(["h0", "h1", "h2", "h3"]))
    reported = {h: {"rails": {"eth1": {}, "eth2": {}}, "error": ""} for h in ("h0", "h1", "h2", "h3")}
    (tmp_path / "rails.json").write_text(json.dumps(reported))
    round1 = [{"a": "h0", "b": "h1", "rail": r, "status": "pass"} for r in ("eth1", "eth2")] + [
        {"a": "h2", "b": "h3", "rail": "eth1", "status": "pass"},
        {"a": "h2", "b": "h3", "rail": "eth2", "status": "fail", "busbw_gbps": 0.01, "floor_gbps": 0.06}]
    (tmp_path / "round-1.json").write_text(json.dumps(round1))
    assert pairing_main(["round", "--round=2", f"--hosts=@{tmp_path}/hosts.json", f"--rails=@{tmp_path}/rails.json",
                         "--outcomes", str(tmp_path / "round-1.json")]) == 0
    assert json.loads(capsys.readouterr().out) == [["h0", "h2", ["eth2"]], ["h1", "h3", ["eth2"]]]
    assert pairing_main(["round", "--round=2", "--hosts=[]", "--outcomes", str(tmp_path / "gone.json")]) == 2


def test_blame_cli_writes_each_hosts_crossnode_result_and_the_pairs_file(tmp_path, capsys):
    """What the fleet report reads: <run>/<host>/crossnode-nccl-pairs.json and <run>/nccl-pairs/summary.json."""
    from verify.fleet.blame import main as blame_main
    from verify.fleet.model import parse_crossnode

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    reported = {h: {"rails": {"eth1": {}, "eth2": {}}, "error": ""} for h in ("h0", "h1", "h2", "h3")}
    reported["h4"] = {"rails": {}, "error": "PyTorch is not importable on this host"}
    (tmp_path / "rails.json").write_text(json.dumps(reported))
    slow = {"status": "fail", "busbw_gbps": 0.01, "floor_gbps": 0.06}
    rounds = [[{"a": "h0", "b": "h1", "rail": r, "status": "pass"} for r in ("eth1", "eth2")]
              + [{"a": "h2", "b": "h3", "rail": "eth1", "status": "pass"},
                 {"a": "h2", "b": "h3", "rail": "eth2", **slow}],
              [{"a": "h0", "b": "h2", "rail": "eth2", "round": 2, **slow},
               {"a": "h1", "b": "h3", "rail": "eth2", "round": 2, "status": "pass"}]]
    for n, outcomes in enumerate(rounds, 1):
        (tmp_path / f"round-{n}.json").write_text(json.dumps(outcomes))
    assert blame_main(["pairs", f"--run-dir={run}", f"--rails={tmp_path}/rails.json", "--outcomes",
                       str(tmp_path / "round-1.json"), str(tmp_path / "round-2.json")]) == 0
    assert capsys.readouterr().out.startswith("FAIL: rail eth2 of h2 is slow with h3 (eth2, round 1: 0.01 GB/s")
    statuses = {h: parse_crossnode(json.loads((run / h / "crossnode-nccl-pairs.json").read_text()))[0].status.value
                for h in reported}
    assert statuses == {"h0": "PASS", "h1": "PASS", "h2": "FAIL", "h3": "PASS", "h4": "ERROR"}
    summary = json.loads((run / "nccl-pairs" / "summary.json").read_text())
    assert [(f["kind"], f["hosts"], f["rails"]) for f in summary["findings"]] == [("rail", ["h2"], ["eth2"])]
    assert {(c["a"], c["b"]) for c in summary["pairs"]["cells"]} == {("h0", "h1"), ("h2", "h3"), ("h0", "h2"),
                                                                     ("h1", "h3")}
    (tmp_path / "bad.json").write_text(json.dumps({"../x": {"rails": {}}}))
    assert blame_main(["pairs", f"--run-dir={run}", f"--rails={tmp_path}/bad.json"]) == 2
