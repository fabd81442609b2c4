"""Planted attacks on what tunefleet runs as root: engines (python -m verify.bench.*) and tools.

Another user plants a module named like ours in the directory root is started from, on
PYTHONPATH, or a tool named like ethtool on PATH; none of it may run.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.other_user import give, needs_root, shared_dir
from verify.engine import ENGINE_CWD, engine_argv, engine_env, engine_sys_path
from verify.runner import run_command, which

pytestmark = needs_root
ENGINE = "verify.bench.odirect_read"  # any engine: --help runs its real argparse and exits 0


@pytest.fixture
def planted(tmp_path) -> Path:
    """A directory of another user's holding a `verify` package and an `argparse` that leave the
    mark tmp_path/pwned when imported."""
    home = shared_dir(tmp_path / "home-of-nobody")
    mark = tmp_path / "pwned"
    code = f"open({str(mark)!r}, 'w').write(__name__)\n"
    for name in ("verify/__init__.py", "verify/bench/__init__.py", "verify/bench/odirect_read.py", "argparse.py"):
        path = home / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(code)
        give(path)
        give(path.parent)
    return home


def pwned(planted: Path) -> bool:
    return (planted.parent / "pwned").exists()


def test_the_planted_module_would_run_the_old_way(planted):
    """The attack is real: plain `python -m` from that directory runs the other user's code as root."""
    subprocess.run([sys.executable, "-m", ENGINE, "--help"], timeout=30, cwd=str(planted), capture_output=True,
                   check=False)
    assert pwned(planted)


def test_no_command_starts_in_another_users_directory(planted):
    out = run_command(engine_argv(ENGINE, ["--help"]), timeout_s=30, env=engine_env(), cwd=str(planted))
    assert out.missing and "owned by uid 65534" in out.stderr
    assert not pwned(planted)


def test_an_engine_runs_only_our_code_whatever_the_caller_exported(planted, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(planted))
    monkeypatch.setenv("LD_PRELOAD", str(planted / "evil.so"))
    monkeypatch.chdir(planted)
    out = run_command(engine_argv(ENGINE, ["--help"]), timeout_s=30, env=engine_env())
    assert out.returncode == 0 and "usage: " in out.stdout, out.stderr
    assert not pwned(planted)
    assert "evil.so" not in out.stderr  # the loader never saw LD_PRELOAD


def test_a_directory_others_can_write_is_never_put_on_an_engines_path(planted, monkeypatch):
    monkeypatch.syspath_prepend(str(planted))
    assert str(planted) not in engine_sys_path()
    out = run_command(engine_argv(ENGINE, ["--help"]), timeout_s=30, env=engine_env(), cwd=ENGINE_CWD)
    assert out.returncode == 0 and not pwned(planted)


def test_the_engine_environment_is_explicit(monkeypatch):
    for name, value in (("PYTHONPATH", "/home/x"), ("LD_PRELOAD", "/home/x/a.so"), ("LD_LIBRARY_PATH", "/home/x"),
                        ("TMPDIR", "/home/x/tmp"), ("PATH", "/home/x/bin:/usr/bin"), ("NCCL_NVLS_ENABLE", "0")):
        monkeypatch.setenv(name, value)
    env = engine_env({"NCCL_DEBUG": "INFO"})
    assert not {"PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "TMPDIR"} & set(env)
    assert "/home/x" not in env["PATH"] and "/usr/bin" in env["PATH"].split(":")
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_DEBUG"] == "INFO"  # the operator's GPU settings stay


def test_tools_are_found_only_on_the_fixed_root_owned_path(tmp_path, monkeypatch):
    bin_dir = shared_dir(tmp_path / "bin-of-nobody")
    tool = bin_dir / "tunefleet-planted-tool"
    tool.write_text(f"#!/bin/sh\ntouch {tmp_path}/pwned\n")
    tool.chmod(0o755)
    give(tool)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert which("tunefleet-planted-tool") is None
    assert run_command(["tunefleet-planted-tool"], timeout_s=10).missing
    assert not (tmp_path / "pwned").exists()
    found = which("sh")
    assert found and stat.S_IMODE(os.stat(os.path.dirname(found)).st_mode) & 0o022 == 0
