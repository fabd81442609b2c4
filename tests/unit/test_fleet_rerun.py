"""A fleet run that lost hosts names them and the command that re-runs only them (verify.fleet.rerun)."""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from verify.fleet.rerun import MAX_NAMED, RERUN_FILE, hosts_without_report, main, report_missing
from verify.fleet.run import Progress, finish


def run_dir_with_reports(tmp_path: Path, reported: list, without: list = ()) -> Path:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    for host in reported:
        (run / host).mkdir()
        (run / host / "report.json").write_text("{}")
    for host in without:  # a directory with no report: e.g. the controller's crossnode-rdma.json only
        (run / host).mkdir()
        (run / host / "crossnode-rdma.json").write_text("[]")
    return run


def test_hosts_without_a_report_are_the_targets_minus_those_that_wrote_one(tmp_path):
    run = run_dir_with_reports(tmp_path, ["n1", "n3"], without=["n4"])
    assert hosts_without_report(str(run), ["n4", "n1", "n2", "n3", "n2"]) == ["n2", "n4"]


def test_every_host_reported_prints_nothing_and_writes_no_list(tmp_path):
    run = run_dir_with_reports(tmp_path, ["n1", "n2"])
    assert report_missing(str(run), "inv.yml", ["n1", "n2"]) == []
    assert not (run / RERUN_FILE).exists()


def test_a_few_lost_hosts_are_named_on_the_command_line_that_re_runs_only_them(tmp_path):
    run = run_dir_with_reports(tmp_path, ["n1"])
    lines = report_missing(str(run), "my inv.yml", ["n1", "n7", "n2"])
    assert lines[0].startswith("no report from 2 host(s): n2, n7")
    assert shlex.split(lines[1].split(": ", 1)[1]) == ["tunefleet", "verify", "-i", "my inv.yml", "--limit", "n2,n7"]
    assert (run / RERUN_FILE).read_text() == "n2\nn7\n"
    assert oct((run / RERUN_FILE).stat().st_mode & 0o777) == oct(0o600)


def test_many_lost_hosts_are_read_from_the_list_file_by_limit_at_file(tmp_path):
    run = run_dir_with_reports(tmp_path, [])
    hosts = [f"n{i:03d}" for i in range(MAX_NAMED + 5)]
    lines = report_missing(str(run), "inv", hosts, playbook=True)
    assert "and 5 more" in lines[0]
    command = shlex.split(lines[1].split(": ", 1)[1])
    assert command[:3] == ["ansible-playbook", "-i", "inv"]
    assert command[-2:] == ["--limit", "@" + str(run / RERUN_FILE)]
    assert (run / RERUN_FILE).read_text().split() == hosts


def test_the_module_the_play_runs_prints_the_ansible_playbook_form(tmp_path, capsys):
    run = run_dir_with_reports(tmp_path, ["a"])
    assert main([str(run), "--inventory", "inv", "--host", "a", "--host", "b"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "re-run only them: ansible-playbook -i inv playbooks/verify.yml --limit b"


def test_tunefleet_verify_ends_with_the_hosts_that_never_reported_and_their_re_run(tmp_path):
    run = run_dir_with_reports(tmp_path, ["good"])
    (run / "fleet_report.json").write_text(json.dumps({"hosts": [{"host": "good", "worst": "PASS", "problems": []}],
                                                       "bad_hosts": [], "load_errors": []}))
    progress = Progress(write=lambda _: None)
    progress.unreachable.add("lost")
    lines = []
    code = finish(4, "failed", run, progress, write=lines.append, hosts=["good", "lost"], inventory="inv")
    assert code == 3  # could not check
    assert "  re-run only them: tunefleet verify -i inv --limit lost" in lines
    assert os.path.isfile(run / RERUN_FILE)
