"""Never de-tune (issue 26 item 7): the sysctl role's one kernel_values call on a real captured tree.

The tree is the 2x H200 node's /proc/sys (tests/fixtures/node/snapshots/gpu_h200), whose image
ships vm.max_map_count 8250343 and tcp_rmem `4096 131072 33554432`, both partly above the role's
defaults (262144, `4096 87380 268435456`): the same shape the 1x H100 was de-tuned on. The module
runs through main() with the arguments the role's filters build, on a copy of that tree.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from tests.helpers.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tests/fixtures/node/snapshots/gpu_h200/tree"
DEFAULTS = yaml.safe_load((ROOT / "roles/sysctl/defaults/main.yml").read_text())

kv = load_plugin("modules", "kernel_values")
filters = load_plugin("filter", "sysctl_tuning")

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="owned files are root:root; the plan compares the owner")


@pytest.fixture
def node(tmp_path, monkeypatch):
    """The snapshot's /proc copied under tmp_path. The ledger takes only real /proc and /sys paths, so
    its record() is replaced by one that keeps what the module asked it to record (ledger.json)."""
    shutil.copytree(SNAPSHOT / "proc", tmp_path / "proc")

    def record(root, ledger_path, paths, files, services, run, recorded_by, check_mode, kernel_modules):
        if not check_mode:
            before = {path: " ".join(Path(path).read_text().split()) for path in paths}
            Path(ledger_path).write_text(json.dumps({"paths": {p: {"value": v} for p, v in before.items()}}))
        return {"paths": list(paths), "files": list(files)}

    monkeypatch.setattr(kv, "record", record)
    return tmp_path


def role_args(root: Path, exact_keys: tuple = (), **extra) -> dict:
    """What roles/sysctl/tasks/main.yml hands the module, with every path moved under `root`.
    Only the default keys this snapshot has (it holds the keys the role sets on that node)."""
    settings = {key: value for key, value in DEFAULTS["sysctl_settings"].items()
                if (root / filters.sysctl_proc_path(key).lstrip("/")).exists()}
    assert {"vm.max_map_count", "net.ipv4.tcp_rmem", "net.core.rmem_max"} <= set(settings)
    under = {key: str(root) + filters.sysctl_proc_path(key) for key in settings}
    directions = {str(root) + path: d for path, d in filters.sysctl_directions(settings, list(exact_keys)).items()}
    return dict({
        "values": {under[key]: value for key, value in settings.items()},
        "directions": directions,
        "recorded_by": "sysctl",
        "ledger_path": str(root / "ledger.json"),
        "files": [{"path": str(root / "etc/sysctl.d/90-tunefleet.conf"), "content": "# header\n", "mode": "0644",
                   "persist_values": {key: under[key] for key in settings}}],
    }, **extra)


def run_module(args: dict, capsys) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        kv.main()
    return json.loads(capsys.readouterr().out)


def read(root: Path, key: str) -> str:
    return " ".join((root / filters.sysctl_proc_path(key).lstrip("/")).read_text().split())


def drop_in(root: Path) -> dict:
    lines = (root / "etc/sysctl.d/90-tunefleet.conf").read_text().splitlines()
    return dict(line.split(" = ", 1) for line in lines if " = " in line)


@root_only
def test_check_mode_and_diff_show_no_lowering(node, capsys):
    result = run_module(dict(role_args(node), _ansible_check_mode=True, _ansible_diff=True), capsys)
    changed = {c["path"].removeprefix(str(node)): (c["before"], c["after"]) for c in result["changes"]}
    # max_map_count is above 262144: no change, not in the live diff
    assert "/proc/sys/vm/max_map_count" not in changed
    live = next(d for d in result["diff"] if d["before_header"] == "live kernel values")
    assert "max_map_count" not in live["before"] + live["after"]
    # tcp_rmem field by field: the node's higher default (131072) stays, the max is raised
    assert changed["/proc/sys/net/ipv4/tcp_rmem"] == ("4096 131072 33554432", "4096 131072 268435456")
    kept = {k["path"].removeprefix(str(node)): k["in_force"] for k in result["kept"]}
    assert kept["/proc/sys/vm/max_map_count"] == "8250343"
    # the drop-in the diff shows persists the values in force, not the lower recommendation
    dropin = next(d for d in result["diff"] if d["after_header"].startswith(str(node / "etc")))
    assert "vm.max_map_count = 8250343\n" in dropin["after"]
    assert "net.ipv4.tcp_rmem = 4096 131072 268435456\n" in dropin["after"]
    assert read(node, "vm.max_map_count") == "8250343" and not (node / "ledger.json").exists()


@root_only
def test_apply_keeps_the_higher_values_records_only_changes_and_is_idempotent(node, capsys):
    result = run_module(role_args(node), capsys)
    assert result["changed"] is True
    assert read(node, "vm.max_map_count") == "8250343"
    assert read(node, "net.ipv4.tcp_rmem") == "4096 131072 268435456"
    assert read(node, "net.core.rmem_max") == "536870912"  # below the recommendation: raised
    persisted = drop_in(node)
    assert persisted["vm.max_map_count"] == "8250343"  # a reboot does not lower it either
    assert persisted["net.ipv4.tcp_rmem"] == "4096 131072 268435456"
    assert persisted["net.core.rmem_max"] == "536870912"
    ledger = json.loads((node / "ledger.json").read_text())
    recorded = {path.removeprefix(str(node)) for path in ledger["paths"]}
    assert "/proc/sys/vm/max_map_count" not in recorded  # kept: nothing for restore to put back
    assert {"/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/core/rmem_max"} <= recorded
    assert ledger["paths"][str(node) + "/proc/sys/net/ipv4/tcp_rmem"]["value"].split() == ["4096", "131072", "33554432"]
    (node / "ledger.json").unlink()
    again = run_module(role_args(node), capsys)
    assert again["changes"] == [] and again["files_changed"] == []  # the second run changes nothing


@root_only
def test_an_exact_key_from_the_inventory_is_set_as_written(node, capsys):
    result = run_module(role_args(node, exact_keys=("vm.max_map_count",)), capsys)
    assert read(node, "vm.max_map_count") == "262144"
    assert drop_in(node)["vm.max_map_count"] == "262144"
    assert not any(k["path"].endswith("max_map_count") for k in result["kept"])


def test_an_exact_key_keeps_the_recommendation_field_by_field_too(tmp_path):
    rmem = tmp_path / "proc/sys/net/ipv4/tcp_rmem"
    rmem.parent.mkdir(parents=True)
    rmem.write_text("4096\t131072\t6291456\n")  # the 1x H100's image
    assert kv.plan({str(rmem): "4096 87380 268435456"}) == (
        [{"path": str(rmem), "before": "4096 131072 6291456", "after": "4096 87380 268435456"}], [])
    changes, errors = kv.plan({str(rmem): "4096 87380 268435456"}, {str(rmem): "at_least"})
    assert errors == [] and changes[0]["after"] == "4096 131072 268435456"


def test_a_bad_direction_or_persist_entry_is_refused_before_anything(tmp_path):
    value = tmp_path / "proc/sys/vm/max_map_count"
    value.parent.mkdir(parents=True)
    value.write_text("65530\n")
    _, _, _, errors = kv.plan_values({str(value): 262144}, {str(value): "upwards", "/proc/sys/x": "at_least"})
    assert errors == ["/proc/sys/x: has a direction but no value",
                      f"{value}: direction 'upwards' is not one of at_least, at_most, exact"]
    _, errors = kv.with_persisted_values([{"path": "/etc/x.conf", "content": "", "persist_values": {"a": "/nope"}}],
                                         {}, {str(value): 1})
    assert errors == ["/etc/x.conf: persist_values names /nope, not in values"]
    assert value.read_text() == "65530\n"


def test_the_role_passes_directions_and_persist_values():
    """The role's task hands the module the rules' directions and writes the drop-in from the values in force."""
    task = yaml.safe_load((ROOT / "roles/sysctl/tasks/main.yml").read_text())[1]["tunefleet.gpu_node.kernel_values"]
    assert "sysctl_directions(sysctl_exact_keys)" in task["directions"]
    assert "sysctl_persisted" in task["files"][0]["persist_values"]
    template = (ROOT / "roles/sysctl/templates/90-tunefleet.conf.j2").read_text()
    assert "{% for" not in template  # no second copy of the values: the module writes the lines
    assert DEFAULTS["sysctl_exact_keys"] == []
    specs = yaml.safe_load((ROOT / "roles/sysctl/meta/argument_specs.yml").read_text())
    assert specs["argument_specs"]["main"]["options"]["sysctl_exact_keys"]["elements"] == "str"


def test_directions_follow_the_rules_and_the_inventory():
    settings = DEFAULTS["sysctl_settings"]
    directions = filters.sysctl_directions(settings, [])
    assert directions["/proc/sys/vm/max_map_count"] == "at_least"
    assert directions["/proc/sys/net/ipv4/tcp_rmem"] == "at_least"
    assert "/proc/sys/vm/swappiness" not in directions  # exact: a mode, not a ceiling
    assert "/proc/sys/net/ipv4/tcp_mtu_probing" not in directions
    assert "/proc/sys/vm/max_map_count" not in filters.sysctl_directions(settings, ["vm.max_map_count"])
