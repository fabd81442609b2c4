"""One list of benchmark names (verify.bench.names_text) in `--help`, the README and the errors; an unknown
`--bench` name is bad input: exit 2 before anything runs, no report written, no history recorded."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from verify.bench import ALIASES, FAMILIES, SETS, names_text
from verify.result import EXIT_BAD_INPUT

REPO = Path(__file__).resolve().parents[2]


def tunefleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verify", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_one_list_names_every_set_and_benchmark():
    assert all(name in names_text() for name in (*SETS, *FAMILIES))


def test_an_unknown_bench_name_is_bad_input_and_nothing_runs_or_is_recorded(tmp_path):
    out, history = tmp_path / "reports", tmp_path / "history.sqlite"
    done = tunefleet("verify", "--local", "--bench", "nccl,nope", "--out", str(out), "--history", str(history),
                     cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT and "Traceback" not in done.stderr
    assert f"unknown benchmark 'nope'; known: {names_text()}" in flat(done.stderr)
    assert not out.exists() and not history.exists()  # refused before the run: no report, no history row


def test_an_empty_bench_list_is_bad_input(tmp_path):
    done = tunefleet("verify", "--local", "--bench", ",", "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT and "unknown benchmark no name" in done.stderr


def test_help_and_readme_give_the_same_list(tmp_path):
    shown = tunefleet("verify", "--help", cwd=tmp_path)
    assert shown.returncode == 0 and names_text() in flat(shown.stdout)
    assert names_text() in flat((REPO / "README.md").read_text())


def test_aliases_and_any_case_are_accepted_by_the_parser():
    from verify.cli import bench_names

    assert bench_names("Quick,allreduce,ODIRECT,h2d") == "Quick,allreduce,ODIRECT,h2d"
    assert all(bench_names(alias) for alias in ALIASES)


def test_profiles_are_listed_in_aligned_columns(tmp_path):
    done = tunefleet("profiles", cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0].split()[:2] == ["PROFILE", "GPUS"] and len(lines) >= 3
    for column in ("GPUS", "NVLS", "ALL-REDUCE", "DESCRIPTION"):
        start = lines[0].index(column)
        # Every row has a cell starting at the header's column, after a gap of two spaces.
        assert all(line[start - 2:start] == "  " and line[start] != " " for line in lines[1:]), column
