"""Put a node back the way the ledger says it was before tunefleet first touched it.

Order matters: units that did not run before are stopped and disabled while their unit files
still exist, then files are restored, then systemd/udev/GRUB re-read them, then kernel values
are written back, then units that ran before are started again. Standard library only.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from ansible_collections.tunefleet.gpu_node.plugins.module_utils.ledger_core import (
    LedgerError,
    Runner,
    file_bytes,
    module_loaded,
    on_node,
    open_root_dir,
    read_live_value,
    remove_in_root_dir,
    same_file,
    same_value,
    service_state,
    snapshot_file,
    utc_now,
    write_in_dir_fd,
    write_live_value,
)

SYSTEMD_DIRS = ("/etc/systemd/system/", "/usr/lib/systemd/system/", "/lib/systemd/system/")
SYSTEMD_MANAGER_FILES = ("/etc/systemd/system.conf", "/etc/systemd/system.conf.d/")
UDEV_DIRS = ("/etc/udev/rules.d/",)
GRUB_FILES = ("/etc/default/grub",)  # also matches /etc/default/grub.d/
ENABLEMENT_RESTORED = ("enabled", "disabled", "masked")


@dataclass
class RestoreResult:
    changes: List[dict] = field(default_factory=list)  # {"kind", "target", "before", "after"}
    errors: List[str] = field(default_factory=list)
    # Recorded things that no longer exist (a NIC removed or renamed): nothing to write back.
    left_alone: List[str] = field(default_factory=list)
    reloads: List[str] = field(default_factory=list)
    reboot_required: bool = False
    archived_to: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


def _service_commands(name: str, recorded: dict, current: dict) -> tuple:
    """(commands before files are restored, commands after): systemctl argv lists."""
    down, up = [], []
    want_enabled, now_enabled = recorded.get("enabled"), current.get("enabled")
    want_active, now_active = recorded.get("active"), current.get("active")
    if want_enabled is None or now_enabled is None:
        return down, up
    if want_active != "active" and now_active == "active":
        down.append(["systemctl", "stop", name])
    if want_enabled in ("disabled", "not-found") and now_enabled == "enabled":
        down.append(["systemctl", "disable", name])
    if want_enabled == "masked" and now_enabled != "masked":
        down.append(["systemctl", "mask", name])
    if now_enabled == "masked" and want_enabled != "masked":
        up.append(["systemctl", "unmask", name])
    if want_enabled == "enabled" and now_enabled != "enabled":
        up.append(["systemctl", "enable", name])
    if want_active == "active" and now_active != "active":
        up.append(["systemctl", "start", name])
    return down, up


def _reloads_for(changed_files: List[str]) -> List[str]:
    reloads = []
    if any(p.startswith(SYSTEMD_DIRS) for p in changed_files):
        reloads.append("systemd-daemon-reload")
    if any(p.startswith(SYSTEMD_MANAGER_FILES) for p in changed_files):
        reloads.append("systemd-daemon-reexec")
    if any(p.startswith(UDEV_DIRS) for p in changed_files):
        reloads.append("udev-reload")
    if any(p.startswith(GRUB_FILES) for p in changed_files):
        reloads.append("grub-mkconfig")
    return reloads


def _restore_file(root: str, path: str, recorded: dict) -> None:
    where = on_node(root, path)
    if recorded["state"] == "absent":
        remove_in_root_dir(where)
        # Directories the roles created for this file go too, if nothing else lives there.
        for directory in reversed(recorded.get("created_dirs", [])):
            try:
                remove_in_root_dir(on_node(root, directory), directory=True)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                    raise
                if exc.errno != errno.ENOENT:
                    break
        return
    # The directory by descriptor from / (open_root_dir): a user's link on the way is never followed.
    dir_fd = open_root_dir(os.path.dirname(where), create=True, mode=0o755)
    name = os.path.basename(where)
    try:
        if recorded["state"] == "link":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
            os.symlink(recorded["target"], name, dir_fd=dir_fd)
            return
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=dir_fd)
        write_in_dir_fd(dir_fd, name, file_bytes(recorded), int(recorded["mode"], 8), recorded["uid"], recorded["gid"])
    finally:
        os.close(dir_fd)


def _run(runner: Runner, argv: List[str], result: RestoreResult) -> bool:
    rc, _, err = runner(argv)
    if rc != 0:
        why = "not installed" if rc is None else (err.strip().splitlines() or [f"exit {rc}"])[-1]
        result.errors.append(f"{' '.join(argv)}: {why}")
        return False
    return True


def _run_manager(runner: Runner, argv: List[str], result: RestoreResult) -> None:
    """Reloads of a manager the node does not run (no systemctl, no udevadm: a container or a
    minimal VM) are moot: the restored files are what it reads whenever it does start."""
    rc, _, err = runner(argv)
    if rc is None:
        result.left_alone.append(f"{' '.join(argv)}: {argv[0]} is not installed, nothing to reload")
    elif rc != 0:
        result.errors.append(f"{' '.join(argv)}: {(err.strip().splitlines() or [f'exit {rc}'])[-1]}")


def _reload(root: str, runner: Runner, what: str, result: RestoreResult) -> None:
    if what == "systemd-daemon-reload":
        _run_manager(runner, ["systemctl", "daemon-reload"], result)
    elif what == "systemd-daemon-reexec":
        _run_manager(runner, ["systemctl", "daemon-reexec"], result)
    elif what == "udev-reload":
        _run_manager(runner, ["udevadm", "control", "--reload"], result)
    elif what == "grub-mkconfig":
        # The kernel command line only changes at the next boot.
        result.reboot_required = True
        rc, _, _ = runner(["update-grub"])
        if rc is None:
            target = "/boot/grub2/grub.cfg"
            if os.path.isdir(on_node(root, "/boot/grub2")):
                _run(runner, ["grub2-mkconfig", "-o", target], result)
            else:
                result.errors.append("GRUB defaults were restored but neither update-grub nor /boot/grub2 exists: "
                                     "regenerate the boot configuration by hand")
        elif rc != 0:
            result.errors.append(f"update-grub: exit {rc}")


def restore(root: str, ledger: dict, runner: Runner, check_mode: bool = False) -> RestoreResult:
    """Bring every recorded path, file and service back; in check mode only say what would change."""
    result = RestoreResult()
    down_cmds, up_cmds = [], []
    for name, recorded in sorted(ledger.get("services", {}).items()):
        current = service_state(runner, name)
        down, up = _service_commands(name, recorded, current)
        if down or up:
            result.changes.append({"kind": "service", "target": name, "before": current,
                                   "after": {k: recorded.get(k) for k in ("enabled", "active")}})
        down_cmds += down
        up_cmds += up

    changed_files = []
    for path, recorded in sorted(ledger.get("files", {}).items()):
        current = snapshot_file(root, path)
        if not same_file(recorded, current):
            changed_files.append(path)
            result.changes.append({"kind": "file", "target": path, "before": current["state"],
                                   "after": recorded["state"]})

    path_writes = []
    for path, recorded in sorted(ledger.get("paths", {}).items()):
        if not recorded.get("exists", True):
            continue  # nothing was there to restore (a device or interface that came later)
        try:
            current = read_live_value(root, path)
        except LedgerError as exc:
            result.errors.append(str(exc))
            continue
        if current is None:
            result.left_alone.append(f"{path}: recorded {recorded['value']!r}, but the file no longer exists")
        elif not same_value(recorded["value"], current):
            path_writes.append((path, recorded["value"]))
            result.changes.append({"kind": "path", "target": path, "before": current, "after": recorded["value"]})
    module_cmds = []
    for name, recorded in sorted(ledger.get("kernel_modules", {}).items()):
        loaded_now = module_loaded(root, name)
        if recorded.get("loaded") != loaded_now:
            module_cmds.append(["modprobe", name] if recorded.get("loaded") else ["modprobe", "-r", name])
            result.changes.append({"kind": "kernel_module", "target": name,
                                   "before": "loaded" if loaded_now else "not loaded",
                                   "after": "loaded" if recorded.get("loaded") else "not loaded"})
    result.reloads = _reloads_for(changed_files)
    if check_mode:
        if "grub-mkconfig" in result.reloads:
            result.reboot_required = True
        return result

    for argv in down_cmds:
        _run(runner, argv, result)
    for path in changed_files:
        try:
            _restore_file(root, path, ledger["files"][path])
        except OSError as exc:
            result.errors.append(f"{path}: cannot restore ({exc.strerror})")
    for what in result.reloads:
        _reload(root, runner, what, result)
    for path, value in path_writes:
        try:
            write_live_value(root, path, value)
        except OSError as exc:
            result.errors.append(f"{path}: writing back {value!r} failed ({exc.strerror})")
    # Units that used a module are stopped by now; units that load one are not started yet.
    for argv in module_cmds:
        _run(runner, argv, result)
    for argv in up_cmds:
        _run(runner, argv, result)
    return result


def archive_ledger(root: str, ledger_path: str, when: str = "") -> str:
    """Move the ledger aside so the next apply records the restored state afresh."""
    stamp = (when or utc_now()).replace(":", "").replace("-", "")
    base, ext = os.path.splitext(ledger_path)
    target = f"{base}.restored-{stamp}{ext}"
    dir_fd = open_root_dir(on_node(root, os.path.dirname(ledger_path)))
    try:
        os.rename(os.path.basename(ledger_path), os.path.basename(target), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    return target
