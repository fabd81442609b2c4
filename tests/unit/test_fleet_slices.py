"""A fleet run cut into slices (verify/fleet/slices.py, issue 52): the cut keeps units whole, the joined
slices give the fleet report one run gives for the same node reports, and a slice that fails still yields it
with its hosts named for the re-run."""
from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verify.cli import main as cli_main
from verify.fleet import slices
from verify.fleet.baseline import build as build_baseline
from verify.fleet.baseline import to_text as baseline_text
from verify.fleet.blame import write_pairwise
from verify.fleet.model import load_fleet_dir
from verify.fleet.pairing import Outcome
from verify.fleet.report import main as report_main
from verify.fleet.run import Progress, finish
from verify.fleet.synthetic import derive_hosts, write_fleet
from verify.result import EXIT_COULD_NOT_CHECK

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "fleet"
HOSTS = 24
RAIL = "mlx5_0"
REFUSED_HOST = "gpu-00021"  # its archive was refused by the unpack: no report, named by the fleet report


# ---- the cut -------------------------------------------------------------------------------------------------

host_names = st.lists(st.from_regex(r"[a-z]{1,3}-[0-9]{1,3}", fullmatch=True), min_size=1, max_size=60, unique=True)


@settings(max_examples=150, deadline=None)
@given(hosts=host_names, count=st.integers(1, 12), rack_size=st.integers(0, 7))
def test_every_host_is_in_one_slice_in_name_order_and_no_rack_or_pair_is_cut(hosts, count, rack_size):
    names = sorted(hosts)
    racks = [names[i:i + rack_size] for i in range(0, len(names) // 2, rack_size)] if rack_size else []
    plan = slices.plan_slices(hosts, count, racks)
    assert 1 <= len(plan) <= count
    assert [h for part in plan for h in part] == names  # a partition, contiguous in name order
    where = {h: i for i, part in enumerate(plan) for h in part}
    for rack in racks:
        assert len({where[h] for h in rack}) == 1
    loose = [h for h in names if not any(h in rack for rack in racks)]
    for i in range(0, len(loose) - 1, 2):  # round 1 of the pairing pairs these two
        assert where[loose[i]] == where[loose[i + 1]]
    largest = max([2] + [len(r) for r in racks])
    sizes = [len(part) for part in plan]
    assert max(sizes) - min(sizes) <= 2 * largest  # near-equal, up to the units they are made of


def test_ten_thousand_hosts_in_32_slices_are_near_equal():
    plan = slices.plan_slices([f"gpu-{i:05d}" for i in range(10000)], 32)
    assert len(plan) == 32 and {len(p) for p in plan} <= {312, 314}


@pytest.mark.parametrize("text,count", [("4", 4), ("auto", 6), ("AUTO", 6), ("1", 1)])
def test_the_slice_count_is_a_number_or_the_core_count(text, count):
    assert slices.slice_count(text, cores=6) == count


@pytest.mark.parametrize("text", ["0", "-2", "two", "", "1.5", str(slices.MAX_SLICES + 1)])
def test_a_bad_slice_count_is_refused_naming_the_option_and_value(text, capsys):
    with pytest.raises(slices.SliceError, match=re.escape(f"--slices {text!r}")):
        slices.slice_count(text)
    with pytest.raises(SystemExit) as exited:  # the parser's refusal, before anything runs
        cli_main(["verify", "-i", "inventory", "--slices", text])
    assert exited.value.code == 2
    assert f"argument --slices: {text!r}: a whole number" in capsys.readouterr().err


def test_slices_without_an_inventory_are_refused(capsys):
    assert cli_main(["verify", "--local", "--slices", "2"]) == 2
    assert "use them with -i INVENTORY" in capsys.readouterr().err


def test_racks_are_read_from_the_inventory_groups_with_their_children():
    listed = {"_meta": {"hostvars": {}}, "all": {"children": ["rack01", "rack02", "h100"]},
              "rack01": {"hosts": ["a1", "a2"], "children": ["rack01_spares"]}, "rack01_spares": {"hosts": ["a9"]},
              "rack02": {"hosts": ["b1"]}, "h100": {"hosts": ["a1", "b1"]}}
    assert slices.rack_units(listed, "rack0") == [["a1", "a2", "a9"], ["b1"]]
    assert slices.rack_units(listed, "") == []
    with pytest.raises(slices.SliceError, match="host a1 is in both h100 and h100b"):
        slices.rack_units(dict(listed, h100b={"hosts": ["a1"]}), "h100")
    with pytest.raises(slices.SliceError, match="no inventory group name starts with 'row'"):
        slices.rack_units(listed, "row")


# ---- one fleet of node reports, as one run and as slices -----------------------------------------------------


def node_reports() -> list:
    """HOSTS node reports derived from a real one: two slow hosts, one odd driver, and path MTU probes to the
    next two hosts by name, of which every probe to gpu-00005 fails (the fleet blames gpu-00005)."""
    base = json.loads((FIXTURES / "node_report_ci_vm.json").read_text())
    measurement = json.loads((FIXTURES / "crossnode_allreduce_gloo_2node.json").read_text())[0]
    reports = derive_hosts(base, measurement, HOSTS, slow_hosts=2, odd_driver_hosts=1)
    for index, report in enumerate(reports):
        for step in (1, 2):
            peer = (index + step) % HOSTS
            failing = peer == 5
            report["results"].append({
                "check_id": f"network.path_mtu.{address(peer)}", "role": "network",
                "status": "FAIL" if failing else "PASS", "expected": "9000", "observed": "1500" if failing else "9000",
                "reason": "full-MTU ping failed" if failing else "", "remediation": "", "details": {}})
    return [r for r in reports if r["host"] != REFUSED_HOST]


def address(index: int) -> str:
    return f"10.0.0.{index + 1}"


def rails(hosts) -> dict:
    return {h: {"rails": {RAIL: {}}, "error": ""} for h in hosts}


def pair_rounds(hosts: list) -> list:
    """The pairwise rounds one run over `hosts` (name order) plays: round 1 pairs them two by two; the pair
    gpu-00006/gpu-00007 fails, round 2 re-tests each with a host of its slice that passed: gpu-00007 fails again
    (blamed)."""
    outcomes = [Outcome(a, b, RAIL, "fail" if a == "gpu-00006" else "pass", 1, 40.0 if a == "gpu-00006" else 90.0,
                        80.0) for a, b in zip(hosts[::2], hosts[1::2])]
    if "gpu-00006" in hosts:
        outcomes += [Outcome("gpu-00004", "gpu-00006", RAIL, "pass", 2, 91.0, 80.0),
                     Outcome("gpu-00005", "gpu-00007", RAIL, "fail", 2, 41.0, 80.0)]
    return outcomes


def write_run(run_dir: Path, reports: list, pair_hosts: list, all_hosts: list) -> None:
    """What playbooks/verify.yml leaves in a run directory over `reports`' hosts: the node reports, the
    addresses of every inventory host (those outside the play with none), the pairwise rounds and their blame,
    the unpack's refusal of REFUSED_HOST's archive when it is in the play."""
    run_dir.mkdir(mode=0o700, parents=True)
    write_fleet(run_dir, reports)
    in_play = set(pair_hosts)
    (run_dir / "fleet_addresses.json").write_text(json.dumps(
        {h: [address(i)] if h in in_play else [] for i, h in enumerate(all_hosts)}))
    outcomes = pair_rounds(pair_hosts)
    pairs = run_dir / "nccl-pairs"
    pairs.mkdir(mode=0o700)
    (pairs / "rails.json").write_text(json.dumps(rails(pair_hosts)))
    for round_no in (1, 2):
        (pairs / f"round-{round_no}.json").write_text(
            json.dumps([o.to_dict() for o in outcomes if o.round == round_no]))
    write_pairwise(str(run_dir), rails(pair_hosts), outcomes)
    if REFUSED_HOST in in_play:
        (run_dir / REFUSED_HOST).mkdir(mode=0o700, exist_ok=True)
        (run_dir / REFUSED_HOST / "reports.tar.gz").write_bytes(b"not a gzip stream")
        (run_dir / "unpack").mkdir(mode=0o700)
        (run_dir / "unpack" / "refused.json").write_text(json.dumps(
            {"hosts": {REFUSED_HOST: "not a gzip stream"}, "left_out": {}}))


def cut(hosts: list, count: int) -> list:
    return slices.plan_slices(hosts, count)


def fleet_outputs(run_dir: Path) -> dict:
    """Every fleet report format, with what names the run directory (its path, its name in the title) and the
    time it was written made neutral."""
    out = {}
    for name in ("fleet_report.json", "fleet_report.md", "fleet_report.junit.xml"):
        text = (run_dir / name).read_text().replace(str(run_dir), "<run>").replace(run_dir.name, "<run>")
        out[name] = re.sub(r'"generated_at": ?"[^"]*"', "", text)
    return out


def baseline_file(tmp_path: Path, run_dir: Path) -> str:
    nodes, _ = load_fleet_dir(str(run_dir))
    path = tmp_path / "baseline.json"
    path.write_text(baseline_text(build_baseline(nodes)))
    return str(path)


def report_args(directory, out=None, baseline=None) -> argparse.Namespace:
    return argparse.Namespace(directory=directory, format="json,md,junit", out=out, world_readable=False,
                              baseline=baseline, rules=None)


@pytest.mark.parametrize("count", [2, 3, 5])
def test_the_joined_slices_give_the_fleet_report_of_one_run(tmp_path, count):
    reports = node_reports()
    names = [f"gpu-{i:05d}" for i in range(HOSTS)]
    whole = tmp_path / "whole"
    write_run(whole, reports, names, names)
    baseline = baseline_file(tmp_path, whole)
    assert report_main(report_args(str(whole), baseline=baseline)) == 1  # slow hosts, the blamed ones: FAIL
    parts = []
    for index, part in enumerate(cut(names, count)):
        parts.append(tmp_path / f"slice-{index}")
        write_run(parts[-1], [r for r in reports if r["host"] in part], part, names)
    joined = tmp_path / "joined"
    assert slices.report_main(report_args([str(p) for p in parts], out=str(joined), baseline=baseline)) == 1
    assert fleet_outputs(joined) == fleet_outputs(whole)
    data = json.loads((joined / "fleet_report.json").read_text())
    # What the cross-host parts found, each over hosts of several slices when count > 1:
    assert {o["host"] for o in data["outliers"]} >= {"gpu-00000", "gpu-00001"}
    assert {b["host"] for b in data["baseline"]} >= {"gpu-00000", "gpu-00001"}
    assert [b["hosts"] for b in data["pairs"]["blame"] if b["status"] == "FAIL"] == [["gpu-00007"]]
    host5 = next(h for h in data["hosts"] if h["host"] == "gpu-00005")
    assert "fleet.path_mtu_blame" in {p["check_id"] for p in host5["problems"]}
    assert any(REFUSED_HOST in e["message"] for e in data["load_errors"])


def test_a_host_in_two_directories_is_refused_by_name_before_anything_is_written(tmp_path, capsys):
    names = [f"gpu-{i:05d}" for i in range(4)]
    reports = node_reports()
    write_run(tmp_path / "a", [r for r in reports if r["host"] in names[:3]], names[:3], names)
    write_run(tmp_path / "b", [r for r in reports if r["host"] in names[2:]], names[2:], names)
    out = tmp_path / "joined"
    assert cli_main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 2
    assert "host gpu-00002 has a directory in both" in capsys.readouterr().err
    assert not out.exists() or not os.listdir(out)


def test_a_join_into_one_of_its_own_directories_is_refused(tmp_path, capsys):
    names = [f"gpu-{i:05d}" for i in range(4)]
    reports = node_reports()
    write_run(tmp_path / "a", [r for r in reports if r["host"] in names[:2]], names[:2], names)
    write_run(tmp_path / "b", [r for r in reports if r["host"] in names[2:]], names[2:], names)
    assert cli_main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "a" / "j")]) == 2
    assert "lie one in the other" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "a").iterdir() if p.is_dir()) == ["gpu-00000", "gpu-00001", "j",
                                                                                 "nccl-pairs"]


