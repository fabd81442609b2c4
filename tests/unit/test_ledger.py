"""The ledger records first-seen state once, writes atomically, and restores it exactly."""
from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))  # the collection link `make venv` creates

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_core as core  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_restore as undo  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "ledger"
LEDGER = "/var/lib/tunefleet/ledger.json"
LIVE = {
    "/sys/kernel/mm/transparent_hugepage/enabled": "thp_enabled",
    "/sys/kernel/mm/transparent_hugepage/defrag": "thp_defrag",
    "/sys/block/loop0/queue/scheduler": "loop0_scheduler",
    "/proc/sys/net/ipv4/tcp_rmem": "tcp_rmem",
    "/proc/sys/net/core/rmem_max": "rmem_max",
    "/sys/class/net/lo/mtu": "lo_mtu",
}


class FakeSystemd:
    """systemctl as a state machine: the answers and state changes the real one gives."""

    def __init__(self, units: dict):
        self.units = {name: dict(state) for name, state in units.items()}
        self.calls: list = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[0] != "systemctl":
            return 0, "", ""
        verb = argv[1]
        if verb == "daemon-reload":
            return 0, "", ""
        unit = self.units.get(argv[2])
        if verb == "is-enabled":
            return (0, unit["enabled"] + "\n", "") if unit else (1, "", f"Failed to get unit file state for {argv[2]}")
        if verb == "is-active":
            active = unit["active"] if unit else "inactive"
            return (0 if active == "active" else 3), active + "\n", ""
        effects = {"enable": ("enabled", "enabled"), "disable": ("enabled", "disabled"),
                   "start": ("active", "active"), "stop": ("active", "inactive"),
                   "mask": ("enabled", "masked"), "unmask": ("enabled", "disabled")}
        key, value = effects[verb]
        unit[key] = value
        return 0, "", ""


def build_node(root: Path) -> None:
    for path, fixture in LIVE.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / fixture, target)
    etc = root / "etc"
    (etc / "sysctl.d").mkdir(parents=True)
    (etc / "nccl.conf").write_text("NCCL_DEBUG=INFO\n")
    os.chmod(etc / "nccl.conf", 0o640)
    (etc / "default").mkdir()
    (etc / "default" / "irqbalance").write_text("#IRQBALANCE_BANNED_CPULIST=\n")
    os.symlink("../run/resolv.conf", etc / "resolv.conf")


