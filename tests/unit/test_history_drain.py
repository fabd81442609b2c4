"""--on-fail drain / --on-pass resume: real scontrol exchanges (captured, and live against a throwaway
slurmctld + slurmd when Debian's packages are installed), kubectl exchanges in the Node object's shape,
all through the real Node with an injected runner. Never lifts a drain someone else set."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.replay import ReplayRunner
from tests.helpers.slurm_live import NODE, local_slurm
from verify import interrupt
from verify.cli import build_parser
from verify.history.cli import verdict_actions
from verify.history.drain import act, reason_text, slurm_state
from verify.node import Node
from verify.result import CheckResult, Status
from verify.runner import CommandOutput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"
FAILURE = "bench.h2d.gpu0: H2D 41.2 GB/s = 65% of PCIe Gen5 x16 (63.0 GB/s): 0.654 is below the floor 0.7"


def exchange(name: str) -> CommandOutput:
    record = json.loads((FIXTURES / f"{name}.json").read_text())
    return CommandOutput(record["argv"], record["returncode"], record["stdout"], record["stderr"], 0.0)


def slurm_node(show: str, update: str = "slurm_drain") -> Node:
    """show answers `scontrol -o show node`; any other scontrol call answers like `update`."""
    answer = exchange(show)
    return Node(runner=ReplayRunner({tuple(answer.argv): answer, "scontrol": exchange(update)}))


def changes(node: Node) -> list:
    return [c for c in node.runner.calls if c[:2] != ["scontrol", "-o"] and c[1:2] != ["get"]]


def test_scontrol_state_and_reason_are_read_from_real_output():
    assert slurm_state(exchange("slurm_show_idle").stdout) == ({"IDLE"}, "")
    flags, reason = slurm_state(exchange("slurm_show_drained_by_tunefleet").stdout)
    assert flags == {"IDLE", "DRAIN"} and reason == f"tunefleet: {FAILURE}"  # the [root@time] suffix dropped
    assert slurm_state(exchange("slurm_show_drained_by_operator").stdout)[1] == "maintenance: swap DIMM B2 (alice)"


def test_a_failing_node_is_drained_with_the_first_failure_as_reason():
    node = slurm_node("slurm_show_idle")
    action = act(node, "drain", NODE, "slurm", FAILURE)
    assert action.status == Status.PASS and action.scheduler == "slurm"
    assert changes(node) == [["scontrol", "update", f"NodeName={NODE}", "State=DRAIN", f"Reason=tunefleet: {FAILURE}"]]


def test_dry_run_reads_but_changes_nothing_and_prints_the_command():
    node = slurm_node("slurm_show_idle")
    action = act(node, "drain", NODE, "slurm", FAILURE, dry_run=True)
    assert changes(node) == [] and action.status == Status.SKIP
    assert action.message.startswith(f"dry run: would run scontrol update NodeName={NODE} State=DRAIN "
                                     "'Reason=tunefleet: bench.h2d.gpu0")


def test_resume_lifts_only_a_drain_tunefleet_set():
    ours = slurm_node("slurm_show_drained_by_tunefleet", "slurm_resume")
    assert act(ours, "resume", NODE, "slurm").status == Status.PASS
    assert changes(ours) == [["scontrol", "update", f"NodeName={NODE}", "State=RESUME"]]
    theirs = slurm_node("slurm_show_drained_by_operator", "slurm_resume")
    action = act(theirs, "resume", NODE, "slurm")
    assert changes(theirs) == [] and action.status == Status.SKIP
    assert "drained by someone else (Reason='maintenance: swap DIMM B2 (alice)')" in action.message
    idle = slurm_node("slurm_show_idle", "slurm_resume_not_drained")
    assert changes(idle) == [] and "nothing to undo" in act(idle, "resume", NODE, "slurm").message


def test_a_node_an_operator_drained_is_not_redrained_over_their_reason():
    node = slurm_node("slurm_show_drained_by_operator")
    action = act(node, "drain", NODE, "slurm", FAILURE)
    assert changes(node) == [] and "left as it is" in action.message


def test_an_unknown_node_or_a_missing_scontrol_is_an_error_naming_it():
    unknown = exchange("slurm_show_unknown_node")
    node = Node(runner=ReplayRunner({tuple(unknown.argv): unknown}))
    action = act(node, "drain", "no-such-node", "slurm", FAILURE)
    assert action.status == Status.ERROR and "Node no-such-node not found" in action.message
    bare = act(Node(runner=ReplayRunner()), "drain", NODE, "auto", FAILURE)
    assert bare.status == Status.ERROR and "neither scontrol nor kubectl" in bare.message


def test_the_reason_is_one_printable_line_of_bounded_length():
    text = reason_text("bench.x: line one\nline\ttwo\x1b[31m" + "y" * 500)
    assert text.startswith("tunefleet: bench.x: line one line two [31my") and len(text) == 200
    assert "\n" not in text and "\x1b" not in text


def k8s_node(name: str) -> Node:
    answer = exchange(name)
    ok = CommandOutput(["kubectl"], 0, "node/gpu-07 changed\n", "", 0.0)
    return Node(runner=ReplayRunner({tuple(answer.argv): answer, "kubectl": ok}))


def test_kubernetes_drain_taints_labels_and_annotates_under_tunefleets_key():
    node = k8s_node("k8s_get_node_clean")
    action = act(node, "drain", "gpu-07", "kubernetes", FAILURE)
    assert action.status == Status.PASS
    assert changes(node) == [
        ["kubectl", "taint", "node", "gpu-07", "tunefleet.io/verify=failed:NoSchedule", "--overwrite"],
        ["kubectl", "label", "node", "gpu-07", "tunefleet.io/verify=failed", "--overwrite"],
        ["kubectl", "annotate", "node", "gpu-07", f"tunefleet.io/verify-reason=tunefleet: {FAILURE}", "--overwrite"]]


def test_kubernetes_resume_removes_only_tunefleets_taint_label_and_annotation():
    ours = k8s_node("k8s_get_node_tainted_by_tunefleet")
    assert act(ours, "resume", "gpu-07", "kubernetes").status == Status.PASS
    assert changes(ours) == [["kubectl", "taint", "node", "gpu-07", "tunefleet.io/verify:NoSchedule-"],
                             ["kubectl", "label", "node", "gpu-07", "tunefleet.io/verify-"],
                             ["kubectl", "annotate", "node", "gpu-07", "tunefleet.io/verify-reason-"]]
    cordoned = k8s_node("k8s_get_node_cordoned_by_operator")
    action = act(cordoned, "resume", "gpu-07", "kubernetes")
    assert changes(cordoned) == [] and "nothing to undo" in action.message  # their cordon and taint stay
    missing = exchange("k8s_get_node_not_found")
    gone = act(Node(runner=ReplayRunner({tuple(missing.argv): missing})), "drain", "gpu-99", "kubernetes", FAILURE)
    assert gone.status == Status.ERROR and 'nodes "gpu-99" not found' in gone.message


def report_with(*statuses) -> dict:
    results = [CheckResult(f"check.{i}", "sysctl", s, reason=f"reason {i}") for i, s in enumerate(statuses)]
    return {"host": NODE, "results": [r.to_dict() for r in results]}


@pytest.mark.parametrize("statuses, verb", [
    ((Status.PASS, Status.FAIL, Status.ERROR), "drain"),
    ((Status.PASS, Status.WARN), "resume"),
    ((Status.PASS, Status.ERROR), None),  # could not check everything: neither
])
def test_the_verdict_picks_the_action(statuses, verb):
    args = build_parser().parse_args(["verify", "--local", "--on-fail", "drain", "--on-pass", "resume",
                                      "--scheduler", "slurm", "--dry-run"])
    node = slurm_node("slurm_show_drained_by_tunefleet")
    rows = verdict_actions(args, report_with(*statuses), node, NODE)
    assert [r.check_id for r in rows] == ([f"scheduler.{verb}"] if verb else [])
    if verb == "drain":
        assert "Reason=tunefleet: check.1: reason 1" in rows[0].reason


def test_nothing_is_done_unless_asked_or_after_an_interrupt(monkeypatch):
    plain = build_parser().parse_args(["verify", "--local"])
    node = slurm_node("slurm_show_idle")
    assert verdict_actions(plain, report_with(Status.FAIL), node, NODE) == [] and node.runner.calls == []
    asked = build_parser().parse_args(["verify", "--local", "--on-fail", "drain", "--scheduler", "slurm"])
    monkeypatch.setattr(interrupt, "_received", [2])
    assert verdict_actions(asked, report_with(Status.FAIL), node, NODE) == [] and node.runner.calls == []


@pytest.mark.slow
@pytest.mark.root
def test_real_slurm_drain_and_resume(tmp_path):
    with local_slurm(tmp_path) as runner:
        node = Node(runner=runner)
        assert act(node, "drain", NODE, "slurm", FAILURE).status == Status.PASS
        show = runner(["scontrol", "-o", "show", "node", NODE]).stdout
        assert "DRAIN" in slurm_state(show)[0] and slurm_state(show)[1] == f"tunefleet: {FAILURE}"
        assert act(node, "resume", NODE, "slurm").status == Status.PASS
        assert "DRAIN" not in slurm_state(runner(["scontrol", "-o", "show", "node", NODE]).stdout)[0]
        assert runner(["scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=bad fan (bob)"]).ok
        kept = act(node, "resume", NODE, "auto")
        assert kept.scheduler == "slurm" and kept.status == Status.SKIP and "someone else" in kept.message
        assert slurm_state(runner(["scontrol", "-o", "show", "node", NODE]).stdout)[1] == "bad fan (bob)"


# ---- the drain guard (issue 29): a cap on how much of the fleet tunefleet may drain -------------------

from verify.history.drain import DEFAULT_CAP, cap_allows, cap_count, drained_by_us, parse_cap, plan  # noqa: E402


def test_the_cap_is_a_share_or_a_count_and_bad_text_is_refused_by_name():
    assert parse_cap("10%") == ("share", 10.0) and parse_cap("3") == ("count", 3)
    for bad in ("ten", "150%", "2.5", "-1"):
        with pytest.raises(ValueError, match="drain cap"):
            parse_cap(bad)
    assert DEFAULT_CAP == "10%" and cap_count("10%", 40) == 4 and cap_count("10%", 5) == 1  # at least one
    assert cap_count("0", 40) == 0 and cap_count("0%", 40) == 0 and cap_count("3", 40) == 3


def test_a_run_drains_no_more_than_the_cap_and_names_every_host_it_held_back():
    failing = [(f"gpu-{n:02d}", f"health.gpu.xid.{n}: Xid 79") for n in range(7)]
    decided = plan(failing, total_hosts=40)
    assert [host for host, _ in decided.drain] == ["gpu-00", "gpu-01", "gpu-02", "gpu-03"]
    row = decided.held_row()
    assert row.status == Status.WARN and row.reason.startswith("drain cap reached: 4 of 40 hosts (cap 10%)")
    assert row.details["not_drained"] == ["gpu-04", "gpu-05", "gpu-06"] and "gpu-06" in row.reason
    assert plan(failing, 40, "10%", already_drained=3).drain == failing[:1]
    assert plan(failing[:2], 40).held_row() is None


def nodes_answer(*names_and_shows) -> CommandOutput:
    """`scontrol -o show nodes`: one real `show node` line per node, renamed."""
    lines = [exchange(show).stdout.strip().replace(f"NodeName={NODE} ", f"NodeName={name} ", 1)
             for name, show in names_and_shows]
    return CommandOutput(["scontrol", "-o", "show", "nodes"], 0, "\n".join(lines) + "\n", "", 0.0)


def test_a_node_is_not_drained_once_tunefleet_holds_the_cap_of_the_cluster():
    cluster = [("gpu-01", "slurm_show_drained_by_tunefleet"), ("gpu-02", "slurm_show_drained_by_operator")] + \
        [(f"gpu-{n:02d}", "slurm_show_idle") for n in range(3, 11)]  # 10 nodes, one drained by tunefleet
    node = Node(runner=ReplayRunner({("scontrol", "-o", "show", "nodes"): nodes_answer(*cluster)}))
    assert drained_by_us(node, "slurm") == (10, ["gpu-01"])  # the operator's drain is not ours
    allowed, row = cap_allows(node, "gpu-05", "10%", "slurm")
    assert not allowed and row.details["not_drained"] == ["gpu-05"]
    assert row.details["drained_by_tunefleet"] == ["gpu-01"]
    assert cap_allows(node, "gpu-05", "20%", "slurm") == (True, None)
    assert cap_allows(node, "gpu-01", "10%", "slurm") == (True, None)  # already ours: the reason is refreshed
    bare = Node(runner=ReplayRunner())
    assert cap_allows(bare, "gpu-05", "0", "auto") == (True, None)  # cannot ask: the drain itself says why


@pytest.mark.slow
@pytest.mark.root
def test_real_slurm_counts_the_nodes_tunefleet_drained(tmp_path):
    with local_slurm(tmp_path) as runner:
        node = Node(runner=runner)
        assert drained_by_us(node, "slurm") == (1, [])
        assert act(node, "drain", NODE, "slurm", FAILURE).status == Status.PASS
        assert drained_by_us(node, "auto") == (1, [NODE])
        assert act(node, "resume", NODE, "slurm").status == Status.PASS
