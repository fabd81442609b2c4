"""Every Ansible module ends in a result, never a traceback (issue 27 item 6).

Each module's readers get non-UTF-8 bytes, 5000-digit numbers and deeply nested JSON, through
main() (the path Ansible takes), on fake node trees; and an error no reader expected becomes a
failed result naming the module and the file (plugins/module_utils/module_guard.py).
"""
from __future__ import annotations

import io
import json
import os
import shutil
import stat
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.helpers.plugins import load_plugin
from tests.unit.test_preflight import GOOD, build_host

NOT_UTF8 = b"\xff\xfe [perf\xfformance] \xc3\n"
HUGE_NUMBER = b"9" * 5000 + b"\n"
DEEP_JSON = b"[" * 100_000 + b"]" * 100_000
GARBAGE = (NOT_UTF8, HUGE_NUMBER, DEEP_JSON)

guard = load_plugin("module_utils", "module_guard")


def run_main(name: str, args: dict) -> dict:
    """The module's main() as Ansible runs it: the JSON it prints. Anything escaping it fails the test."""
    module = load_plugin("modules", name)
    out = io.StringIO()
    with patch_module_args(args), redirect_stdout(out), pytest.raises(SystemExit):
        module.main()
    return json.loads(out.getvalue())


@pytest.mark.parametrize("garbage", GARBAGE, ids=["not-utf8", "5000-digits", "deep-json"])
@pytest.mark.parametrize("node_file", [
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_available_governors",  # a sysfs choice file
    "/proc/sys/fs/nr_open",  # a sysfs/procfs value
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/block/nvme0n1/queue/scheduler",
    "/proc/sys/net/ipv4/tcp_rmem",
])
def test_preflight_answers_damaged_node_files(tmp_path, node_file, garbage):
    root = build_host(tmp_path)
    target = root / node_file.lstrip("/")
    target.chmod(0o644)
    target.write_bytes(garbage)
    result = run_main("preflight", {"host": "gpu01", "variables": GOOD, "root": str(root)})
    if result.get("failed"):
        assert "gpu01" in result["msg"] or node_file in result["msg"]
    else:
        assert "tunefleet_node" in result["ansible_facts"]


def test_preflight_refuses_a_5000_digit_variable_by_name(tmp_path):
    root = build_host(tmp_path)
    result = run_main("preflight", {"host": "gpu01", "root": str(root),
                                    "variables": dict(GOOD, network_mtu="9" * 5000)})
    assert result["failed"] and "network_mtu" in result["msg"]


@pytest.mark.parametrize("garbage", GARBAGE, ids=["not-utf8", "5000-digits", "deep-json"])
def test_reboot_marker_treats_a_damaged_marker_as_an_earlier_one(tmp_path, garbage):
    root = tmp_path / "node"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("6f1d2c3b-0a9e-4e7d-8c21-5b4a3f2e1d0c\n")
    marker = root / "var/lib/tunefleet/reboot-required"
    marker.parent.mkdir(parents=True)
    marker.write_bytes(garbage)
    marker.chmod(0o600)
    result = run_main("reboot_marker", {"root": str(root), "path": "/var/lib/tunefleet/reboot-required",
                                        "_ansible_check_mode": True})
    assert not result.get("failed"), result.get("msg")
    assert result["earlier_marker"] and "reboot-required" in result["earlier_problem"]


@pytest.mark.parametrize("garbage", GARBAGE, ids=["not-utf8", "5000-digits", "deep-json"])
def test_ledger_names_a_damaged_ledger_file(tmp_path, garbage):
    ledger = tmp_path / "ledger.json"
    ledger.write_bytes(garbage)
    ledger.chmod(0o600)
    result = run_main("ledger", {"paths": ["/proc/sys/vm/swappiness"], "ledger_path": str(ledger),
                                 "recorded_by": "sysctl", "_ansible_check_mode": True})
    assert result["failed"] and str(ledger) in result["msg"]


