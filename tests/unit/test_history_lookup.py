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
    assert hosts_of(done.stdout) == ["gpu-07"]
    assert f"reading {db}" in done.stderr and f"{missing} does not exist" in done.stderr


def test_the_newest_of_several_local_histories_is_read(tmp_path):
    older = demo_run(tmp_path, "first")
    newer = demo_run(tmp_path, "second")
    os.utime(older, (1_000_000_000, 1_000_000_000))
    done = history(tmp_path, tmp_path / "none" / "history.sqlite")
    assert done.returncode == 0 and f"reading {newer}" in done.stderr


def test_the_default_history_wins_when_it_exists_and_the_demo_s_is_named(tmp_path):
    demo = demo_run(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    default = demo_run(tmp_path / "elsewhere")
    done = history(tmp_path, default)
    assert done.returncode == 0 and hosts_of(done.stdout) == ["gpu-07"]
    assert f"reading {default} (the default" in done.stderr
    assert f"--history {demo.relative_to(tmp_path)} reads it" in done.stderr


def hosts_of(table: str) -> list:
    """The HOST column of `tunefleet history`'s per-host table."""
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["HOST", "RUNS"]
    return [line.split()[0] for line in lines[1:lines.index("")]]


def test_with_no_history_anywhere_it_names_where_to_look(tmp_path):
    missing = tmp_path / "none" / "history.sqlite"
    done = history(tmp_path, missing)
    assert done.returncode == EXIT_BAD_INPUT and "Traceback" not in done.stderr
    assert "pass --history PATH" in done.stderr and "reports/demo/history.sqlite" in done.stderr


def test_the_bare_command_shows_a_table_of_every_hosts_runs(tmp_path):
    """Runs per host, the first and the last, and the last one's source, worst status and exit code."""
    from verify.history.store import Measurement, RunRecord, open_store

    db = tmp_path / "h.sqlite"
    with open_store(str(db)) as store:
        for i, (host, worst, code) in enumerate([("gpu-01", "PASS", 0), ("gpu-02", "PASS", 0), ("gpu-01", "FAIL", 1)]):
            store.record(RunRecord(host, f"2026-11-2{i}T00:00:00+00:00", "fleet", f"r{i}", worst, code,
                                   [Measurement("bench.h2d.gpu0", worst, 55.0, "GB/s")], {}))
    done = history(tmp_path, tmp_path / "none" / "history.sqlite", "--history", str(db))
    assert done.returncode == 0 and f"reading {db}" in done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows[0] == ["HOST", "RUNS", "FIRST", "RUN", "LAST", "RUN", "SOURCE", "WORST", "EXIT"]
    assert rows[1] == ["gpu-01", "2", "2026-11-20T00:00:00+00:00", "2026-11-22T00:00:00+00:00", "fleet", "FAIL", "1"]
    assert rows[2] == ["gpu-02", "1", "2026-11-21T00:00:00+00:00", "2026-11-21T00:00:00+00:00", "fleet", "PASS", "0"]
    assert "2 host(s), 3 run(s)" in done.stdout and "tunefleet history --host HOST" in done.stdout
    as_json = history(tmp_path, tmp_path / "none" / "history.sqlite", "--history", str(db), "--format", "json")
    import json

    assert [h["runs"] for h in json.loads(as_json.stdout)["hosts"]] == [2, 1]
