"""storage role: find_devices (preflight reads the devices with it) against a fake /sys/block built
from this CI VM's real one, the filters that plan the writes, the udev rule, and (root) a real loop device."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jinja2
import pytest
import yaml

from tests.helpers.loop_device import attached_loop
from tests.helpers.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "storage"
FIXTURES = ROOT / "tests" / "fixtures" / "sysfs_block"


info = load_plugin("module_utils", "block_devices")
kv = load_plugin("modules", "kernel_values")
filters = load_plugin("filter", "storage_tuning")


def build_block_tree(root: Path, devices: dict) -> Path:
    for name, attributes in devices.items():
        base = root / "block" / name
        for rel, value in attributes.items():
            if rel == "partitions":
                for partition in value:
                    (base / partition).mkdir(parents=True)
                    (base / partition / "partition").write_text("1\n")
                continue
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_text(value + "\n")
    return root


@pytest.fixture
def ci_vm_sys(tmp_path):
    return build_block_tree(tmp_path, json.loads((FIXTURES / "ci_vm_sys_block.json").read_text()))


def test_unattached_loop_devices_are_left_out(ci_vm_sys):
    devices, skipped = info.find_devices(str(ci_vm_sys), ["loop*"])
    assert [device["name"] for device in devices] == ["loop0", "loop1"]
    assert {entry["name"] for entry in skipped} == {f"loop{n}" for n in range(2, 8)}
    assert all(entry["reason"] == "no medium (size 0)" for entry in skipped)


def test_device_facts_carry_the_selected_and_offered_schedulers(ci_vm_sys):
    devices, _ = info.find_devices(str(ci_vm_sys), ["vda"])
    assert devices == [
        {
            "name": "vda",
            "scheduler": "mq-deadline",
            "schedulers": ["none", "mq-deadline", "kyber", "bfq"],
            "read_ahead_kb": 8192,
        }
    ]


def test_default_pattern_matches_no_device_on_a_vm_without_nvme(ci_vm_sys):
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert info.find_devices(str(ci_vm_sys), defaults["storage_device_patterns"]) == ([], [])


def test_nvme_multipath_path_nodes_are_left_out(tmp_path):
    # nvme0c0n1 is the hidden per-controller path of nvme0n1 under native NVMe multipath
    tree = build_block_tree(
        tmp_path,
        {
            "nvme0n1": {
                "size": "7501476528",
                "queue/scheduler": "[none] mq-deadline",
                "queue/read_ahead_kb": "128",
                "partitions": ["nvme0n1p1"],
            },
            "nvme0c0n1": {
                "size": "7501476528",
                "hidden": "1",
                "queue/scheduler": "[none] mq-deadline",
                "queue/read_ahead_kb": "128",
            },
        },
    )
    devices, skipped = info.find_devices(str(tree), ["nvme*n*"])
    assert [device["name"] for device in devices] == ["nvme0n1"]
    assert skipped == [
        {"name": "nvme0c0n1", "reason": "hidden (an NVMe multipath path node; its namespace device is tuned instead)"}
    ]


def test_a_partition_directory_is_never_a_device(tmp_path):
    tree = build_block_tree(tmp_path, {"sda1": {"size": "10", "partition": "1", "queue/scheduler": "[none]"}})
    assert info.find_devices(str(tree), ["sd*"])[1][0]["reason"].startswith("a partition")


def test_plan_and_refusals():
    devices = [{"name": "nvme0n1", "schedulers": ["none", "mq-deadline"]}, {"name": "sda", "schedulers": ["bfq"]}]
    assert filters.storage_values(devices[:1], "none", "4096") == {
        "/sys/block/nvme0n1/queue/scheduler": "none",
        "/sys/block/nvme0n1/queue/read_ahead_kb": 4096,
    }
    assert filters.storage_scheduler_refusals(devices, "none") == ["sda offers bfq, not 'none'"]


def test_udev_rule_matches_whole_disks_for_every_pattern():
    template = jinja2.Template((ROLE / "templates" / "60-tunefleet-storage.rules.j2").read_text(), trim_blocks=True)
    text = template.render(
        ansible_managed="managed",
        storage_device_patterns=["nvme*n*", "loop*"],
        storage_scheduler="none",
        storage_read_ahead_kb=4096,
    )
    rules = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert rules == [
        f'ACTION=="add|change", SUBSYSTEM=="block", ENV{{DEVTYPE}}=="disk", KERNEL=="{pattern}", '
        'ATTR{queue/scheduler}="none", ATTR{queue/read_ahead_kb}="4096"'
        for pattern in ("nvme*n*", "loop*")
    ]


def test_argument_spec_defaults_match_defaults_file():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert set(spec) == set(defaults)
    assert all(spec[name]["default"] == defaults[name] for name in spec)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("losetup"), reason="needs root and losetup")
def test_real_loop_device_is_found_tuned_and_idempotent(tmp_path):
    backing = tmp_path / "disk.img"
    backing.write_bytes(b"\0" * (8 << 20))
    # attached_loop puts the queue settings this test changes back after the detach.
    with attached_loop(backing) as name:
        devices, _ = info.find_devices("/sys", [name])
        assert [device["name"] for device in devices] == [name]
        values = filters.storage_values(devices, "mq-deadline", 1024)
        changes, errors = kv.plan(values)
        assert errors == [] and changes
        kv.apply(changes)
        assert Path(f"/sys/block/{name}/queue/scheduler").read_text().split().count("[mq-deadline]") == 1
        assert Path(f"/sys/block/{name}/queue/read_ahead_kb").read_text().strip() == "1024"
        assert kv.plan(values) == ([], [])
        assert kv.plan({f"/sys/block/{name}/queue/scheduler": "cfq"})[1]  # not offered: refused