def test_one_directory_is_the_fleet_report_as_before(tmp_path, capsys):
    names = [f"gpu-{i:05d}" for i in range(4)]
    write_run(tmp_path / "run", [r for r in node_reports() if r["host"] in names], names, names)
    assert cli_main(["report", str(tmp_path / "run"), "--format", "json"]) in (0, 1)
    assert (tmp_path / "run" / "fleet_report.json").is_file()
    assert "joined" not in capsys.readouterr().out


def test_without_out_the_join_is_a_new_run_directory_beside_the_first(tmp_path, capsys):
    names = [f"gpu-{i:05d}" for i in range(4)]
    reports = node_reports()
    for label, part in (("a", names[:2]), ("b", names[2:])):
        write_run(tmp_path / "runs" / label, [r for r in reports if r["host"] in part], part, names)
    runs = tmp_path / "runs"
    assert cli_main(["report", str(runs / "a"), str(runs / "b"), "--format", "json"]) in (0, 1)
    made = [p for p in (tmp_path / "runs").iterdir() if p.name not in ("a", "b")]
    assert len(made) == 1 and (made[0] / "fleet_report.json").is_file()
    assert sorted(h["host"] for h in json.loads((made[0] / "fleet_report.json").read_text())["hosts"]) == names
    assert f"joined 4 hosts of 2 run directories into {made[0]}" in capsys.readouterr().out


