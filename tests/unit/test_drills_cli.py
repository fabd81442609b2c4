"""Each planted fault (tests/helpers/drills.py: the real H100 capture with one real published faulty output
put in) goes through the whole `tunefleet verify --local --root TREE --inject DIR` to its verdict and
action; the capture as taken (the healthy twin) passes. The drill is said in the report."""
from __future__ import annotations

import json

import pytest

from tests.helpers import drills
from verify.cli import main


def run_drill(tmp_path, drill):
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    if drill.plant_tree:
        drill.plant_tree(tree.root)
    directory = drills.make(drill, tmp_path / "inject")
    out = tmp_path / "out"
    code = main(["verify", "--local", "--root", str(tree.root), "--inject", str(directory), "--no-bench",
                 "--no-history", "--format", "json", "--quiet", "--out", str(out)])
    return code, json.loads((out / "report.json").read_text())


@pytest.mark.parametrize("drill", drills.DRILLS, ids=[d.name for d in drills.DRILLS])
def test_each_planted_fault_reaches_its_verdict_through_the_cli(tmp_path, drill):
    code, report = run_drill(tmp_path, drill)
    problems = [drills.judge(report, expect) for expect in drill.expect]
    assert [p for p in problems if p] == []
    assert "dmesg-kernel" in report["run"]["injected"]["answered"]
    health = [r for r in report["results"] if r["check_id"].startswith("health.")]
    if any(e.status == "FAIL" for e in drill.expect):
        assert code == 1
    else:  # nothing of the GPU's health may FAIL in a drill that expects none (the tree's config rows may)
        assert [r["check_id"] for r in health if r["status"] == "FAIL"] == []


def test_a_drill_directory_others_can_write_is_refused_before_anything_runs(tmp_path, capsys):
    directory = drills.make(drills.DRILLS[1], tmp_path / "inject")
    directory.chmod(0o777)
    code = main(["verify", "--local", "--inject", str(directory), "--no-bench", "--no-history",
                 "--out", str(tmp_path / "out")])
    assert code == 2 and "--inject" in capsys.readouterr().err
    assert not (tmp_path / "out" / "report.json").exists()
