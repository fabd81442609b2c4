"""Issue 27: a fact that could not be read never ends `tunefleet verify --local` (every report format is
written, the fact is None with its error kept), and a run over the real 1x H100 capture with a damaged
CPU list, os-release and meminfo says which facts it lost."""
from __future__ import annotations

import json

import pytest

from tests.helpers import drills
from verify.cli import main

FORMATS = ("report.json", "report.md", "report.html", "report.junit.xml", "tunefleet.prom")


@pytest.mark.parametrize("path, content, fact", [
    ("/sys/devices/system/cpu/online", "0-3,banana\n", "cpu"),
    ("/proc/meminfo", "MemTotal: lots kB\n", "memory_kib"),
    ("/proc/driver/nvidia/version", "\x00\xff" * 40, None),
])
def test_an_unreadable_fact_costs_that_fact_only_and_every_report_is_written(tmp_path, path, content, fact):
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    tree.write("/etc/os-release", 'NAME="Ubuntu"\nVERSION_ID=\n\x00 = = =\n')
    tree.write(path, content)
    out = tmp_path / "out"
    code = main(["verify", "--local", "--root", str(tree.root), "--no-bench", "--no-history", "--quiet",
                 "--out", str(out)])
    assert code in (0, 1, 3)
    assert sorted(p.name for p in out.iterdir() if p.name in FORMATS) == sorted(FORMATS)
    report = json.loads((out / "report.json").read_text())
    if fact:
        assert report["facts"][fact] is None and fact in report["facts"]["fact_errors"]
    assert "<html" in (out / "report.html").read_text()
