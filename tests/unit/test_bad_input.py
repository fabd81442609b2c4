"""Bad input anywhere gets one clear message naming the problem, and exit code 2: no traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from verify.cli import main


def run(capsys, argv: list) -> tuple:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def test_unknown_profile_lists_the_known_ones(capsys, tmp_path: Path) -> None:
    code, err = run(capsys, ["verify", "--local", "--profile", "h999", "--no-bench", "--out", str(tmp_path)])
    assert code == 2
    assert "no hardware profile 'h999'" in err and "h200-x2-nvlink" in err


def test_malformed_vars_file_is_named(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "group_vars.yml"
    bad.write_text("network_mtu: [9000\n")
    code, err = run(capsys, ["verify", "--local", "--vars", str(bad), "--no-bench", "--out", str(tmp_path)])
    assert code == 2 and f"{bad} is not valid YAML" in err


def test_malformed_spec_is_named(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "spec.json"
    bad.write_text('{"schema": "tunefleet.desired_state/v1"}')
    code, err = run(capsys, ["verify", "--local", "--spec", str(bad), "--out", str(tmp_path)])
    assert code == 2 and "section 'sysctl' missing" in err


def test_unwritable_report_directory_is_refused_before_checks_run(capsys, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, err = run(capsys, ["verify", "--local", "--no-bench", "--out", str(blocker / "reports")])
    assert code == 2 and "is not writable" in err and str(blocker) in err


def test_unknown_report_format_is_named(capsys, tmp_path: Path) -> None:
    code, err = run(capsys, ["verify", "--local", "--no-bench", "--format", "json,pdf", "--out", str(tmp_path)])
    assert code == 2 and "pdf" in err
    assert not list(tmp_path.iterdir())


def test_unreadable_fleet_report_directory(capsys, tmp_path: Path) -> None:
    code, err = run(capsys, ["report", str(tmp_path / "missing")])
    assert code == 2 and "not a directory" in err


@pytest.mark.parametrize("content", ["garbage", '{"schema": "nope"}', "[1, 2]"])
def test_malformed_node_report_is_named_and_nothing_is_built_from_it(capsys, tmp_path: Path, content: str) -> None:
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "report.json").write_text(content)
    code, err = run(capsys, ["report", str(tmp_path)])
    assert code == 2
    assert "node1/report.json" in err


@pytest.mark.parametrize(
    "content, extra, message",
    [
        ("all:\n  hosts: [node1\n", [], "cannot be parsed"),
        ("all:\n  children:\n    gpu: {}\n", [], "has no hosts"),
        ("all:\n  hosts:\n    node1:\n", ["--limit", "node9"], "no hosts matching --limit node9"),
    ],
)
def test_unusable_inventory_is_refused_before_ansible_runs(capsys, tmp_path: Path, content, extra, message) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(content)
    code, err = run(capsys, ["verify", "-i", str(inventory), "--out", str(tmp_path / "reports"), *extra])
    assert code == 2 and message in err and str(inventory) in err
    assert not (tmp_path / "reports").exists()


def test_unknown_profile_with_an_inventory_is_refused_like_local(capsys, tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    node1:\n")
    code, err = run(capsys, ["verify", "-i", str(inventory), "--profile", "h999", "--out", str(tmp_path / "reports")])
    assert code == 2 and "no hardware profile 'h999'" in err and "h200-x2-nvlink" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "reports").exists()


def test_a_known_profile_with_an_inventory_reaches_the_playbook(tmp_path: Path) -> None:
    import argparse

    from verify.fleet.run import Progress, runner_kwargs

    args = argparse.Namespace(inventory="hosts.yml", limit=None, profile="h200-x2-nvlink")
    kwargs = runner_kwargs(args, tmp_path, tmp_path / "reports" / "run1", str(tmp_path), Progress(lambda _: None))
    assert kwargs["extravars"]["verify_profile"] == "h200-x2-nvlink"


def test_exit_codes_keep_bad_input_apart_from_could_not_check(tmp_path):
    """2 is bad input (nothing checked); 3 is an ERROR row with nothing failed; --help says so."""
    import subprocess
    import sys

    from verify.result import CheckResult as Row
    from verify.result import Status, exit_code

    assert exit_code([Row("a", "x", Status.ERROR), Row("b", "x", Status.PASS)]) == 3
    assert exit_code([Row("a", "x", Status.ERROR), Row("b", "x", Status.FAIL)]) == 1
    assert exit_code([Row("a", "x", Status.SKIP), Row("b", "x", Status.WARN)]) == 0
    shown = subprocess.run([sys.executable, "-m", "verify", "--help"], capture_output=True, text=True, check=True)
    assert "2 bad input" in shown.stdout and "3 nothing failed but something could not be checked" in shown.stdout
    bad = subprocess.run([sys.executable, "-m", "verify", "verify", "--local", "--profile", "no-such-profile",
                          "--out", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "no-such-profile" in bad.stderr
