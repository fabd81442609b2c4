"""The fleet report's pairwise NCCL section: the molecule pairwise scenario's run directory, built by the
real planner and the real blame CLI (verify.fleet.pairing, verify.fleet.blame), read back by the real
`tunefleet report` (verify.fleet.report): the slow rail's host is bad (exit 1), the JSON carries the pair
matrix and the blame list, the HTML draws the heat map and the evidence."""
from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verify.fleet.blame import main as blame_main
from verify.fleet.pairing import FAIL, PASS, Outcome, plan_round
from verify.fleet.report import main as report_main
from verify.result import EXIT_COULD_NOT_CHECK, EXIT_FAILED

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "fleet"
HOSTS = ["pw-node1", "pw-node2", "pw-node3", "pw-node4"]
RAILS = ["eth1", "eth2"]
FLOOR = 0.03  # molecule/pairwise/molecule.yml's verify_thresholds
SLOW = ("pw-node3", "eth2")  # its prepare.yml's 50 mbit rail


def measure(a: str, b: str, rail: str, round_no: int) -> Outcome:
    """What side 0 prints for one rail (nccl_pair.outcome_of): the figures the scenario's tc shaping gives."""
    if (a, rail) == SLOW or (b, rail) == SLOW:
        return Outcome(a, b, rail, FAIL, round_no, 0.006, FLOOR, "", "0.006 is below the floor 0.03")
    return Outcome(a, b, rail, PASS, round_no, 0.12, FLOOR, "", "0.12 meets the floor 0.03")


def scenario_run(tmp_path: Path) -> Path:
    """<run>/<host>/report.json (a real node report, all green), then the pairwise rounds exactly as
    playbooks/verify.yml drives them: rails.json, round-N.json from the planner, `blame pairs`."""
    run = tmp_path / "run"
    base = json.loads((FIXTURES / "node_report_ci_vm.json").read_text())
    for host in HOSTS:
        report = copy.deepcopy(base)
        report["host"] = host
        for result in report["results"]:
            if result["status"] == "FAIL":
                result["status"] = "PASS"
        (run / host).mkdir(parents=True)
        (run / host / "report.json").write_text(json.dumps(report))
    pairs_dir = run / "nccl-pairs"
    pairs_dir.mkdir()
    reported = {h: {"rails": {r: {"hca": None, "ifname": r, "address": f"10.89.{i}.{n}"} for i, r in enumerate(RAILS)},
                    "error": ""} for n, h in enumerate(HOSTS, start=2)}
    (pairs_dir / "rails.json").write_text(json.dumps(reported))
    outcomes: list = []
    rounds = []
    for round_no in (1, 2, 3):
        tests = plan_round(HOSTS, {h: RAILS for h in HOSTS}, outcomes, round_no)
        found = [measure(t.a, t.b, rail, round_no) for t in tests for rail in t.rails]
        outcomes += found
        path = pairs_dir / f"round-{round_no}.json"
        path.write_text(json.dumps([o.to_dict() for o in found]))
        rounds.append(str(path))
    assert blame_main(["pairs", f"--run-dir={run}", f"--rails={pairs_dir / 'rails.json'}", "--outcomes", *rounds]) == 0
    return run


def report(run: Path, fmt: str = "json,md,html") -> int:
    return report_main(argparse.Namespace(directory=str(run), format=fmt, out=None))


