"""Planted attacks on what root imports and where it writes on the controller (issue 37 items 1 and 3): a
`sitecustomize.py` and a `torch/distributed/run.py` of `nobody`'s in verify_node_pythonpath, and an inventory
host named `../../escape10`. Every Python the playbooks start runs -I through verify.isolated, which refuses
a directory others can change naming its owner before anything is imported; the run directory step refuses
a host name that is not one path component before anything is made."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.other_user import give, needs_root, shared_dir
from verify.isolated import BOOTSTRAP
from verify.safe_io import check_not_option, check_plain_component, is_plain_component

REPO = Path(__file__).resolve().parents[2]
pytestmark = needs_root
TASK_FILES = [REPO / "playbooks" / "verify.yml", *sorted((REPO / "roles" / "verify_node" / "tasks").glob("*.yml"))]


@pytest.fixture
def planted(reachable) -> Path:
    """verify_node_pythonpath pointing at nobody's directory: a sitecustomize.py and a torch whose
    torch.distributed.run leave the mark `pwned` when imported."""
    home = shared_dir(reachable / "torch-of-nobody")
    code = f"open({str(reachable / 'pwned')!r}, 'w').write(__name__)\n"
    for name in ("sitecustomize.py", "torch/__init__.py", "torch/distributed/__init__.py", "torch/distributed/run.py"):
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    for path in [home, *home.rglob("*")]:
        give(path)
    return home


def isolated(extra: str, module: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-B", "-c", BOOTSTRAP, str(REPO), extra, module, *args],
                          capture_output=True, text=True, timeout=120, cwd="/", check=False, **kwargs)


def test_the_planted_sitecustomize_ran_as_root_the_old_way(planted):
    """The attack is real: PYTHONPATH=verify_node_pythonpath, as the tasks set it, ran nobody's code."""
    subprocess.run([sys.executable, "-c", "pass"], env={"PYTHONPATH": str(planted)}, timeout=60, check=False)
    assert (planted.parent / "pwned").exists()


def test_a_directory_of_another_users_is_refused_naming_its_owner_before_anything_runs(planted):
    done = isolated(str(planted), "torch.distributed.run", "--help")
    assert done.returncode == 2
    assert f"import directory {planted}" in done.stderr and "owned by uid 65534" in done.stderr
    assert not (planted.parent / "pwned").exists()


