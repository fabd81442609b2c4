"""A hook given no --spec renders the desired state once and reads it back from the state directory
(verify/scheduler/spec_cache.py): the real CLI over the H100 capture's tree, the real rendering from the
role defaults, only the cache file tampered with."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import drills
from verify.cli import main
from verify.scheduler import spec_cache

REPO = Path(__file__).resolve().parents[2]
HEALTHY = next(d for d in drills.DRILLS if d.name == "healthy")


@pytest.fixture()
def hook(tmp_path):
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    inject_dir = drills.make(HEALTHY, tmp_path / "inject")
    state = tmp_path / "state"
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text("gpu_nvidia_peermem: false\n")  # the capture's stack uses DMA-BUF

    def run(*extra: str) -> dict:
        report = tmp_path / "report.json"
        argv = ["check", "--mode", "prolog", "--root", str(tree.root), "--inject", str(inject_dir), "--state-dir",
                str(state), "--textfile-dir", "", "--no-drain", "--vars", str(vars_file), "--report", str(report),
                *extra]
        assert main(argv) == 0
        return json.loads(report.read_text())

    run.state, run.vars_file = state, vars_file
    return run


def test_only_the_first_run_renders_and_the_cache_is_root_only(hook):
    first = hook()
    assert first["run"]["spec_source"] == "rendered"
    cache = hook.state / spec_cache.FILE_NAME
    assert cache.stat().st_mode & 0o777 == 0o600 and hook.state.stat().st_mode & 0o777 == 0o700
    second = hook()
    assert second["run"]["spec_source"] == "cache"
    assert second["desired_state"] == first["desired_state"]
    assert second["desired_state"]["gpu"]["nvidia_peermem"] is False  # the --vars file, read at the first run


def test_a_changed_input_renders_again(hook):
    hook()
    hook.vars_file.write_text("gpu_nvidia_peermem: false\ngpu_rdma_expected: true\n")
    again = hook()
    assert again["run"]["spec_source"] == "rendered" and again["desired_state"]["gpu"]["rdma_expected"] is True
    assert hook()["run"]["spec_source"] == "cache"


@pytest.mark.parametrize("damage", ["garbage", "other key", "invalid spec", "symlink"])
def test_a_damaged_or_planted_cache_is_ignored_and_rewritten(hook, tmp_path, damage):
    first = hook()
    cache = hook.state / spec_cache.FILE_NAME
    saved = json.loads(cache.read_text())
    planted = json.loads(json.dumps(saved))
    planted["spec"]["sysctl"]["settings"] = {"kernel.planted": "1"}
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(dict(planted, key=saved["key"])))
    if damage == "garbage":
        cache.write_bytes(b"\x00{not json")
    elif damage == "other key":
        cache.write_text(json.dumps(dict(planted, key="0" * 64)))
    elif damage == "invalid spec":
        cache.write_text(json.dumps(dict(saved, spec={"schema": "something else"})))
    else:
        cache.unlink()
        cache.symlink_to(target)  # a matching key behind a link: never followed
    again = hook()
    assert again["run"]["spec_source"] == "rendered" and again["desired_state"] == first["desired_state"]
    assert not cache.is_symlink() and json.loads(cache.read_text()) == saved
    assert json.loads(target.read_text())["spec"]["sysctl"]["settings"] == {"kernel.planted": "1"}
    assert not [r for r in again["results"] if r["status"] == "ERROR" and r["check_id"].startswith("scheduler")]


def test_no_state_directory_keeps_no_cache(hook, tmp_path):
    assert hook("--state-dir", "")["run"]["spec_source"] == "rendered"
    assert not hook.state.exists()


def test_a_cached_run_imports_neither_jinja2_nor_yaml(hook, tmp_path):
    """The point of the cache: a prolog after the first imports no renderer (0.4 s on the GPU machine)."""
    hook()
    argv = ["check", "--mode", "prolog", "--root", str(tmp_path / "tree"), "--inject", str(tmp_path / "inject"),
            "--state-dir", str(hook.state), "--textfile-dir", "", "--no-drain", "--vars", str(hook.vars_file)]
    code = ("import sys; from verify.cli import main; main(sys.argv[1:]); "
            "print(sorted(m for m in ('jinja2', 'yaml', 'verify.local_run') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_a_bad_profile_is_not_cached_and_stays_a_clear_message(tmp_path, capsys):
    state = tmp_path / "state"
    assert main(["check", "--mode", "health", "--profile", "no-such-profile", "--state-dir", str(state),
                 "--textfile-dir", ""]) == 2
    said = capsys.readouterr()
    assert "no-such-profile" in said.out + said.err and "Traceback" not in said.err
    assert not (state / spec_cache.FILE_NAME).exists()