def test_the_slow_rail_makes_its_host_bad_and_the_fleet_json_carries_the_pairs(tmp_path, capsys):
    run = scenario_run(tmp_path)
    assert report(run) == 1  # a fleet.nccl_pairwise FAIL in a crossnode file is a bad host, as the CLI's exit code
    data = json.loads((run / "fleet_report.json").read_text())
    assert data["bad_hosts"] == ["pw-node3"]
    statuses = {h["host"]: h["statuses"]["fleet.nccl_pairwise"] for h in data["hosts"]}
    assert statuses == {"pw-node1": "PASS", "pw-node2": "PASS", "pw-node3": "FAIL", "pw-node4": "PASS"}
    pairs = data["pairs"]
    assert pairs["hosts"] == HOSTS
    assert [(b["kind"], b["status"], b["hosts"], b["rails"]) for b in pairs["blame"]] == [
        ("rail", "FAIL", ["pw-node3"], ["eth2"])]
    # The evidence: pw-node3's eth2 with two partners, its round-1 partner and a known-good one.
    evidence = pairs["blame"][0]["evidence"]
    assert {o["b"] if o["a"] == "pw-node3" else o["a"] for o in evidence} == {"pw-node4", "pw-node1"}
    assert {o["busbw_gbps"] for o in evidence} == {0.006}
    cells = {(c["a"], c["b"]): c for c in pairs["cells"]}
    assert cells[("pw-node3", "pw-node4")]["status"] == "fail"
    assert cells[("pw-node3", "pw-node4")]["worst_fraction"] == 0.006 / FLOOR
    assert cells[("pw-node1", "pw-node2")]["status"] == "pass"
    assert data["load_errors"] == []
    assert "pw-node3: fleet.nccl_pairwise" in capsys.readouterr().out


def test_the_html_draws_the_heat_map_and_the_blame_list_with_its_evidence(tmp_path):
    run = scenario_run(tmp_path)
    report(run, "json,html")
    html = (run / "fleet_report.html").read_text()
    data = json.loads((run / "fleet_report.json").read_text())
    section = html[html.index('<h2 id="pairs">'):html.index("</ul>", html.index('<ul id="pair-blame">'))]
    assert section.count('<svg xmlns="http://www.w3.org/2000/svg" class="pair-matrix"') == 1
    assert section.count("<rect ") == 2 * len(data["pairs"]["cells"])  # both triangles of each pair tested
    assert '<title>pw-node3 - pw-node4: eth1: pass 0.12 GB/s (floor 0.03); eth2: fail 0.006 GB/s (floor 0.03)</title>' \
        in section
    assert re.search(r'fill="#d73027"><title>pw-node3 - pw-node4', section)  # 20 % of the floor: red
    assert re.search(r'fill="#1a9850"><title>pw-node1 - pw-node2', section)
    blamed = re.findall(r'<li class="pair-blame (\w+)" data-kind="(\w+)" data-hosts="([^"]*)" data-rails="([^"]*)">',
                        section)
    assert blamed == [("FAIL", "rail", "pw-node3", "eth2")]
    assert "pw-node3 - pw-node4, eth2, round 1: fail, 0.006 GB/s (floor 0.03)" in section
    assert "fix: this HCA/NIC: its cable and switch port" in section


def test_markdown_lists_the_blame_with_its_evidence(tmp_path):
    run = scenario_run(tmp_path)
    report(run, "md")
    markdown = (run / "fleet_report.md").read_text()
    assert "## Pairwise NCCL per rail" in markdown
    assert "- **pw-node3** FAIL (rail: eth2): rail eth2 of pw-node3 is slow" in markdown
    assert "  - pw-node3 - pw-node4, eth2, round 1: fail, 0.006 GB/s (floor 0.03)" in markdown


def test_a_run_without_pair_rounds_has_no_pairs_section(tmp_path):
    run = scenario_run(tmp_path)
    for path in (run / "nccl-pairs").iterdir():
        path.unlink()
    for host in HOSTS:
        (run / host / "crossnode-nccl-pairs.json").unlink()
    assert report(run) == 0
    data = json.loads((run / "fleet_report.json").read_text())
    assert data["pairs"] is None and data["load_errors"] == []
    assert 'id="pairs"' not in (run / "fleet_report.html").read_text()