@pytest.mark.parametrize("garbage", [NOT_UTF8, HUGE_NUMBER], ids=["not-utf8", "5000-digits"])
@pytest.mark.parametrize("direction", ["exact", "at_least"])
def test_kernel_values_plans_damaged_values_without_a_traceback(tmp_path, garbage, direction):
    value = tmp_path / "proc/sys/vm/max_map_count"
    value.parent.mkdir(parents=True)
    value.write_bytes(garbage)
    result = run_main("kernel_values", {"values": {str(value): 262144}, "directions": {str(value): direction},
                                        "_ansible_check_mode": True, "_ansible_diff": True})
    assert not result.get("failed"), result.get("msg")
    # a value the kernel could not have printed is no better than the recommendation: it would be set
    assert [c["after"] for c in result["changes"]] == ["262144"]
    assert value.read_bytes() == garbage


@pytest.mark.parametrize("garbage", GARBAGE, ids=["not-utf8", "5000-digits", "deep-json"])
def test_memory_hugepages_names_an_unreadable_count(tmp_path, garbage):
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    (proc / "sys/vm").mkdir(parents=True)
    (proc / "meminfo").write_text("Hugepagesize:       2048 kB\n")
    (proc / "sys/vm/nr_hugepages").write_bytes(garbage)
    sys_root.mkdir()
    result = run_main("memory_hugepages", {"total": 16, "proc_root": str(proc), "sysfs_root": str(sys_root),
                                           "_ansible_check_mode": True})
    assert result["failed"] and "nr_hugepages" in result["msg"]


@pytest.mark.parametrize("garbage", GARBAGE, ids=["not-utf8", "5000-digits", "deep-json"])
def test_gpu_persistence_names_damaged_nvidia_smi_output(tmp_path, garbage):
    (tmp_path / "out").write_bytes(garbage)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat {tmp_path / 'out'}\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    result = run_main("gpu_persistence", {"nvidia_smi": str(smi), "_ansible_check_mode": True})
    assert result["failed"] and result["msg"]


def test_an_unexpected_error_is_a_failed_result_naming_module_and_file(tmp_path, monkeypatch):
    """What slips past every reader: the guard answers with the module, the exception, file and value."""
    value = tmp_path / "proc/sys/vm/swappiness"
    value.parent.mkdir(parents=True)
    value.write_text("60\n")
    module = load_plugin("modules", "kernel_values")

    def broken(path):
        raise UnicodeDecodeError("ascii", b"6\xff0", 1, 2, "ordinal not in range")

    monkeypatch.setattr(module, "_read", broken)
    out = io.StringIO()
    with patch_module_args({"values": {str(value): 0}}), redirect_stdout(out), pytest.raises(SystemExit):
        module.main()
    result = json.loads(out.getvalue())
    assert result["failed"] and result["msg"].startswith("tunefleet.gpu_node.kernel_values: ")
    assert "UnicodeDecodeError" in result["msg"] and "b'\\xff' at offset 1" in result["msg"]
    missing = FileNotFoundError(2, "No such file or directory")
    missing.filename = "/sys/x"
    assert guard.describe(missing) == "FileNotFoundError: file '/sys/x': No such file or directory"
    assert guard.describe(RecursionError("maximum recursion depth")) == "RecursionError: input nested too deeply"


def test_every_module_runs_inside_the_guard():
    for path in sorted(Path(__file__).resolve().parents[2].glob("plugins/modules/*.py")):
        text = path.read_text()
        assert f'failing_cleanly(module, "tunefleet.gpu_node.{path.stem}")' in text, path.name


def test_fixture_tree_is_restorable(tmp_path):
    # build_host's files are copied per test; a read-only one must still take the garbage
    root = build_host(tmp_path / "a")
    shutil.copytree(root, tmp_path / "b")
    assert os.access(tmp_path / "b/proc/sys/kernel/osrelease", os.R_OK)
