"""`tunefleet report` on what a newcomer tries first (issue 32): a bad --out is exit 2 with one line naming the
directory and why, never a traceback; the demo's directory (report.json beside state-before.json) is one node."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE_REPORT = REPO / "tests" / "fixtures" / "node" / "gpu_machine_report.json"
STATE = REPO / "molecule" / "shared" / "files" / "node_state.py"


def tunefleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verify", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.fixture
def demo_dir(tmp_path) -> Path:
    """What `make demo` leaves: the node's report.json and the real state-before.json beside it."""
    directory = tmp_path / "demo"
    directory.mkdir()
    shutil.copy(NODE_REPORT, directory / "report.json")
    saved = subprocess.run([sys.executable, str(STATE), "save", str(directory / "state-before.json"), "--host"],
                           capture_output=True, text=True, timeout=120)
    assert saved.returncode == 0, saved.stderr
    return directory


def test_a_node_report_directory_is_one_node_and_its_state_file_is_not_read(demo_dir):
    done = tunefleet("report", str(demo_dir), cwd=demo_dir)
    assert "state-before.json" not in done.stderr and "Traceback" not in done.stderr
    assert done.returncode == 1  # the captured report's FAILs, not a load error (2)
    fleet = json.loads((demo_dir / "fleet_report.json").read_text())
    assert [h["host"] for h in fleet["hosts"]] == [json.loads(NODE_REPORT.read_text())["host"]]
    assert fleet["load_errors"] == []


def read_only_mount(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    target = tmp_path / "ro"
    target.mkdir()
    subprocess.run(["mount", "--bind", str(target), str(target)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
    return target


@pytest.mark.parametrize("where", ["under_a_file", "under_proc", "read_only_mount"])
def test_a_bad_out_is_exit_2_with_one_line_naming_the_directory(demo_dir, tmp_path, where):
    mounted = None
    if where == "under_a_file":
        out = str(demo_dir / "report.json" / "sub")
    elif where == "under_proc":
        out = "/proc/tunefleet-reports"
    else:
        mounted = read_only_mount(tmp_path)
        out = str(mounted / "reports")
    try:
        done = tunefleet("report", str(demo_dir), "--out", out, cwd=tmp_path)
    finally:
        if mounted:
            subprocess.run(["umount", str(mounted)], check=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and out in lines[0] and lines[0].startswith("tunefleet report: --out: report directory")
    assert not (demo_dir / "fleet_report.json").exists()  # refused before anything was read or written


def test_verify_and_baseline_refuse_a_bad_out_the_same_way(demo_dir, tmp_path):
    out = str(demo_dir / "report.json" / "sub")
    spec = REPO / "tests" / "fixtures" / "node" / "desired_state.json"
    done = tunefleet("verify", "--local", "--spec", str(spec), "--no-bench", "--out", out, cwd=tmp_path)
    assert done.returncode == 2 and out in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = tunefleet("baseline", str(demo_dir), "--out", out + "/baseline.json", cwd=tmp_path)
    assert done.returncode == 2 and out in done.stderr and "Traceback" not in done.stderr