# ---- tunefleet verify -i --slices: the slices' playbooks replaced by what they leave behind -------------------


def test_a_failed_slice_still_yields_the_fleet_report_with_its_hosts_named_for_the_re_run(tmp_path):
    reports = {r["host"]: r for r in node_reports()}
    names = [f"gpu-{i:05d}" for i in range(HOSTS) if f"gpu-{i:05d}" != REFUSED_HOST]
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)

    def run_one(job: slices.SliceJob) -> slices.SliceResult:
        # In a process of its own (run_jobs forks): writes what the playbook over this slice would. Slice 2's
        # play stops after half its hosts reported.
        os.rmdir(job.run_dir)  # the playbook claims the empty directory; write_run makes it here
        assert Path(job.limit_file).read_text().split() == job.hosts + ["localhost"]  # the controller plays' host
        done = job.hosts[: len(job.hosts) // 2] if job.index == 2 else job.hosts
        write_run(Path(job.run_dir), [reports[h] for h in done], job.hosts, names)
        if job.index == 2:
            return slices.SliceResult(job.index, 2, "failed", {job.hosts[-1]: ["Run verify: connection lost"]},
                                      [job.hosts[-1]])
        return slices.SliceResult(job.index, 0, "successful")

    args = argparse.Namespace(slices=3, slice_by=None, inventory="inv", quiet=True, world_readable=False)
    progress = Progress(write=lambda line: None)
    lines: list = []
    outcome = slices.run_sliced(args, run_dir, names, progress, run_one=run_one, write=lines.append)
    plan = cut(names, 3)
    lost = plan[1][len(plan[1]) // 2:]
    assert outcome.rc == 2 and outcome.status == "failed"
    assert any(line.startswith(f"slice 2 of 3 ({len(plan[1])} hosts") for line in lines)
    data = json.loads((run_dir / "fleet_report.json").read_text())
    assert sorted(h["host"] for h in data["hosts"]) == sorted(set(names) - set(lost))
    assert progress.unreachable == {plan[1][-1]}
    end: list = []
    assert finish(outcome.rc, outcome.status, run_dir, progress, write=end.append, hosts=names,
                  inventory="inv") in (EXIT_COULD_NOT_CHECK, 1)
    rerun = next(line for line in end if "re-run only them" in line)
    assert rerun.endswith("--limit " + ",".join(lost))
    assert (run_dir / "rerun-hosts.txt").read_text().split() == lost
    # Each slice kept its own run directory, its host directories moved out of it into the one run directory.
    assert sorted(p.name for p in (run_dir / "slices").iterdir()) == [
        "slice-01", "slice-01.hosts", "slice-02", "slice-02.hosts", "slice-03", "slice-03.hosts"]
    assert not (run_dir / "slices" / "slice-01" / names[0]).exists()


def test_a_rack_group_that_shares_hosts_is_refused_before_any_slice_runs(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    listed = {"rack1": {"hosts": ["a", "b"]}, "rack2": {"hosts": ["b", "c"]}}
    args = argparse.Namespace(slices=2, slice_by="rack", inventory="inv", quiet=True, world_readable=False)
    lines: list = []
    ran: list = []
    outcome = slices.run_sliced(args, run_dir, ["a", "b", "c"], Progress(write=lines.append),
                                run_one=ran.append, write=lines.append, inventory_list=listed)
    assert outcome.rc == 2 and not ran and not os.listdir(run_dir)
    assert "host b is in both rack1 and rack2" in lines[0]


def test_an_inventory_that_verifies_localhost_itself_is_not_sliced(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    args = argparse.Namespace(slices=2, slice_by=None, inventory="inv", quiet=True, world_readable=False)
    lines: list = []
    outcome = slices.run_sliced(args, run_dir, ["gpu-1", "localhost"], Progress(write=lines.append),
                                run_one=lines.append, write=lines.append)
    assert outcome.rc == 2 and not os.listdir(run_dir)
    assert "names localhost as a host to verify" in lines[0]


def test_verify_sliced_gives_the_fleet_report_of_one_run_over_the_same_node_reports(tmp_path):
    reports = node_reports()
    names = [f"gpu-{i:05d}" for i in range(HOSTS)]
    whole = tmp_path / "whole"
    write_run(whole, reports, names, names)
    assert report_main(report_args(str(whole))) == 1
    by_host = {r["host"]: r for r in reports}

    def run_one(job: slices.SliceJob) -> slices.SliceResult:
        os.rmdir(job.run_dir)
        write_run(Path(job.run_dir), [by_host[h] for h in job.hosts if h in by_host], job.hosts, names)
        return slices.SliceResult(job.index, 0, "successful")

    run_dir = tmp_path / "sliced-run-dir"
    run_dir.mkdir(mode=0o700)
    args = argparse.Namespace(slices=4, slice_by=None, inventory="inv", quiet=True, world_readable=False)
    outcome = slices.run_sliced(args, run_dir, names, Progress(write=lambda line: None), run_one=run_one,
                                write=lambda line: None)
    assert (outcome.rc, outcome.status) == (0, "successful")
    assert fleet_outputs(run_dir) == fleet_outputs(whole)
