"""Planted attacks through what the caller's shell hands a root run (issue 28): the environment
(LD_PRELOAD, LD_LIBRARY_PATH, PYTHONSTARTUP, ANSIBLE_*), PATH, the current directory (an ansible.cfg
naming an inventory plugin), a tool given by explicit path, endless output, and TUNEFLEET_HOME
(templates rendered as root). Each plants the attack as `nobody` and asserts it does not reach root.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.other_user import give, needs_root, shared_dir
from verify import runner
from verify.desired import SpecError, project_root, render_spec
from verify.fleet.run import ansible_env, check_inventory, pinned_runner_env, runner_kwargs
from verify.runner import clean_env, run_command

pytestmark = needs_root
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def hostile_env(tmp_path, monkeypatch) -> Path:
    """The caller's environment as another user would like it: their library preloaded, their
    directory first on PATH and on every search path tools and Python consult."""
    theirs = shared_dir(tmp_path / "home-of-nobody")
    for name, value in (("LD_PRELOAD", f"{theirs}/evil.so"), ("LD_LIBRARY_PATH", str(theirs)),
                        ("PYTHONSTARTUP", f"{theirs}/startup.py"), ("PYTHONPATH", str(theirs)),
                        ("PATH", f"{theirs}:{os.environ['PATH']}"), ("ANSIBLE_INVENTORY_PLUGINS", str(theirs)),
                        ("ANSIBLE_CALLBACK_PLUGINS", str(theirs)), ("TMPDIR", str(theirs)),
                        ("NCCL_NVLS_ENABLE", "0")):
        monkeypatch.setenv(name, value)
    return theirs


def test_a_config_check_tool_sees_none_of_the_callers_loader_or_python_settings(hostile_env):
    out = run_command(["env"], timeout_s=10)
    seen = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert out.ok, out.stderr
    assert not {"LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONSTARTUP", "PYTHONPATH", "TMPDIR",
                "ANSIBLE_INVENTORY_PLUGINS"} & set(seen)
    assert str(hostile_env) not in seen["PATH"] and seen["NCCL_NVLS_ENABLE"] == "0"
    assert str(hostile_env) not in out.stdout


def test_a_command_never_starts_in_another_users_directory(hostile_env):
    out = run_command(["pwd"], timeout_s=10, cwd=str(hostile_env))
    assert out.missing and "owned by uid 65534" in out.stderr and out.stdout == ""
    assert run_command(["pwd"], timeout_s=10).stdout.strip() == "/"  # the default: root's /


def test_a_tool_given_by_explicit_path_must_pass_the_trust_check(hostile_env, tmp_path):
    mark = tmp_path / "pwned"
    for tool in (hostile_env / "ethtool", tmp_path / "nobodys-ethtool"):
        tool.write_text(f"#!/bin/sh\ntouch {mark}\n")
        tool.chmod(0o755)
        give(tool)
        out = run_command([str(tool), "-i", "eth0"], timeout_s=10)
        assert out.missing and "uid 65534" in out.stderr
    assert not mark.exists()


def test_a_tool_that_prints_without_end_is_stopped_at_the_cap(monkeypatch):
    monkeypatch.setattr(runner, "MAX_OUTPUT_BYTES", 1 << 20)
    out = run_command(["yes"], timeout_s=30)
    assert out.overflowed and not out.ok and not out.timed_out
    assert len(out.stdout) <= (1 << 20) + (1 << 16) and "printed more than 1048576 bytes" in out.stderr


def test_every_ansible_command_gets_the_projects_config_and_a_clean_environment(hostile_env):
    env = ansible_env(REPO)
    assert env["ANSIBLE_CONFIG"] == str(REPO / "ansible.cfg") and env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert str(hostile_env) not in " ".join(env.values())
    assert env["PATH"].split(":")[0] == os.path.dirname(os.path.abspath(sys.executable))  # the venv's ansible
    args = argparse.Namespace(inventory="inventory/local", limit=None, quiet=True)
    assert str(hostile_env) not in " ".join(runner_kwargs(args, REPO, REPO / "r" / "x", "/tmp/w", print)
                                            ["envvars"].values())


def test_ansible_runners_own_environment_is_replaced(hostile_env, tmp_path):
    """ansible-runner seeds ansible-playbook's environment from the caller's (a planted `ssh` on PATH ran
    as root) and turns host key checking off unless told: what actually runs gets ansible_env."""
    from ansible_runner.interface import init_runner
    from ansible_runner.utils import get_callback_dir

    args = argparse.Namespace(inventory=str(REPO / "inventory" / "local"), limit=None, quiet=True)
    kwargs = runner_kwargs(args, REPO, tmp_path / "r" / "x", str(tmp_path), print)
    runner = init_runner(**kwargs)
    assert "LD_PRELOAD" in runner.config.env  # what ansible-runner would hand ansible-playbook
    env = pinned_runner_env(runner.config.env, REPO, get_callback_dir())
    assert not {"LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONSTARTUP", "TMPDIR", "ANSIBLE_INVENTORY_PLUGINS"} & set(env)
    assert str(hostile_env) not in " ".join(env.values())
    assert env["ANSIBLE_CALLBACK_PLUGINS"] == get_callback_dir() and env["ANSIBLE_STDOUT_CALLBACK"] == "awx_display"
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True" and env["ANSIBLE_CONFIG"] == str(REPO / "ansible.cfg")


def test_an_ansible_cfg_in_the_callers_directory_runs_no_plugin(hostile_env, tmp_path, monkeypatch):
    """`sudo tunefleet verify -i` started in another user's checkout: their ansible.cfg names their
    inventory plugin directory and enables their plugin, which would run as root on import."""
    mark = tmp_path / "pwned"
    plugins = hostile_env / "inventory_plugins"
    plugins.mkdir()
    (plugins / "evil.py").write_text(f"open({str(mark)!r}, 'w').write('root')\n"
                                     "from ansible.plugins.inventory import BaseInventoryPlugin\n"
                                     "class InventoryModule(BaseInventoryPlugin):\n    NAME = 'evil'\n"
                                     "    def verify_file(self, path):\n        return True\n")
    (hostile_env / "ansible.cfg").write_text("[defaults]\ninventory_plugins = ./inventory_plugins\n"
                                             "[inventory]\nenable_plugins = evil, ini, yaml\n")
    for path in (plugins, plugins / "evil.py", hostile_env / "ansible.cfg"):
        give(path)
    monkeypatch.setenv("ANSIBLE_INVENTORY_ENABLED", "evil,ini")
    monkeypatch.chdir(hostile_env)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\nnode1 ansible_host=192.0.2.1\n")
    # The attack is real: ansible-inventory as it used to be started (caller's cwd and environment).
    tool = Path(sys.executable).parent / "ansible-inventory"
    subprocess.run([str(tool), "-i", str(inventory), "--list"], capture_output=True, timeout=120, check=False)
    assert mark.exists()
    mark.unlink()
    assert check_inventory(str(inventory), home=REPO) == ["node1"]
    assert not mark.exists()


def test_tunefleet_home_in_another_users_tree_is_refused(hostile_env, monkeypatch):
    (hostile_env / "templates").mkdir()
    monkeypatch.setenv("TUNEFLEET_HOME", str(hostile_env))
    with pytest.raises(SpecError, match=r"TUNEFLEET_HOME=.*owned by uid 65534"):
        project_root()


def test_a_template_cannot_reach_python_it_was_not_handed(tmp_path):
    """Even a tree that passes the trust check renders sandboxed: the classic escape from a template
    to os.system is a SecurityError, and nothing runs."""
    mark = tmp_path / "pwned"
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "desired_state.json.j2").write_text(
        "{{ cycler.__init__.__globals__.os.system('touch " + str(mark) + "') }}")
    with pytest.raises(SpecError, match="unsafe|access"):
        render_spec(root=tmp_path)
    assert not mark.exists()


def test_clean_env_keeps_only_the_allow_list(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("IFS", "x")
    monkeypatch.setenv("BASH_ENV", "/home/x/.bashrc")
    env = clean_env({"NCCL_DEBUG": "INFO"})
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["NCCL_DEBUG"] == "INFO"
    assert "IFS" not in env and "BASH_ENV" not in env
