"""`tunefleet verify -i`: live per-host progress from ansible-runner events, and the exit code."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from verify.fleet.run import Progress, finish, runner_kwargs

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "fleet"
EVENTS = json.loads((FIXTURES / "ansible_runner_events.json").read_text())


def test_each_finished_task_is_one_line_per_host_and_failures_say_why():
    lines = []
    progress = Progress(write=lines.append)
    for event in EVENTS:
        assert progress(event) is True
    assert lines[0].startswith("== ")
    assert lines[1].split() == ["localhost", "ok", "A", "task", "that", "works"]
    assert "FAILED" in lines[2] and "A task that fails: non-zero return code" in lines[2]
    assert progress.failed == {"localhost": ["A task that fails: non-zero return code"]}


def write_report(run_dir: Path, bad: list, errors: list = ()) -> None:
    run_dir.mkdir(parents=True)
    hosts = [{"host": h, "worst": "FAIL", "problems": [{"check_id": "sysctl.x", "reason": "x is 1, expected 2"}]}
             for h in bad] + [{"host": "good", "worst": "PASS", "problems": []}]
    report = {"hosts": hosts, "bad_hosts": bad, "load_errors": list(errors)}
    (run_dir / "fleet_report.json").write_text(json.dumps(report))


def test_the_exit_code_names_bad_hosts_first_then_hosts_that_never_reported(tmp_path):
    lines = []
    write_report(tmp_path / "a", ["n3"])
    assert finish(2, "failed", tmp_path / "a", Progress(write=lines.append), write=lines.append) == 1
    assert any("FAIL  n3: sysctl.x: x is 1, expected 2" in line for line in lines)
    write_report(tmp_path / "b", [])
    unreachable = Progress(write=lambda _: None)
    unreachable.unreachable.add("n9")
    lines.clear()
    assert finish(4, "failed", tmp_path / "b", unreachable, write=lines.append) == 3  # could not check
    assert "UNREACHABLE n9: no report from this host" in " ".join(lines)
    write_report(tmp_path / "c", [])
    assert finish(0, "successful", tmp_path / "c", Progress(write=lambda _: None), write=lambda _: None) == 0


def test_a_run_that_died_before_the_report_is_an_error_with_the_last_failure(tmp_path):
    lines = []
    progress = Progress(write=lambda _: None)
    for event in EVENTS:
        progress(event)
    assert finish(2, "failed", tmp_path / "missing", progress, write=lines.append) == 3
    assert "before the fleet report was written" in lines[0]
    assert lines[1] == "  localhost: A task that fails: non-zero return code"


def test_the_playbook_gets_the_run_directory_and_the_limit(tmp_path):
    args = argparse.Namespace(inventory="inventory/local", limit="gpu[0:3]", quiet=False)
    kwargs = runner_kwargs(args, Path("/opt/tunefleet"), tmp_path / "reports" / "20260101T000000Z", "/tmp/w",
                           Progress(write=lambda _: None))
    assert kwargs["playbook"] == "/opt/tunefleet/playbooks/verify.yml"
    assert kwargs["limit"] == "gpu[0:3],localhost"  # the controller plays keep their host
    assert kwargs["extravars"] == {"verify_node_report_dir": str(tmp_path / "reports"),
                                   "verify_node_run_id": "20260101T000000Z"}
    assert kwargs["envvars"]["ANSIBLE_ROLES_PATH"] == "/opt/tunefleet/roles"


def test_the_node_packs_its_reports_flat_in_one_archive(tmp_path):
    import tarfile

    from verify.noderun import archive_reports

    (tmp_path / "report").mkdir()
    for name in ("report.json", "report.md", "tunefleet.prom"):
        (tmp_path / "report" / name).write_text(name)
    assert archive_reports(str(tmp_path / "report"), str(tmp_path / "r.tar.gz")) == 3
    with tarfile.open(tmp_path / "r.tar.gz") as tar:
        assert tar.getnames() == ["report.json", "report.md", "tunefleet.prom"]


def test_a_node_run_without_a_report_is_exit_3_not_a_verdict(tmp_path, capsys):
    from verify.noderun import main

    (tmp_path / "spec.json").write_text("{}")
    code = main(["--spec", str(tmp_path / "spec.json"), "--out", str(tmp_path / "out"),
                 "--archive", str(tmp_path / "r.tar.gz")])
    assert code == 3
    assert "without writing" in capsys.readouterr().err
    assert not (tmp_path / "r.tar.gz").exists()


def test_the_node_reads_the_tree_verify_node_root_names_and_refuses_a_relative_one(tmp_path, capsys, monkeypatch):
    import verify.cli
    from verify.noderun import main

    seen = []
    monkeypatch.setattr(verify.cli, "main", lambda argv: seen.append(argv) or 0)
    (tmp_path / "spec.json").write_text("{}")
    common = ["--spec", str(tmp_path / "spec.json"), "--out", str(tmp_path / "out"), "--archive", str(tmp_path / "r")]
    assert main(common + ["--root", "snap/tree"]) == 2
    assert "verify_node_root must be an absolute path, got 'snap/tree'" in capsys.readouterr().err
    assert seen == []  # refused before verify ran
    main(common + ["--root", str(tmp_path / "tree")])
    assert seen[0][seen[0].index("--root") + 1] == str(tmp_path / "tree")
    main(common)
    assert seen[1][seen[1].index("--root") + 1] == "/"


def test_the_desired_state_sent_on_stdin_is_written_where_spec_names_and_judged_from_there(tmp_path, monkeypatch):
    import io

    import verify.cli
    import verify.noderun
    from verify.noderun import main

    seen = []
    monkeypatch.setattr(verify.cli, "main", lambda argv: seen.append(argv) or 0)
    spec = tmp_path / "desired_state.json"
    common = ["--spec", str(spec), "--spec-stdin", "--out", str(tmp_path / "out"), "--archive", str(tmp_path / "r")]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"schema": "tunefleet.desired_state/v1"}')))
    main(common)
    assert spec.read_text() == '{"schema": "tunefleet.desired_state/v1"}'
    assert spec.stat().st_mode & 0o777 == 0o600
    assert seen[0][seen[0].index("--spec") + 1] == str(spec)
    monkeypatch.setattr(verify.noderun, "MAX_SPEC_BYTES", 8)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"too": "long"}')))
    assert main(common) == 2 and len(seen) == 1  # refused before verify ran


def test_forks_reach_ansible_runner_and_a_bad_count_is_refused_before_anything_runs(tmp_path, capsys):
    import pytest

    from verify.cli import main as cli_main

    args = argparse.Namespace(inventory="inventory/local", limit=None, quiet=False, forks=250)
    kwargs = runner_kwargs(args, Path("/opt/tunefleet"), tmp_path / "r" / "20260101T000000Z", "/tmp/w",
                           Progress(write=lambda _: None))
    assert kwargs["forks"] == 250
    args.forks = None
    assert "forks" not in runner_kwargs(args, Path("/opt/tunefleet"), tmp_path / "r" / "x", "/tmp/w",
                                        Progress(write=lambda _: None))
    with pytest.raises(SystemExit) as exit_:
        cli_main(["verify", "-i", "inventory/local", "--forks", "0"])
    assert exit_.value.code == 2 and "'0' is not a whole number of at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("limit, expected", [
    ("gpu-01", "gpu-01,localhost"),
    ("@/run/rerun-hosts.txt", "@/run/rerun-hosts.txt,localhost"),
    ("gpu-01,localhost", "gpu-01,localhost"),
    ("gpu[0:3], localhost", "gpu[0:3], localhost"),
])
def test_a_limit_keeps_the_controller_plays_host(limit, expected):
    from verify.fleet.run import with_controller

    assert with_controller(limit) == expected