def test_a_damaged_cell_is_left_out_and_named_and_an_unreadable_summary_costs_only_the_matrix(tmp_path):
    run = scenario_run(tmp_path)
    path = run / "nccl-pairs" / "summary.json"
    summary = json.loads(path.read_text())
    summary["pairs"]["cells"][0]["rails"]["eth1"]["busbw_gbps"] = "fast"
    summary["pairs"]["blame"].append({"kind": "rail", "hosts": "pw-node1"})
    path.write_text(json.dumps(summary))
    assert report(run) == 1
    data = json.loads((run / "fleet_report.json").read_text())
    assert len(data["pairs"]["cells"]) == len(summary["pairs"]["cells"]) - 1
    assert [b["hosts"] for b in data["pairs"]["blame"]] == [["pw-node3"]]
    assert [(e["field"], e["message"]) for e in data["load_errors"]] == [
        ("pairs.cells[0].rails.eth1.busbw_gbps", "expected a finite number or null, got a string"),
        ("pairs.blame[1].status", "missing"), ("pairs.blame[1].reason", "missing"),
        ("pairs.blame[1].hosts", "expected a list, got a string"), ("pairs.blame[1].rails", "missing")]

    path.write_text("{not json")
    assert report(run) == 1  # the hosts' own verdicts still come from their crossnode files
    data = json.loads((run / "fleet_report.json").read_text())
    assert data["pairs"] is None and data["bad_hosts"] == ["pw-node3"]
    assert [e["path"] for e in data["load_errors"]] == [str(path)]
    assert "the pair matrix is not shown" in data["load_errors"][0]["message"]


def _drop(path: tuple):
    def damage(summary: dict) -> None:
        holder = summary
        for key in path[:-1]:
            holder = holder[key]
        del holder[path[-1]]
    return damage


def _set(path: tuple, value):
    def damage(summary: dict) -> None:
        holder = summary
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = value
    return damage


@pytest.mark.parametrize("damage, field", [
    # The fuzzing's find: a rail without its figure ended the HTML writer with KeyError 'busbw_gbps'.
    (_drop(("pairs", "cells", 0, "rails", "eth1", "busbw_gbps")), "pairs.cells[0].rails.eth1.busbw_gbps"),
    (_drop(("pairs", "cells", 1, "worst_fraction")), "pairs.cells[1].worst_fraction"),
    (_set(("pairs", "cells", 0, "rails", "eth2", "floor_gbps"), 10 ** 400), "pairs.cells[0].rails.eth2.floor_gbps"),
    (_set(("pairs", "blame", 0, "evidence", 0, "round"), "two"), "pairs.blame[0].evidence[0].round"),
    (_drop(("pairs", "cells", 0, "rails", "eth1", "status")), "pairs.cells[0].rails.eth1.status"),
    (_set(("pairs",), [1, 2]), ""),
])
def test_a_damaged_pairs_summary_is_a_warn_naming_it_and_every_format_is_written(tmp_path, damage, field):
    """Through the real command: no traceback, the documented exit code (1: pw-node3's own crossnode FAIL
    still decides), a WARN naming the file and the field, and all four formats written."""
    run = scenario_run(tmp_path)
    path = run / "nccl-pairs" / "summary.json"
    summary = json.loads(path.read_text())
    damage(summary)
    path.write_text(json.dumps(summary))
    done = subprocess.run([sys.executable, "-m", "verify", "report", str(run), "--format", "json,md,html,junit"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and done.returncode == EXIT_FAILED, done.stderr
    assert f"WARN {path}: {field}" in done.stderr
    for name in ("fleet_report.json", "fleet_report.md", "fleet_report.html", "fleet_report.junit.xml"):
        assert (run / name).stat().st_size > 0
    data = json.loads((run / "fleet_report.json").read_text())
    assert any(e["path"] == str(path) for e in data["load_errors"])
    assert "pw-node3" in (run / "fleet_report.html").read_text()


def test_a_damaged_summary_on_a_clean_fleet_exits_3_could_not_check(tmp_path):
    """Nothing failed, but a file the report is built from could not be read: 3, never 0, never 2."""
    run = scenario_run(tmp_path)
    for crossnode in run.glob("*/crossnode-*.json"):
        crossnode.unlink()
    path = run / "nccl-pairs" / "summary.json"
    summary = json.loads(path.read_text())
    _drop(("pairs", "cells", 0, "rails", "eth1", "busbw_gbps"))(summary)
    path.write_text(json.dumps(summary))
    done = subprocess.run([sys.executable, "-m", "verify", "report", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert "Traceback" not in done.stderr and done.returncode == EXIT_COULD_NOT_CHECK, done.stderr
    assert (run / "fleet_report.html").is_file()
