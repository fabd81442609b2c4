"""`tunefleet fix` (verify.fleet.fix): plans per host the roles whose remedy removes a finding, runs only those
tags on only those hosts (check mode unless --apply), leaves hardware findings alone, refuses old or foreign run
directories. Ansible is replaced by a player that records what it was asked and answers with events; the run
directories are real node reports of the real checks over a fake tree."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree, desired_state
from verify import checks
from verify.fleet import fix
from verify.judging import remedies, verdicts
from verify.report import build_report
from verify.result import CheckResult, Status


def _report(tmp_path, host: str, clean: bool = False, hardware: bool = False, when: str = "") -> dict:
    spec = desired_state()
    results = checks.run_checks(spec, FakeTree(tmp_path / f"tree-{host}").nic("ens1", mtu=1500).node(),
                                names=["network.mtu", "limits", "cpu.governor"])
    if hardware:
        results.append(CheckResult("health.gpu.xid.0000:3b:00.0", "health", Status.FAIL, None, "Xid 79",
                                   "GPU 0 fell off the bus", verdicts.WORDS[verdicts.REBOOT],
                                   {verdicts.ACTION_KEY: verdicts.REBOOT}))
    if clean:
        for r in results:
            r.status = Status.PASS if r.status in (Status.FAIL, Status.WARN) else r.status
    remedies.attach(results, spec)
    report = build_report(spec, {"host": host}, results, {"root": "/", "benchmarks": False,
                                                         "command": "tunefleet verify --local --no-bench"})
    if when:
        report["generated_at"] = when
    return report


def _fleet(tmp_path, reports: dict, inventory: str = "") -> str:
    run = tmp_path / "reports" / "20261207T040000Z-abcd"
    run.mkdir(parents=True, mode=0o700)
    (run / "fleet_report.json").write_text("{}")
    for host, report in reports.items():
        (run / host).mkdir(mode=0o700)
        (run / host / "report.json").write_text(json.dumps(report))
    if inventory:
        (run / fix.INVENTORY_RECORD).write_text(json.dumps({"inventory": inventory, "hosts": sorted(reports)}))
    return str(run)


def _inventory(tmp_path, hosts) -> str:
    path = tmp_path / "inventory"
    path.write_text("[fleet]\n" + "".join(f"{h} ansible_connection=local\n" for h in hosts))
    return str(path)


class Player:
    """ansible-runner's run, recorded: each call's kwargs; answers with a changed task per role asked."""

    def __init__(self, rc: int = 0):
        self.calls = []
        self.rc = rc

    def __call__(self, kwargs, home):
        self.calls.append(kwargs)
        for host in kwargs["limit"].split(","):
            for role in kwargs["tags"].split(","):
                kwargs["event_handler"]({"event": "runner_on_ok", "event_data": {
                    "host": host, "role": role, "task": "apply", "res": {"changed": True, "diff": [
                        {"before_header": f"/etc/{role}", "before": "old", "after": "new"}]}}})
            kwargs["event_handler"]({"event": "runner_on_ok", "event_data": {
                "host": host, "role": "preflight", "task": "read", "res": {"changed": False}}})
        return argparse.Namespace(rc=self.rc, status="successful" if self.rc == 0 else "failed")


def _args(directory, **extra):
    return argparse.Namespace(directory=directory, inventory=extra.get("inventory"), apply=extra.get("apply", False),
                              max_age=extra.get("max_age", fix.DEFAULT_MAX_AGE), quiet=False, history=None,
                              no_history=True, roles=extra.get("roles"))


def test_the_plan_names_each_host_s_roles_and_leaves_hardware_alone(tmp_path):
    run = fix.load_run(_fleet(tmp_path, {"a": _report(tmp_path, "a", hardware=True), "b": _report(tmp_path, "b"),
                                         "c": _report(tmp_path, "c", clean=True)}))
    plans = {p.host: p for p in fix.plan(fix.findings_of(run))}
    assert plans["a"].roles == ["limits", "network"] == plans["b"].roles and plans["c"].roles == []
    assert [f.check_id for f in plans["a"].apart] == ["health.gpu.xid.0000:3b:00.0"]
    assert all(f.remedy["kind"] == "role" for f in plans["a"].fixes)
    assert fix.groups(list(plans.values())) == [(["limits", "network"], ["a", "b"])]
    lines = fix.render_plan(list(plans.values()), run.path)
    assert any("a: FAIL health.gpu.xid" in line and "-> [reboot]" in line for line in lines)
    assert "  c: nothing to fix" in lines


def test_check_mode_runs_only_the_planned_tags_on_the_planned_hosts(tmp_path):
    inventory = _inventory(tmp_path, ["a", "b", "c"])
    directory = _fleet(tmp_path, {"a": _report(tmp_path, "a"), "c": _report(tmp_path, "c", clean=True)},
                       os.path.abspath(inventory))
    player, out = Player(), []
    assert fix.main(_args(directory), player=player, write=out.append) == 0
    (call,) = player.calls
    assert call["limit"] == "a" and call["tags"] == "limits,network" and call["cmdline"] == "--check --diff"
    assert call["extravars"]["tunefleet_reboot_policy"] == "never" and call["inventory"] == os.path.abspath(inventory)
    assert "  a: would change: limits 1, network 1, preflight 0" in out
    assert "check mode: nothing changed; run again with --apply to apply" in out
    assert not [d for d in os.listdir(os.path.dirname(directory)) if "-fix-" in d]  # nothing re-verified


def test_apply_re_verifies_those_hosts_and_writes_before_and_after(tmp_path, monkeypatch):
    inventory = os.path.abspath(_inventory(tmp_path, ["a", "b"]))
    directory = _fleet(tmp_path, {"a": _report(tmp_path, "a"), "b": _report(tmp_path, "b", clean=True)}, inventory)
    asked = []

    def reverify(inv, hosts, out, fix_args):
        asked.append((inv, list(hosts)))
        return 0, _fleet(tmp_path / "after", {"a": _report(tmp_path, "a2", clean=True)})

    monkeypatch.setattr(fix, "reverify_fleet", reverify)
    out = []
    assert fix.main(_args(directory, apply=True), player=Player(), write=out.append) == 0
    assert asked == [(inventory, ["a"])]
    (made,) = [d for d in os.listdir(os.path.dirname(directory)) if "-fix-" in d]
    doc = json.loads(Path(os.path.dirname(directory), made, "fix_report.json").read_text())
    assert doc["changed"] == {"a": {"limits": 1, "network": 1, "preflight": 0}}
    assert doc["findings"] and {r["after"]["status"] for r in doc["findings"]} == {"PASS"}
    assert {r["before"]["status"] for r in doc["findings"]} == {"FAIL"}
    assert any(line.startswith("  a: network.mtu.ens1: FAIL -> PASS") for line in out)


def test_a_finding_still_failing_after_the_apply_is_exit_1(tmp_path, monkeypatch):
    inventory = os.path.abspath(_inventory(tmp_path, ["a"]))
    directory = _fleet(tmp_path, {"a": _report(tmp_path, "a")}, inventory)
    monkeypatch.setattr(fix, "reverify_fleet", lambda inv, hosts, out, fix_args: (1, _fleet(tmp_path / "after", {
        "a": _report(tmp_path, "a2")})))
    assert fix.main(_args(directory, apply=True), player=Player(), write=[].append) == 1


def test_an_old_run_is_refused_before_anything_runs(tmp_path):
    old = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=30)).isoformat()
    directory = _fleet(tmp_path, {"a": _report(tmp_path, "a", when=old)}, "/x/inventory")
    player, out = Player(), []
    assert fix.main(_args(directory), player=player, write=out.append) == 2
    assert "older than --max-age 24h" in out[0] and player.calls == []
    assert fix.main(_args(directory, max_age="2d"), player=player, write=out.append) == 2  # now: the inventory
    assert "/x/inventory" in out[-1]


def test_a_run_of_another_inventory_is_refused(tmp_path):
    mine = os.path.abspath(_inventory(tmp_path, ["a"]))
    directory = _fleet(tmp_path, {"a": _report(tmp_path, "a")}, "/somewhere/else")
    out = []
    assert fix.main(_args(directory, inventory=mine), player=Player(), write=out.append) == 2
    assert "is a run of inventory /somewhere/else, not " + mine in out[0]
    other = tmp_path / "other"
    other.mkdir()
    directory = _fleet(other, {"zz": _report(tmp_path, "zz")})  # recorded nothing: its hosts must be there
    assert fix.main(_args(directory, inventory=mine), player=Player(), write=out.append) == 2
    assert "host(s) zz are not in inventory" in out[-1]


def test_a_local_run_is_fixed_only_on_its_own_host_with_its_desired_state(tmp_path, monkeypatch):
    local = tmp_path / "local"
    local.mkdir(mode=0o700)
    report = _report(tmp_path, socket.gethostname())
    (local / "report.json").write_text(json.dumps(report))
    player, out = Player(), []
    assert fix.main(_args(str(local)), player=player, write=out.append) == 0
    (call,) = player.calls
    assert call["limit"] == socket.gethostname() and call["extravars"]["limits_memlock"] == "unlimited"
    assert call["extravars"]["network_mtu"] == report["desired_state"]["network"]["mtu"]
    assert "cpu_governor" not in call["extravars"]  # a role it does not apply gets nothing
    report["host"] = "elsewhere"
    (local / "report.json").write_text(json.dumps(report))
    assert fix.main(_args(str(local)), player=player, write=out.append) == 2 and "not of this host" in out[-1]


def test_the_end_of_a_fleet_verify_names_the_fix_command_and_the_hardware_apart(tmp_path):
    directory = _fleet(tmp_path, {"a": _report(tmp_path, "a", hardware=True), "b": _report(tmp_path, "b"),
                                  "c": _report(tmp_path, "c", clean=True)})
    lines = fix.fleet_end_lines(directory, "inv/hosts", ["a", "b", "c"])
    assert lines[0].startswith("2 host(s) have findings the roles fix (a, b): tunefleet fix " + directory +
                               " -i inv/hosts")
    assert lines[1] == "1 host(s) have findings no role fixes (left to you):"
    assert lines[2].startswith("  a: health.gpu.xid.0000:3b:00.0: [reboot]")
    recorded = json.loads(Path(directory, fix.INVENTORY_RECORD).read_text())
    assert recorded == {"inventory": os.path.abspath("inv/hosts"), "hosts": ["a", "b", "c"]}


@given(st.one_of(st.integers(-5, 10**6).map(str), st.tuples(st.integers(0, 999), st.sampled_from("smhdxy ")).map(
    lambda t: f"{t[0]}{t[1]}"), st.text(max_size=6)))
def test_max_age_takes_every_documented_form_and_names_the_option_otherwise(text):
    try:
        seconds = fix.parse_age(text)
    except ValueError as exc:
        assert "--max-age" in str(exc)
        return
    number, unit = int(text.strip().rstrip("smhd") or 0), text.strip()[-1:]
    assert seconds == number * {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(unit, 1) and seconds > 0


def test_a_run_directory_with_no_reports_is_bad_input(tmp_path):
    out = []
    assert fix.main(_args(str(tmp_path)), player=Player(), write=out.append) == 2
    assert "neither report.json" in out[0]


@pytest.mark.parametrize("text", ["0", "-1h", "1w", "soon"])
def test_bad_max_age_is_refused(text):
    with pytest.raises(ValueError, match="--max-age"):
        fix.parse_age(text)


def test_the_plan_playbooks_fix_yml_reads_is_the_same_plan(tmp_path, capsys):
    directory = _fleet(tmp_path, {"a": _report(tmp_path, "a", hardware=True), "c": _report(tmp_path, "c", clean=True)})
    assert fix.plan_main([directory]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["hosts"] == {"a": ["limits", "network"]} and printed["kind"] == "fleet"
    assert len(printed["apart"]) == 1 and "health.gpu.xid" in printed["apart"][0]
    assert fix.plan_main([directory, "--max-age", "1s"]) in (0, 2)  # the reports were made a moment ago
    assert fix.plan_main([str(tmp_path / "nowhere")]) == 2


def test_playbooks_fix_yml_asks_the_same_module_and_applies_only_the_planned_roles():
    text = (Path(__file__).resolve().parents[2] / "playbooks" / "fix.yml").read_text()
    assert "verify.fleet.fix" in text and "tunefleet_reboot_policy: never" in text
    assert "loop: \"{{ tunefleet_fix_roles }}\"" in text and "hosts: tunefleet_fix" in text


def test_a_hardware_finding_of_a_drill_is_listed_with_its_action_and_never_planned(tmp_path, capsys):
    from tests.helpers import drills
    from verify.cli import main as cli

    drill = next(d for d in drills.DRILLS if d.name == "xid79")
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    directory = drills.make(drill, tmp_path / "inject")
    out = tmp_path / "out"
    assert cli(["verify", "--local", "--root", str(tree.root), "--inject", str(directory), "--no-bench",
                "--no-history", "--format", "json", "--quiet", "--out", str(out)]) == 1
    capsys.readouterr()
    assert fix.plan_main([str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    xid = [line for line in printed["apart"] if "health.gpu.xid" in line]
    assert xid and all("[reboot]" in line or "[drain-rma]" in line for line in xid)
    assert "health" not in {role for roles in printed["hosts"].values() for role in roles}
    said = []
    assert fix.main(_args(str(out)), player=Player(), write=said.append) == 2  # a tree, not this host
    assert "(--root), not this host" in said[0]


def test_the_re_verify_limits_to_the_fixed_hosts_and_the_controller(tmp_path, monkeypatch):
    from verify.fleet import run as fleet_run

    seen = []

    def fake_main(args):
        seen.append(args)
        os.mkdir(tmp_path / "out" / "20261207T000000Z-aaaa")
        return 0

    (tmp_path / "out").mkdir()
    monkeypatch.setattr(fleet_run, "main", fake_main)
    rc, made = fix.reverify_fleet("inv", ["a", "b"], str(tmp_path / "out"),
                                  argparse.Namespace(history=None, no_history=True))
    assert rc == 0 and made == str(tmp_path / "out" / "20261207T000000Z-aaaa")
    # playbooks/verify.yml's controller plays run on localhost: a limit without it skips them.
    assert seen[0].limit == "a,b,localhost" and seen[0].no_history is True and seen[0].inventory == "inv"


def test_roles_fixes_only_the_chosen_roles_and_lists_the_others(tmp_path):
    inventory = _inventory(tmp_path, ["a", "b"])
    directory = _fleet(tmp_path, {"a": _report(tmp_path, "a"), "b": _report(tmp_path, "b")}, os.path.abspath(inventory))
    player, out = Player(), []
    assert fix.main(_args(directory, roles="network"), player=player, write=out.append) == 0
    (call,) = player.calls
    assert call["tags"] == "network" and call["limit"] == "a,b"
    assert any(line.startswith("not run (their roles are not among --roles)") for line in out)
    assert any("a: FAIL limits." in line for line in out)  # listed, never run


@pytest.mark.parametrize("text", ["", "network,bogus", "preflight", "reboot", "../sysctl"])
def test_roles_outside_the_tuning_roles_are_refused_by_name(tmp_path, text):
    inventory = _inventory(tmp_path, ["a"])
    directory = _fleet(tmp_path, {"a": _report(tmp_path, "a")}, os.path.abspath(inventory))
    player, out = Player(), []
    assert fix.main(_args(directory, roles=text), player=player, write=out.append) == 2
    assert "--roles" in out[-1] and not player.calls


def test_a_local_run_applies_with_the_vars_files_it_was_verified_with(tmp_path):
    # Found on the H100 (tests/device/fix_nccl_conf.sh): preflight refused the fix because
    # storage_allow_no_match, which the run's --vars file set, is not part of the desired state.
    local = tmp_path / "local"
    local.mkdir(mode=0o700)
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text("storage_allow_no_match: true\nlimits_memlock: 1\n")
    report = _report(tmp_path, socket.gethostname())
    report["run"]["command"] = f"tunefleet verify --local --vars {vars_file} --no-bench"
    (local / "report.json").write_text(json.dumps(report))
    player, out = Player(), []
    assert fix.main(_args(str(local)), player=player, write=out.append) == 0
    (call,) = player.calls
    assert call["extravars"]["storage_allow_no_match"] is True
    assert call["extravars"]["limits_memlock"] == "unlimited"  # the desired state the run judged wins
