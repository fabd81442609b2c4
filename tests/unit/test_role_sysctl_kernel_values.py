"""kernel_values module (used by the sysctl, network and storage roles): plan, apply, undo.

Fake trees stand in for /proc/sys and /sys; the last tests write the real kernel inside a
throwaway network namespace, so the host's own values are never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.helpers.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]

kv = load_plugin("modules", "kernel_values")


def put(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_kernel_whitespace_in_triples_is_not_a_change(tmp_path):
    # /proc/sys prints tcp_rmem with tabs; the inventory writes spaces
    rmem = put(tmp_path / "proc/sys/net/ipv4/tcp_rmem", "4096\t87380\t268435456\n")
    changes, errors = kv.plan({rmem: "4096 87380 268435456"})
    assert (changes, errors) == ([], [])


def test_plan_reports_before_and_after(tmp_path):
    swappiness = put(tmp_path / "proc/sys/vm/swappiness", "60\n")
    changes, errors = kv.plan({swappiness: 0})
    assert errors == []
    assert changes == [{"path": swappiness, "before": "60", "after": "0"}]


def test_scheduler_compares_the_bracketed_choice(tmp_path):
    scheduler = put(tmp_path / "sys/block/loop0/queue/scheduler", "[none] mq-deadline kyber bfq \n")
    assert kv.plan({scheduler: "none"}) == ([], [])
    changes, _ = kv.plan({scheduler: "mq-deadline"})
    assert changes == [{"path": scheduler, "before": "none", "after": "mq-deadline"}]


def test_scheduler_not_offered_is_refused_before_any_write(tmp_path):
    scheduler = put(tmp_path / "sys/block/nvme0n1/queue/scheduler", "[none] mq-deadline\n")
    read_ahead = put(tmp_path / "sys/block/nvme0n1/queue/read_ahead_kb", "128\n")
    changes, errors = kv.plan({scheduler: "cfq", read_ahead: 4096})
    assert errors == [f"{scheduler}: scheduler 'cfq' is not offered (offered: none mq-deadline)"]


def test_cpulist_ranges_equal_their_expansion(tmp_path):
    affinity = put(tmp_path / "proc/irq/37/smp_affinity_list", "0-3,8\n")
    assert kv.plan({affinity: "0,1,2,3,8"}) == ([], [])
    changes, _ = kv.plan({affinity: "0-1"})
    assert changes[0]["before"] == "0-3,8"


def test_missing_paths_and_bad_values_are_all_named(tmp_path):
    present = put(tmp_path / "proc/sys/vm/swappiness", "60\n")
    missing = str(tmp_path / "proc/sys/net/ipv4/no_such_key")
    changes, errors = kv.plan({present: True, missing: 1, "relative/path": 1})
    assert len(errors) == 3
    assert any("must be a string or an integer, not bool" in error for error in errors)
    assert any(error.startswith(missing) and "cannot read" in error for error in errors)
    assert any("not an absolute path" in error for error in errors)


def test_apply_writes_and_reads_back(tmp_path):
    swappiness = put(tmp_path / "proc/sys/vm/swappiness", "60\n")
    changes, _ = kv.plan({swappiness: 0})
    assert kv.apply(changes) == []
    assert Path(swappiness).read_text() == "0"


def test_refused_write_puts_back_what_was_written(tmp_path, monkeypatch):
    first = put(tmp_path / "proc/sys/a", "1\n")
    second = put(tmp_path / "proc/sys/b", "2\n")
    changes, _ = kv.plan({first: 10, second: 20})
    real_write = kv._write

    def refuse_second(path, value):
        if path == second and value == "20":
            raise OSError(22, "Invalid argument")
        real_write(path, value)

    monkeypatch.setattr(kv, "_write", refuse_second)
    with pytest.raises(kv.KernelValueError, match="refused '20' \\(Invalid argument\\); 1 value"):
        kv.apply(changes)
    assert Path(first).read_text() == "1"  # the first write was undone
    assert Path(second).read_text() == "2\n"


def test_value_the_kernel_ignores_is_undone(tmp_path, monkeypatch):
    mtu = put(tmp_path / "sys/class/net/eth1/mtu", "1500\n")
    changes, _ = kv.plan({mtu: 9000})
    monkeypatch.setattr(kv, "_read", lambda path: "1500\n")  # a driver that silently keeps its MTU
    with pytest.raises(kv.KernelValueError, match="kernel kept '1500'"):
        kv.apply(changes)
    assert Path(mtu).read_text() == "1500"


def test_eio_is_tolerated_only_when_asked(tmp_path, monkeypatch):
    irq = put(tmp_path / "proc/irq/40/smp_affinity_list", "0-1\n")
    changes, _ = kv.plan({irq: "1"})

    def managed_irq(path, value):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(kv, "_write", managed_irq)
    assert kv.apply(changes, tolerate_eio=True) == [irq]
    with pytest.raises(kv.KernelValueError, match="Input/output error"):
        kv.apply(changes)


def test_diff_lists_only_changed_paths():
    changes = [{"path": "/proc/sys/vm/swappiness", "before": "60", "after": "0"}]
    assert kv.diff_text(changes, "before") == "/proc/sys/vm/swappiness = 60\n"
    assert kv.diff_text(changes, "after") == "/proc/sys/vm/swappiness = 0\n"


# --- the real kernel, inside a private network namespace -----------------------------------

NETNS_SCRIPT = """
import json, sys
sys.path.insert(0, {plugin_dir!r})
import importlib.util
spec = importlib.util.spec_from_file_location("kv", {module!r})
kv = importlib.util.module_from_spec(spec); spec.loader.exec_module(kv)
before = open("/proc/sys/net/ipv4/tcp_fin_timeout").read().strip()
changes, errors = kv.plan({{"/proc/sys/net/ipv4/tcp_fin_timeout": 17, "/proc/sys/net/ipv4/tcp_syn_retries": 999}})
try:
    kv.apply(changes)
    outcome = "applied"