def test_the_environment_never_reaches_an_isolated_python(planted):
    done = isolated("", "verify.fleet.rundir", "--help", env={"PYTHONPATH": str(planted), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and "usage:" in done.stdout
    assert not (planted.parent / "pwned").exists()


def test_a_trusted_extra_directory_is_imported_from(tmp_path):
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "tunefleet_probe_mod.py").write_text("print('imported from the extra directory')\n")
    done = isolated(str(tmp_path / "extra"), "tunefleet_probe_mod")
    assert done.returncode == 0 and "imported from the extra directory" in done.stdout, done.stderr


def _commands(node, found: list) -> list:
    if isinstance(node, dict):
        command = node.get("ansible.builtin.command")
        if isinstance(command, dict):
            found.append((node.get("name"), command.get("argv"), node.get("environment") or {}))
        for value in node.values():
            _commands(value, found)
    elif isinstance(node, list):
        for value in node:
            _commands(value, found)
    return found


def test_every_python_the_playbooks_start_runs_isolated_through_the_one_bootstrap():
    roles_vars = yaml.safe_load((REPO / "roles" / "verify_node" / "vars" / "main.yml").read_text())
    assert roles_vars["__verify_node_isolated"] == BOOTSTRAP
    hooks_vars = yaml.safe_load((REPO / "roles" / "scheduler_hooks" / "vars" / "main.yml").read_text())
    assert hooks_vars["__scheduler_hooks_bootstrap"] == BOOTSTRAP  # the hooks' launcher, started once at install
    pythons = 0
    for path in TASK_FILES:
        for name, argv, environment in _commands(yaml.safe_load(path.read_text()), []):
            text = argv if isinstance(argv, str) else " ".join(map(str, argv or []))
            assert "PYTHONPATH" not in environment and "PYTHONPATH" not in text, (path.name, name)
            if "python" in text.split("-I")[0] or " -m " in f" {text} ":
                pythons += 1
                assert "-I" in text and "__verify_node_isolated" in text, (path.name, name)
                assert " -m " not in f" {text} ", (path.name, name)
    assert pythons >= 12  # rundir, bundle (twice), finder, noderun, multinode, rails, pairs, collect, blame, ...


def test_a_host_name_that_is_not_one_component_is_refused_before_the_run_directory_is_made(tmp_path):
    parent = tmp_path / "reports"
    parent.mkdir(mode=0o700)
    done = isolated("", "verify.fleet.rundir", str(parent), "--host=good-node", "--host=../../escape10")
    assert done.returncode == 2 and "inventory host name '../../escape10'" in done.stderr
    assert list(parent.iterdir()) == []
    assert isolated("", "verify.fleet.rundir", str(parent), "--host=gpu-node-01").returncode == 0


@pytest.mark.parametrize("name", ["../../escape10", "..", ".", "", "a/b", "x\0y"])
def test_the_one_rule_for_names_that_become_paths(name):
    assert not is_plain_component(name)
    with pytest.raises(ValueError, match="cannot name a directory"):
        check_plain_component(name, "inventory host name")


def test_the_role_writes_host_reports_only_under_the_checked_host_directory():
    for path in TASK_FILES:
        text = path.read_text()
        assert "{{ inventory_hostname }}/" not in text and "/{{ inventory_hostname }}\"" not in text, path.name
    main = yaml.safe_load((REPO / "roles" / "verify_node" / "tasks" / "main.yml").read_text())
    checks = main[0]["ansible.builtin.assert"]["that"]
    assert "inventory_hostname in (__verify_node_checked_hosts | default([]))" in checks


def test_an_inventory_of_another_users_is_refused_before_ansible_runs_it(reachable):
    """A dynamic inventory script of nobody's ran as root under `sudo tunefleet verify -i`: refused by name."""
    from verify.fleet.run import InventoryError, check_inventory

    script = reachable / "inventory.py"
    mark = reachable / "pwned"
    script.write_text(f"#!/bin/sh\ntouch {mark}\necho '{{}}'\n")
    script.chmod(0o755)
    give(script)
    with pytest.raises(InventoryError, match="owned by uid 65534"):
        check_inventory(str(script))
    assert not mark.exists()
    directory = reachable / "inventory-dir"
    (directory / "group_vars").mkdir(parents=True)
    (directory / "hosts.ini").write_text("node1\n")
    planted = directory / "group_vars" / "all.yml"
    planted.write_text("verify_node_python: /home/nobody/python3\n")
    give(planted)
    with pytest.raises(InventoryError, match=f"{planted}.*owned by uid 65534"):
        check_inventory(str(directory))
    beside = reachable / "inventory-file"
    beside.mkdir()
    (beside / "hosts.ini").write_text("node1\n")
    shared_dir(beside / "host_vars")
    with pytest.raises(InventoryError, match="host_vars.*owned by uid 65534"):
        check_inventory(str(beside / "hosts.ini"))


@pytest.mark.parametrize("value", ["-oProxyCommand=touch /tmp/x", "--help", "", "a b"])
def test_a_value_that_a_tool_could_read_as_an_option_is_refused(value, tmp_path):
    for refused in (value, value + "\0"):
        with pytest.raises(ValueError, match="could be read as an option"):
            check_not_option(refused, "--server-addr")
    out = tmp_path / "pair.json"
    done = isolated("", "verify.fleet.rdma_pair", f"--server-addr={value}", "--server-host=n2", "--client-host=n1",
                    f"--out={out}")
    assert done.returncode == 2 and "could be read as an option" in done.stderr and not out.exists()


def test_an_inventory_name_that_reads_as_an_option_is_refused_before_the_run_directory(tmp_path):
    parent = tmp_path / "reports"
    parent.mkdir(mode=0o700)
    done = isolated("", "verify.fleet.rundir", str(parent), "--host=-oProxyCommand=x")
    assert done.returncode == 2 and "could be read as an option" in done.stderr and list(parent.iterdir()) == []


def test_a_spec_or_vars_file_of_another_users_is_refused_by_name(reachable):
    """What root checks, measures and passes to tools comes from the desired state: like --inject, a file
    another user can change is refused naming the owner before it is parsed."""
    from verify.desired import SpecError, load_spec_file, load_vars_file

    spec = reachable / "desired_state.json"
    spec.write_text('{"verify": {"benchmarks": []}}')
    give(spec)
    with pytest.raises(SpecError, match=f"desired state {spec}.*owned by uid 65534"):
        load_spec_file(str(spec))
    planted = reachable / "vars.yml"
    planted.write_text("verify_thresholds: {nccl_allreduce_busbw_gbps: 0.001}\n")
    planted.chmod(0o666)
    with pytest.raises(SpecError, match="vars file .*writable by everyone"):
        load_vars_file(str(planted))
    planted.chmod(0o644)
    assert load_vars_file(str(planted)) == {"verify_thresholds": {"nccl_allreduce_busbw_gbps": 0.001}}


def test_a_rail_name_that_would_leave_the_work_directory_is_refused_before_anything_starts(tmp_path):
    """A rail names this host's result file (<result-file>.<rail>): `../../etc/x` would have put root's write
    outside the node's work directory."""
    from verify.fleet.nccl_pair import build_parser, launch

    args = build_parser().parse_args(["launch", "--a", "h0", "--b", "h1", "--side", "0", "--rail=../../../etc/x",
                                      "--master-addr", "10.0.0.1", "--result-file", str(tmp_path / "m"),
                                      "--out", str(tmp_path / "o.json")])
    [record] = launch(args, root=str(tmp_path))
    assert record["status"] == "ERROR" and "cannot name a file" in record["reason"]
