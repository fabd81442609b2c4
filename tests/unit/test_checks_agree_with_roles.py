"""The checks judge what the roles write: render the limits role's own templates (with its own
filters and default values) into a fake tree, and the limits check must pass on it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import jinja2
import pytest
import yaml

from tests.helpers.fake_node import FakeTree
from verify.checks import limits
from verify.desired import render_spec
from verify.result import Status

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "limits"
NR_OPEN = "1048576"


def role_filters():
    spec = importlib.util.spec_from_file_location("limits_filters", REPO / "plugins" / "filter" / "limits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render_role_files(overrides: dict) -> dict:
    """{node path: text} exactly as the limits role's templates would write them."""
    filters = role_filters()
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    defaults.update(overrides)
    private = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    values = {item: filters.limits_pam_value(defaults[f"limits_{item}"], f"limits_{item}", item != "nofile",
                                             NR_OPEN if item == "nofile" else None)
              for item in ("memlock", "nofile", "nproc", "stack")}
    values["systemd_memlock"] = filters.limits_systemd_value(defaults["limits_systemd_memlock"], "x")
    values["systemd_nofile"] = filters.limits_systemd_value(defaults["limits_systemd_nofile"], "x", NR_OPEN)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / "templates")), keep_trailing_newline=True)
    context = {"__limits_values": values, "ansible_managed": "Ansible managed",
               "limits_group": defaults["limits_group"], **private}
    return {private["__limits_pam_file"]: env.get_template("limits.conf.j2").render(context),
            private["__limits_systemd_file"]: env.get_template("system.conf.j2").render(context)}


@pytest.mark.parametrize("overrides", [{}, {"limits_memlock": 67108864, "limits_nofile": 65536,
                                            "limits_systemd_memlock": 68719476736, "limits_systemd_nofile": 65536},
                                        {"limits_group": "*", "limits_nproc": "unlimited"}])
def test_limits_check_passes_on_what_the_limits_role_writes(tmp_path, overrides):
    pytest.importorskip("ansible")
    tree = FakeTree(tmp_path).write("/proc/sys/fs/nr_open", NR_OPEN + "\n")
    for path, text in render_role_files(overrides).items():
        tree.write(path, text)
    spec = render_spec(overrides)
    results = limits.run(spec, tree.node())
    assert len(results) == 6
    assert {r.check_id: r.status for r in results} == {r.check_id: Status.PASS for r in results}, \
        [r.reason for r in results if r.status is not Status.PASS]


def test_irqbalance_check_passes_on_the_network_role_ban_files(tmp_path):
    """The network role's policy script and systemd drop-in (ban mode), as irqbalance would run them."""
    from tests.helpers.fake_node import desired_state
    from verify.checks import irqbalance

    network = REPO / "roles" / "network"
    tasks = yaml.safe_load((network / "tasks" / "irqbalance.yml").read_text())
    block = next(t for t in tasks if "block" in t)["block"]
    script_dest = next(t for t in block if "policy script" in t["name"])["ansible.builtin.template"]["dest"]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(network / "templates")))
    nics = [{"name": "ens1", "pci_address": "0000:17:00.0"}, {"name": "ens2", "pci_address": "0000:18:00.0"}]
    script = env.get_template("tunefleet-irqbalance-policy.j2").render(__network_nics=nics,
                                                                      ansible_managed="Ansible managed")
    dropin = env.get_template("irqbalance-90-tunefleet.conf.j2").render(ansible_managed="Ansible managed")
    exec_start = [line for line in dropin.splitlines() if line.startswith("ExecStart=/")][0]
    argv = [a for a in exec_start.split("=", 1)[1].split() if a != "$IRQBALANCE_ARGS"]
    tree = FakeTree(tmp_path).nic("ens1", pci="0000:17:00.0").nic("ens2", pci="0000:18:00.0")
    tree.write(script_dest, script)
    tree.write("/proc/777/comm", "irqbalance\n").write("/proc/777/cmdline", "\0".join(argv) + "\0")
    spec = desired_state(network={"interfaces": ["ens1", "ens2"], "irqbalance_mode": "ban"})
    result = irqbalance.run(spec, tree.node())[0]
    assert result.status is Status.PASS, result.reason


def test_nccl_conf_check_passes_on_the_gpu_role_template(tmp_path):
    from tests.helpers.fake_node import desired_state
    from verify.checks import nccl_conf

    gpu = REPO / "roles" / "gpu"
    spec_file = importlib.util.spec_from_file_location("gpu_filters", REPO / "plugins" / "filter" / "gpu.py")
    filters = importlib.util.module_from_spec(spec_file)
    spec_file.loader.exec_module(filters)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(gpu / "templates")))
    env.filters["tunefleet.gpu_node.gpu_nccl_conf_lines"] = filters.gpu_nccl_conf_lines
    wanted = {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "=ens1"}
    text = env.get_template("nccl.conf.j2").render(gpu_nccl_conf=wanted, ansible_managed="Ansible managed")
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", "NVRM version: x\n").write("/etc/nccl.conf", text)
    result = nccl_conf.run(desired_state(gpu={"nccl_conf": wanted}), tree.node())[0]
    assert result.status is Status.PASS, result.reason
