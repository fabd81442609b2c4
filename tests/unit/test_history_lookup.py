"""`tunefleet history` right after `make demo`: with no history at the default place it reads the one the
user last wrote beside their reports (reports/demo/history.sqlite) and says so; with none anywhere it names
where to look. Through the real command, from the directory the user runs it in."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.unit.test_history_cli import spec_file, tree
from verify.cli import main
from verify.result import EXIT_BAD_INPUT

REPO = Path(__file__).resolve().parents[2]


def history(cwd: Path, default: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TUNEFLEET_HISTORY": str(default)}
    return subprocess.run([sys.executable, "-m", "verify", "history", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=env)


def demo_run(tmp_path: Path, name: str = "demo") -> Path:
    """What `make demo` does: verify --local with its history beside its reports."""
    db = tmp_path / "reports" / name / "history.sqlite"
    code = main(["verify", "--local", "--spec", spec_file(tmp_path), "--root", str(tree(tmp_path).root),
                 "--out", str(db.parent), "--no-bench", "--format", "json", "--quiet", "--history", str(db)])
    assert code == 0 and db.is_file()
    return db


def test_after_make_demo_history_reads_the_demo_s_history_and_says_so(tmp_path):
    db = demo_run(tmp_path)
    missing = tmp_path / "nothing-here" / "history.sqlite"  # the default place, never written
    done = history(tmp_path, missing)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert done.stdout.split() == ["gpu-07"]
    assert f"reading {db}" in done.stderr and f"{missing} does not exist" in done.stderr


def test_the_newest_of_several_local_histories_is_read(tmp_path):
    older = demo_run(tmp_path, "first")
    newer = demo_run(tmp_path, "second")
    os.utime(older, (1_000_000_000, 1_000_000_000))
    done = history(tmp_path, tmp_path / "none" / "history.sqlite")
    assert done.returncode == 0 and f"reading {newer}" in done.stderr


def test_the_default_history_wins_when_it_exists(tmp_path):
    demo_run(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    default = demo_run(tmp_path / "elsewhere")
    done = history(tmp_path, default)
    assert done.returncode == 0 and "reading" not in done.stderr and done.stdout.split() == ["gpu-07"]


def test_with_no_history_anywhere_it_names_where_to_look(tmp_path):
    missing = tmp_path / "none" / "history.sqlite"
    done = history(tmp_path, missing)
    assert done.returncode == EXIT_BAD_INPUT and "Traceback" not in done.stderr
    assert "pass --history PATH" in done.stderr and "reports/demo/history.sqlite" in done.stderr