except kv.KernelValueError as exc:
    outcome = str(exc)
after_failure = open("/proc/sys/net/ipv4/tcp_fin_timeout").read().strip()
changes, _ = kv.plan({{"/proc/sys/net/ipv4/tcp_rmem": "4096 87380 268435456"}})
kv.apply(changes)
second, _ = kv.plan({{"/proc/sys/net/ipv4/tcp_rmem": "4096 87380 268435456"}})
print(json.dumps({{"before": before, "outcome": outcome, "after_failure": after_failure,
                  "rmem": open("/proc/sys/net/ipv4/tcp_rmem").read().strip(), "second_plan": second}}))
"""


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_real_kernel_refusal_is_undone_in_a_private_netns():
    # The module imports kernel_rules by its collection name: the link `make venv` makes.
    script = NETNS_SCRIPT.format(plugin_dir=str(ROOT / ".cache" / "collections"),
                                 module=str(ROOT / "plugins/modules/kernel_values.py"))
    proc = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert "tcp_syn_retries: the kernel refused '999' (Invalid argument)" in seen["outcome"]
    assert seen["after_failure"] == seen["before"]  # tcp_fin_timeout=17 was put back
    assert seen["rmem"].split() == ["4096", "87380", "268435456"]
    assert seen["second_plan"] == []  # idempotent against the kernel's tab-separated output


@pytest.mark.skipif(os.geteuid() != 0, reason="owned files are root:root; the plan compares the owner")
def test_owned_files_plan_write_and_then_are_unchanged(tmp_path):
    drop_in = tmp_path / "etc/sysctl.d/90-tunefleet.conf"
    stale = put(tmp_path / "etc/old.conf", "x = 1\n")
    files = [{"path": str(drop_in), "content": "vm.swappiness = 0\n", "mode": "0644"},
             {"path": stale, "state": "absent"}]
    changes, errors = kv.plan_files(files)
    assert errors == []
    assert [(c["path"], c["before"], c["after"]) for c in changes] == [
        (str(drop_in), "", "vm.swappiness = 0\n"), (stale, "x = 1\n", "")]
    diffs = kv.file_diffs(changes)
    assert diffs[0]["before_header"].endswith("(absent)") and diffs[0]["after_header"].endswith("(0644)")
    kv.apply_files(changes)
    assert drop_in.read_text() == "vm.swappiness = 0\n" and not os.path.exists(stale)
    assert oct(drop_in.stat().st_mode & 0o777) == "0o644" and oct(drop_in.parent.stat().st_mode & 0o777) == "0o755"
    assert kv.plan_files(files) == ([], [])  # the second run changes nothing
    drop_in.chmod(0o600)
    assert [c["path"] for c in kv.plan_files(files)[0]] == [str(drop_in)]  # a mode change is a change


def test_bad_owned_files_are_named_before_anything_is_written(tmp_path):
    (tmp_path / "etc").mkdir()
    changes, errors = kv.plan_files([{"path": "etc/x.conf", "content": ""},
                                     {"path": str(tmp_path / "a.conf"), "content": "", "mode": "0999"},
                                     {"path": str(tmp_path / "etc"), "content": "x"}])
    assert changes == []
    assert errors[0] == "etc/x.conf: files[].path must be a normalised absolute path"
    assert errors[1] == f"{tmp_path}/a.conf: mode '0999' is not an octal mode"
    assert "is not a regular file" in errors[2]


@pytest.mark.parametrize(("state", "seen", "steps"), [
    ("enabled", {"enabled": "disabled", "active": "inactive"}, ["enable", "start"]),
    ("enabled", {"enabled": "not-found", "active": "inactive"}, ["enable", "start"]),  # file about to be written
    ("enabled", {"enabled": "enabled", "active": "active"}, []),  # the second run changes nothing
    ("enabled", {"enabled": "enabled", "active": "failed"}, ["start"]),
    ("absent", {"enabled": "enabled", "active": "active"}, ["disable", "stop"]),
    ("absent", {"enabled": "not-found", "active": "inactive"}, []),  # never installed: nothing to stop
])
def test_owned_units_take_only_the_steps_they_need(state, seen, steps):
    assert kv.unit_steps({"name": "tunefleet-thp.service", "state": state}, seen) == steps


def test_bad_units_are_named():
    problems = kv.unit_problems([{"name": "ok.service"}, {"name": "../x.service"},
                                 {"name": "x.service", "state": "on"}])
    assert len(problems) == 2 and "'../x.service'" in problems[0] and "'on'" in problems[1]


@pytest.mark.parametrize(("seen", "changed", "steps"), [
    ({"enabled": "enabled", "active": "active"}, {"/etc/x.service.d/90.conf"}, ["restart"]),  # new ExecStart
    ({"enabled": "enabled", "active": "active"}, {"/etc/other.conf"}, []),  # another file: left running
    ({"enabled": "disabled", "active": "inactive"}, {"/etc/x.service.d/90.conf"}, ["enable", "start"]),  # starts anew
])
def test_a_running_unit_is_restarted_only_when_its_own_file_changed(seen, changed, steps):
    unit = {"name": "x.service", "restart_when_changed": ["/etc/x.service.d/90.conf"]}
    assert kv.unit_steps(unit, seen, frozenset(changed)) == steps


def test_bad_kernel_module_names_and_restart_lists_are_named():
    assert kv.kernel_module_problems(["nvidia_peermem", "nvidia-peermem", "../evil", "a b"]) == [
        "kernel_modules: '../evil' is not a kernel module name", "kernel_modules: 'a b' is not a kernel module name"]
    assert kv.unit_problems([{"name": "x.service", "restart_when_changed": "/etc/x.conf"}])


def test_a_module_not_loaded_is_reported_in_check_mode_and_recorded(tmp_path, capsys):
    """Check mode through main(): the module that would be loaded is in the result, the diff and the
    ledger's new entries (as not loaded before); nothing is loaded and no ledger is written."""
    name = "tunefleet_no_such_module"  # never loaded anywhere: /sys/module/<name> is absent
    ledger = tmp_path / "ledger.json"
    args = {"values": {}, "kernel_modules": [name], "recorded_by": "gpu", "ledger_path": str(ledger),
            "_ansible_check_mode": True, "_ansible_diff": True}
    with patch_module_args(args), pytest.raises(SystemExit):
        kv.main()
    result = json.loads(capsys.readouterr().out)
    assert result["changed"] is True and result["modules_loaded"] == [name]
    assert result["diff"]["after"] == f"{name} loaded\n"
    assert result["recorded"]["kernel_modules"] == [name]
    assert not ledger.exists()