def tree_state(root: Path) -> dict:
    """Everything a person could observe about the tree: kinds, contents, modes, owners."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            info = full.lstat()
            if stat.S_ISLNK(info.st_mode):
                state[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(info.st_mode):
                state[rel] = ("dir", stat.S_IMODE(info.st_mode))
            elif rel.startswith(("proc/", "sys/")):
                # A kernel file shows the active choice in brackets; a plain file just holds it.
                state[rel] = ("live", core.selected_choice(full.read_text().strip()).split())
            else:
                state[rel] = ("file", full.read_bytes(), stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid)
    return state


def ledger_on_disk(root: Path) -> dict:
    return json.loads((root / LEDGER.lstrip("/")).read_text())


ALL_PATHS = sorted(LIVE)
ALL_FILES = ["/etc/sysctl.d/90-tunefleet.conf", "/etc/nccl.conf", "/etc/default/irqbalance", "/etc/resolv.conf",
             "/etc/systemd/system/nvidia-persistenced.service.d/override.conf"]


def apply_like_the_roles(root: Path) -> None:
    """What a tuning run does to the node (values as the roles would write them)."""
    writes = {"/sys/kernel/mm/transparent_hugepage/enabled": "always",
              "/sys/kernel/mm/transparent_hugepage/defrag": "[defer] never",
              "/sys/block/loop0/queue/scheduler": "[mq-deadline] none",
              "/proc/sys/net/ipv4/tcp_rmem": "4096\t87380\t268435456\n",
              "/proc/sys/net/core/rmem_max": "536870912\n",
              "/sys/class/net/lo/mtu": "9000\n"}
    for path, text in writes.items():
        (root / path.lstrip("/")).write_text(text)
    (root / "etc/sysctl.d/90-tunefleet.conf").write_text("net.core.rmem_max = 536870912\n")
    (root / "etc/nccl.conf").write_text("NCCL_DEBUG=WARN\n")
    os.chmod(root / "etc/nccl.conf", 0o644)
    (root / "etc/default/irqbalance").write_text("IRQBALANCE_BANNED_CPULIST=0-7\n")
    os.unlink(root / "etc/resolv.conf")
    (root / "etc/resolv.conf").write_text("nameserver 10.0.0.1\n")
    dropin = root / "etc/systemd/system/nvidia-persistenced.service.d"
    dropin.mkdir(parents=True)
    (dropin / "override.conf").write_text("[Service]\nExecStart=\n")


# ------------------------------------------------------------------ reading live values

@pytest.mark.parametrize(
    ("fixture", "expected"),
    [("thp_enabled", "madvise"), ("thp_defrag", "madvise"), ("loop0_scheduler", "none"),
     ("tcp_rmem", "4096\t131072\t33554432"), ("rmem_max", "4194304"), ("lo_mtu", "65536")],
)
def test_live_value_is_what_would_be_written_back(fixture, expected):
    assert core.selected_choice((FIXTURES / fixture).read_text().strip()) == expected


def test_missing_live_file_is_recorded_as_absent(tmp_path):
    build_node(tmp_path)
    ledger = core.empty_ledger()
    observed = core.observe(str(tmp_path), ["/sys/class/net/ib0/mtu"], [], None, [])
    core.record_first_seen(ledger, observed)
    assert ledger["paths"]["/sys/class/net/ib0/mtu"]["exists"] is False


@pytest.mark.parametrize(
    ("paths", "files", "problem"),
    [(["proc/sys/net/core/rmem_max"], [], "absolute"),
     (["/etc/sysctl.conf"], [], "under /proc/ or /sys/"),
     (["/proc/sys/../sys/net/core/rmem_max"], [], "normalised"),
     (["/sys/class/net/lo"], [], "directory"),
     ([], ["/proc/sys/net/core/rmem_max"], "go in 'paths'"),
     ([], ["/etc/sysctl.d"], "not a regular file")],
)
def test_bad_input_fails_before_the_ledger_is_touched(tmp_path, paths, files, problem):
    build_node(tmp_path)
    (tmp_path / "sys/class/net/lo").mkdir(exist_ok=True)
    good = ["/proc/sys/net/core/rmem_max"]
    with pytest.raises(core.LedgerError, match=problem):
        core.record(str(tmp_path), LEDGER, good + paths, files, [], None)
    assert not (tmp_path / "var").exists()


# ------------------------------------------------------------------ recording

def test_first_seen_values_are_never_overwritten(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    first = core.record(root, LEDGER, ALL_PATHS, ALL_FILES, [], None, recorded_by="sysctl")
    assert sorted(first["paths"]) == ALL_PATHS and sorted(first["files"]) == sorted(ALL_FILES)
    before_apply = ledger_on_disk(tmp_path)

    apply_like_the_roles(tmp_path)
    again = core.record(root, LEDGER, ALL_PATHS, ALL_FILES, [], None, recorded_by="sysctl")
    assert again == {"paths": [], "files": [], "services": [], "kernel_modules": []}
    assert ledger_on_disk(tmp_path) == before_apply
    assert before_apply["paths"]["/proc/sys/net/core/rmem_max"]["value"] == "4194304"
    assert before_apply["files"]["/etc/nccl.conf"]["content"] == "NCCL_DEBUG=INFO\n"

    # A knob first seen after the apply is added without disturbing the others.
    (tmp_path / "proc/sys/vm").mkdir(parents=True)
    (tmp_path / "proc/sys/vm/swappiness").write_text("60\n")
    later = core.record(root, LEDGER, ["/proc/sys/vm/swappiness", *ALL_PATHS], [], [], None)
    assert later["paths"] == ["/proc/sys/vm/swappiness"]
    on_disk = ledger_on_disk(tmp_path)
    assert on_disk["paths"]["/proc/sys/vm/swappiness"]["value"] == "60"
    assert on_disk["paths"]["/proc/sys/net/core/rmem_max"] == before_apply["paths"]["/proc/sys/net/core/rmem_max"]


def test_ledger_is_root_only(tmp_path):
    build_node(tmp_path)
    core.record(str(tmp_path), LEDGER, ALL_PATHS, [], [], None)
    ledger_file = tmp_path / LEDGER.lstrip("/")
    assert stat.S_IMODE(ledger_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(ledger_file.parent.stat().st_mode) == 0o700


def test_a_loose_ledger_directory_is_tightened(tmp_path):
    build_node(tmp_path)
    directory = tmp_path / "var/lib/tunefleet"
    directory.mkdir(parents=True)
    os.chmod(directory, 0o755)
    core.record(str(tmp_path), LEDGER, ALL_PATHS, [], [], None)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_check_mode_writes_nothing_but_reports_what_is_new(tmp_path):
    build_node(tmp_path)
    before = tree_state(tmp_path)
    added = core.record(str(tmp_path), LEDGER, ALL_PATHS, ALL_FILES, [], None, check_mode=True)
    assert sorted(added["paths"]) == ALL_PATHS
    assert tree_state(tmp_path) == before


def test_a_crash_while_writing_keeps_the_old_ledger_whole(tmp_path, monkeypatch):
    build_node(tmp_path)
    root = str(tmp_path)
    core.record(root, LEDGER, ["/proc/sys/net/core/rmem_max"], [], [], None)
    old_bytes = (tmp_path / LEDGER.lstrip("/")).read_bytes()

    def power_cut(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(core.os, "fsync", power_cut)
    with pytest.raises(OSError):
        core.record(root, LEDGER, ALL_PATHS, [], [], None)
    ledger_dir = tmp_path / "var/lib/tunefleet"
    assert (ledger_dir / "ledger.json").read_bytes() == old_bytes
    assert sorted(p.name for p in ledger_dir.iterdir()) == ["ledger.json", "ledger.json.lock"]


def test_a_corrupt_ledger_is_refused_not_replaced(tmp_path):
    build_node(tmp_path)
    ledger_file = tmp_path / LEDGER.lstrip("/")
    ledger_file.parent.mkdir(parents=True)
    ledger_file.write_text('{"schema": "tunefleet.ledger/v1", "paths": {')
    with pytest.raises(core.LedgerError, match="not JSON"):
        core.record(str(tmp_path), LEDGER, ALL_PATHS, [], [], None)
    assert ledger_file.read_text() == '{"schema": "tunefleet.ledger/v1", "paths": {'


def test_binary_file_content_survives_the_round_trip(tmp_path):
    build_node(tmp_path)
    blob = bytes(range(256))
    (tmp_path / "etc/blob.bin").write_bytes(blob)
    core.record(str(tmp_path), LEDGER, [], ["/etc/blob.bin"], [], None)
    (tmp_path / "etc/blob.bin").write_bytes(b"changed")
    result = undo.restore(str(tmp_path), core.load_ledger(str(tmp_path), LEDGER), FakeSystemd({}))
    assert result.errors == []
    assert (tmp_path / "etc/blob.bin").read_bytes() == blob


# ------------------------------------------------------------------ restoring

def test_restore_returns_the_tree_to_its_state_before_the_first_apply(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    systemd = FakeSystemd({"irqbalance": {"enabled": "enabled", "active": "active"},
                           "nvidia-persistenced": {"enabled": "disabled", "active": "inactive"}})
    before_units = json.loads(json.dumps(systemd.units))
    services = ["irqbalance", "nvidia-persistenced", "tunefleet-cpu-governor"]
    core.record(root, LEDGER, ALL_PATHS, ALL_FILES, services, systemd)
    before = {k: v for k, v in tree_state(tmp_path).items() if not k.startswith("var")}

    apply_like_the_roles(tmp_path)
    # A second run records again; the ledger must still describe the node before the FIRST run.
    core.record(root, LEDGER, ALL_PATHS, ALL_FILES, services, systemd)
    systemd.units["irqbalance"].update(enabled="disabled", active="inactive")
    systemd.units["nvidia-persistenced"].update(enabled="enabled", active="active")
    systemd.units["tunefleet-cpu-governor"] = {"enabled": "enabled", "active": "active"}
    systemd.calls.clear()

    result = undo.restore(root, core.load_ledger(root, LEDGER), systemd)
    assert result.errors == []
    after = {k: v for k, v in tree_state(tmp_path).items() if not k.startswith("var")}
    assert after == before
    assert {n: systemd.units[n] for n in before_units} == before_units
    assert systemd.units["tunefleet-cpu-governor"] == {"enabled": "disabled", "active": "inactive"}
    assert result.reloads == ["systemd-daemon-reload"]
    # Units stop before their files go, and start only after systemd re-read the files.
    order = [" ".join(c[1:]) for c in systemd.calls if c[1] not in ("is-enabled", "is-active")]
    assert order.index("stop nvidia-persistenced") < order.index("daemon-reload") < order.index("start irqbalance")


def test_restore_twice_changes_nothing_the_second_time(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    core.record(root, LEDGER, ALL_PATHS, ALL_FILES, [], None)
    apply_like_the_roles(tmp_path)
    ledger = core.load_ledger(root, LEDGER)
    assert undo.restore(root, ledger, FakeSystemd({})).changes
    second = undo.restore(root, ledger, FakeSystemd({}))
    assert second.changes == [] and second.errors == []


def test_restore_in_check_mode_lists_changes_and_touches_nothing(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    core.record(root, LEDGER, ALL_PATHS, ALL_FILES, [], None)
    apply_like_the_roles(tmp_path)
    applied = tree_state(tmp_path)
    systemd = FakeSystemd({})
    result = undo.restore(root, core.load_ledger(root, LEDGER), systemd, check_mode=True)
    assert tree_state(tmp_path) == applied
    assert all(c[1] in ("is-enabled", "is-active") for c in systemd.calls)
    targets = {c["target"]: c for c in result.changes}
    assert targets["/proc/sys/net/core/rmem_max"]["before"] == "536870912"
    assert targets["/proc/sys/net/core/rmem_max"]["after"] == "4194304"
    assert targets["/etc/sysctl.d/90-tunefleet.conf"]["after"] == "absent"
    assert "/proc/sys/net/ipv4/tcp_rmem" in targets


def test_grub_defaults_restored_means_regenerate_and_reboot(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    core.record(root, LEDGER, [], ["/etc/default/grub.d/90-tunefleet.cfg"], [], None)
    (tmp_path / "etc/default/grub.d").mkdir()
    (tmp_path / "etc/default/grub.d/90-tunefleet.cfg").write_text('GRUB_CMDLINE_LINUX="hugepages=8"\n')
    systemd = FakeSystemd({})
    result = undo.restore(root, core.load_ledger(root, LEDGER), systemd)
    assert ["update-grub"] in systemd.calls
    assert result.reboot_required is True
    assert not (tmp_path / "etc/default/grub.d").exists()


def test_a_directory_that_gained_other_files_is_kept(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    core.record(root, LEDGER, [], ["/etc/modules-load.d/tunefleet.conf"], [], None)
    (tmp_path / "etc/modules-load.d").mkdir()
    (tmp_path / "etc/modules-load.d/tunefleet.conf").write_text("nvidia_peermem\n")
    (tmp_path / "etc/modules-load.d/other.conf").write_text("vfio\n")
    assert undo.restore(root, core.load_ledger(root, LEDGER), FakeSystemd({})).errors == []
    assert sorted(p.name for p in (tmp_path / "etc/modules-load.d").iterdir()) == ["other.conf"]


def test_a_value_that_cannot_be_written_back_is_reported_and_the_rest_restored(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    core.record(root, LEDGER, ["/sys/class/net/lo/mtu", "/proc/sys/net/core/rmem_max"], [], [], None)
    apply_like_the_roles(tmp_path)
    (tmp_path / "sys/class/net/lo/mtu").unlink()
    (tmp_path / "sys/class/net/lo/mtu").mkdir()  # writing to it now fails like a vanished device
    result = undo.restore(root, core.load_ledger(root, LEDGER), FakeSystemd({}))
    assert any("/sys/class/net/lo/mtu" in e for e in result.errors)
    assert (tmp_path / "proc/sys/net/core/rmem_max").read_text() == "4194304"


def test_archive_moves_the_ledger_aside_so_the_next_apply_records_afresh(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    core.record(root, LEDGER, ["/proc/sys/net/core/rmem_max"], [], [], None)
    moved = undo.archive_ledger(root, LEDGER, when="2026-11-21T23:00:00Z")
    assert moved == "/var/lib/tunefleet/ledger.restored-20261121T230000Z.json"
    assert (tmp_path / moved.lstrip("/")).exists()
    (tmp_path / "proc/sys/net/core/rmem_max").write_text("1234\n")
    assert core.record(root, LEDGER, ["/proc/sys/net/core/rmem_max"], [], [], None)["paths"]
    assert ledger_on_disk(tmp_path)["paths"]["/proc/sys/net/core/rmem_max"]["value"] == "1234"


def test_a_module_loaded_by_tunefleet_is_unloaded_on_restore(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    (tmp_path / "sys/module/ib_core").mkdir(parents=True)
    added = core.record(root, LEDGER, [], [], [], None, kernel_modules=["nvidia_peermem", "ib_core"])
    assert added["kernel_modules"] == ["nvidia_peermem", "ib_core"]
    assert ledger_on_disk(tmp_path)["kernel_modules"]["nvidia_peermem"]["loaded"] is False
    (tmp_path / "sys/module/nvidia_peermem").mkdir()  # what `modprobe nvidia_peermem` leaves behind
    systemd = FakeSystemd({})
    preview = undo.restore(root, core.load_ledger(root, LEDGER), systemd, check_mode=True)
    assert [(c["target"], c["after"]) for c in preview.changes] == [("nvidia_peermem", "not loaded")]
    assert systemd.calls == []
    undo.restore(root, core.load_ledger(root, LEDGER), systemd)
    assert systemd.calls == [["modprobe", "-r", "nvidia_peermem"]]


def test_a_bad_module_name_is_refused(tmp_path):
    build_node(tmp_path)
    with pytest.raises(core.LedgerError, match="not a kernel module name"):
        core.record(str(tmp_path), LEDGER, [], [], [], None, kernel_modules=["../../etc"])
    assert not (tmp_path / "var").exists()


def test_a_value_whose_file_vanished_is_skipped_not_an_error(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    core.record(root, LEDGER, ["/sys/class/net/lo/mtu", "/proc/sys/net/core/rmem_max"], [], [], None)
    apply_like_the_roles(tmp_path)
    shutil.rmtree(tmp_path / "sys/class/net/lo")  # the NIC was removed since the apply
    result = undo.restore(root, core.load_ledger(root, LEDGER), FakeSystemd({}))
    assert result.errors == []
    assert result.left_alone == ["/sys/class/net/lo/mtu: recorded '65536', but the file no longer exists"]
    assert (tmp_path / "proc/sys/net/core/rmem_max").read_text() == "4194304"


def test_restore_on_a_node_without_systemd_or_udev_tools_completes(tmp_path):
    """Seen on the GPU machine: no systemctl, no udevadm. The files are restored; the reloads
    are moot there and reported as skipped, not as a failed restore that keeps the ledger."""
    build_node(tmp_path)
    root = str(tmp_path)
    files = ["/etc/systemd/system.conf.d/90-tunefleet-limits.conf", "/etc/udev/rules.d/60-tunefleet-storage.rules"]
    core.record(root, LEDGER, ["/proc/sys/net/core/rmem_max"], files, [], None)
    for path in files:
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("# tunefleet\n")
    (tmp_path / "proc/sys/net/core/rmem_max").write_text("536870912\n")
    calls = []

    def no_managers(argv):
        calls.append(argv[0])
        return None, "", f"{argv[0]}: not found"

    result = undo.restore(root, core.load_ledger(root, LEDGER), no_managers)
    assert result.errors == []
    assert sorted(result.reloads) == ["systemd-daemon-reexec", "udev-reload"]
    assert any("udevadm is not installed" in s for s in result.left_alone)
    assert not (tmp_path / files[0].lstrip("/")).exists() and not (tmp_path / files[1].lstrip("/")).exists()
    assert (tmp_path / "proc/sys/net/core/rmem_max").read_text().strip() == (FIXTURES / "rmem_max").read_text().strip()


def test_a_failing_reload_is_still_an_error(tmp_path):
    build_node(tmp_path)
    root = str(tmp_path)
    path = "/etc/udev/rules.d/60-tunefleet-storage.rules"
    core.record(root, LEDGER, [], [path], [], None)
    (tmp_path / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path.lstrip("/")).write_text("# tunefleet\n")
    result = undo.restore(root, core.load_ledger(root, LEDGER), lambda argv: (1, "", "Failed to send reload request"))
    assert result.errors == ["udevadm control --reload: Failed to send reload request"]
