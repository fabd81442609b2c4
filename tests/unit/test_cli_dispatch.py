"""`tunefleet VERB` builds only VERB's parser, and the prolog imports only what it runs; `tunefleet --help`
still lists every verb (verify/cli.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import desired_state
from verify.checks import REGISTRY
from verify.cli import VERBS, main, verb_of
from verify.scheduler.modes import PROLOG_CHECKS

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_every_verb(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    listed = capsys.readouterr().out
    assert all(f"\n    {verb} " in listed for verb in VERBS)


@pytest.mark.parametrize("verb", VERBS)
def test_each_verb_parses_its_own_help(verb, capsys):
    with pytest.raises(SystemExit) as stop:
        main([verb, "--help"])
    assert stop.value.code == 0 and f"usage: tunefleet {verb}" in capsys.readouterr().out


def test_the_verb_is_the_first_word_and_an_unknown_one_gets_the_full_list(capsys):
    assert verb_of(["check", "--mode", "prolog"]) == "check" and verb_of(["--version"]) is None
    assert verb_of(["bogus", "check"]) is None
    with pytest.raises(SystemExit) as stop:
        main(["bogus"])
    said = capsys.readouterr().err
    assert stop.value.code == 2 and "invalid choice: 'bogus'" in said and all(verb in said for verb in VERBS)


def test_the_prolog_imports_only_its_own_checks_and_no_other_verb(tmp_path):
    """A new process per job start: what it imports is what it pays, on every job."""
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    inject_dir = drills.make(drills.DRILLS[0], tmp_path / "inject")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(desired_state(gpu={"nvidia_peermem": False})))  # the capture uses DMA-BUF
    argv = ["check", "--mode", "prolog", "--root", str(tree.root), "--inject", str(inject_dir), "--spec",
            str(spec_file), "--state-dir", str(tmp_path / "state"), "--textfile-dir", str(tmp_path / "textfile"),
            "--no-drain"]
    code = ("import json, sys; from verify.cli import main; code = main(sys.argv[1:]); "
            "print(json.dumps([code, sorted(sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    code, modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert code == 0, out.stderr[-2000:]
    for absent in ("jinja2", "yaml", "verify.local_run", "verify.fleet", "verify.history.cli", "verify.history.ack",
                   "verify.bench", "verify.report.html"):
        assert absent not in modules, absent
    prolog_modules = {REGISTRY[name][1].split(":")[0] for name in PROLOG_CHECKS}
    other_checks = {target.split(":")[0] for _, target in REGISTRY.values()} - prolog_modules
    assert prolog_modules <= set(modules)
    # the prolog loads its checks' modules, not the registry's others (health_fabric judges NVML's fabric
    # state, read by the prolog's code)
    assert sorted(other_checks & set(modules)) == ["verify.checks.health_fabric"]