def test_a_boot_unit_is_only_enabled_when_start_is_false():
    unit = {"name": "tunefleet-nic-tune.service", "start": False}
    assert kv.unit_steps(unit, {"enabled": "disabled", "active": "inactive"}) == ["enable"]
    assert kv.unit_steps(unit, {"enabled": "enabled", "active": "inactive"}) == []  # the second run
    assert kv.unit_problems([{"name": "x.service", "start": "no"}])


def test_record_also_puts_the_roles_later_changes_in_the_ledger_first(tmp_path, capsys):
    """The network role's first change records what its later tasks touch (IRQ affinity, the
    persistence files, irqbalance) in the same step; a malformed entry is refused before anything.
    Only the ledger (under tmp_path) is written: the live path is read, never set."""
    live = "/proc/sys/vm/swappiness"  # stands in for an IRQ's smp_affinity_list: a live path the role sets later
    later_file = tmp_path / "etc" / "later.conf"
    ledger = tmp_path / "ledger.json"
    args = {"values": {}, "recorded_by": "network", "ledger_path": str(ledger),
            "record_also": {"paths": [live], "files": [str(later_file)]}}
    with patch_module_args(args), pytest.raises(SystemExit):
        kv.main()
    result = json.loads(capsys.readouterr().out)
    assert result["recorded"]["paths"] == [live] and result["recorded"]["files"] == [str(later_file)]
    entries = json.loads(ledger.read_text())
    assert entries["paths"][live]["value"] == Path(live).read_text().strip()
    assert entries["files"][str(later_file)]["state"] == "absent" and entries["paths"][live]["recorded_by"] == "network"
    bad = dict(args, record_also={"path": [live]}, ledger_path=str(tmp_path / "other.json"))
    with patch_module_args(bad), pytest.raises(SystemExit):
        kv.main()
    refused = json.loads(capsys.readouterr().out)
    assert refused["failed"] and "record_also: 'path'" in refused["msg"]
    assert not (tmp_path / "other.json").exists()
