#!/usr/bin/python
"""tunefleet.gpu_node.reboot_marker: record why a node needs a reboot, or clear a marker it has rebooted past."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: reboot_marker
short_description: Write, keep or remove the marker naming why a node needs a reboot
description:
  - One call does what the reboot role needs on every run (issue 13; it replaces two reads, a directory
    task, a copy and a removal). Reads this boot's id (C(/proc/sys/kernel/random/boot_id)) and an
    earlier marker, a JSON object with C(reasons) (a list) and C(boot_id).
  - With O(reasons), writes the marker naming them and this boot's id. Its directory (the ledger's,
    C(/var/lib/tunefleet) by default) is made 0700, owned by root; the file is 0600, written atomically,
    and a symlink at O(path) is replaced, never followed. Nothing changes when the marker already says so.
  - Without O(reasons), removes a marker written in an earlier boot (the reboot it asked for happened),
    or any marker when O(forget_earlier) is true; a marker from this boot is kept, because the change
    that needs the reboot was made by an earlier run.
  - A marker that cannot be read or parsed (or a symlink) counts as an earlier run's marker whose boot is
    unknown, so it is replaced or removed; the result says so in C(earlier_problem).
  - Check mode changes nothing and reports what would change, with a diff of the marker text.
version_added: "0.1.0"
options:
  path:
    description: The marker file on the node (the reboot role's C(reboot_marker_path)).
    type: path
    default: /var/lib/tunefleet/reboot-required
  reasons:
    description: Why this run needs a reboot, each as C(<role> - <reason>) text; empty when nothing in this run does.
    type: list
    elements: str
    default: []
  forget_earlier:
    description: With no O(reasons), remove a marker from this boot too (C(playbooks/restore.yml) sets it).
    type: bool
    default: false
  read_only:
    description:
      - Only read the marker (the reboot role's check before rebooting) and return O(path)'s state and reasons in
        RV(present) and RV(reasons); nothing is written. The marker's directory is walked by descriptor as for a
        write, so a path through another user's symlink is refused and a marker that is a link is never read.
    type: bool
    default: false
  root:
    description: Tree holding C(/proc) and O(path); only tests change it.
    type: path
    default: /
author: tunefleet developers
"""

EXAMPLES = r"""
- name: Record why this node needs a reboot, or clear a marker it has rebooted past
  tunefleet.gpu_node.reboot_marker:
    path: /var/lib/tunefleet/reboot-required
    reasons:
      - "memory: 1 GiB huge pages are reserved on the kernel command line"
  register: marker
"""

RETURN = r"""
present:
  description: With O(read_only), whether a marker is there.
  returned: when read_only
  type: bool
reasons:
  description: With O(read_only), the marker's reasons (a marker without readable reasons gives one generic reason).
  returned: when read_only
  type: list
  elements: str
pending:
  description: Why a reboot is still needed - this run's reasons, else a kept marker's from this boot, else empty.
  returned: always
  type: list
  elements: str
path:
  description: The marker file.
  returned: always
  type: str
action:
  description: What was done to the marker (or would be, in check mode).
  returned: always
  type: str
  choices: [written, unchanged, removed, kept, none]
boot_id:
  description: This boot's id.
  returned: always
  type: str
earlier_marker:
  description: The marker found before this call.
  returned: always
  type: str
  choices: [absent, this_boot, earlier_boot, unknown_boot]
earlier_problem:
  description: Why the earlier marker could not be used (unreadable, not JSON, a symlink...), when it could not.
  returned: when earlier_marker is unknown_boot
  type: str
"""

import errno  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import List, Optional  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.ledger_core import (  # noqa: E402
    LedgerError,
    on_node,
    open_root_dir,
    write_in_dir_fd,
)
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.module_guard import failing_cleanly  # noqa: E402

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
# A marker holds a few short reasons; anything far bigger is not one of ours.
MAX_MARKER_BYTES = 64 * 1024
# What a kept marker without reasons stands for (the wording of the role before this module).
UNNAMED_REASON = "an earlier run"


class MarkerError(Exception):
    """Bad input or a node this module must not touch; the message names the path and the problem."""


@dataclass
class Earlier:
    """The marker found on the node before this call."""

    present: bool
    text: str = ""  # its content, for the diff ("" when absent or not readable)
    boot_id: Optional[str] = None  # None: unknown (unreadable, corrupt or a symlink)
    reasons: Optional[List[str]] = None
    problem: str = ""
    file_ok: bool = False  # a regular 0600 file owned as wanted, so same text means nothing to do


def marker_text(reasons: List[str], boot_id: str) -> str:
    """Byte for byte what the role wrote with to_nice_json, so existing markers stay unchanged."""
    return json.dumps({"reasons": reasons, "boot_id": boot_id}, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def wanted_owner() -> Optional[tuple]:
    """root:root when running as root (always, on a node); tests running unprivileged keep their own."""
    return (0, 0) if os.geteuid() == 0 else None


def read_boot_id(root: str) -> str:
    try:
        with open(on_node(root, BOOT_ID_PATH), encoding="ascii") as handle:
            boot_id = handle.read(256).strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise MarkerError(f"{BOOT_ID_PATH} cannot be read ({getattr(exc, 'strerror', None) or exc}): "
                          "without this boot's id a marker cannot be dated") from None
    if not boot_id:
        raise MarkerError(f"{BOOT_ID_PATH} is empty: without this boot's id a marker cannot be dated")
    return boot_id


def parse_marker(text: str) -> tuple:
    """(boot_id, reasons, problem) of a marker's text; boot_id None when it cannot be trusted."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, None, f"not JSON ({str(exc)[:80]})"
    except RecursionError:  # a marker is one flat object; a deeply nested one is damaged, not ours
        return None, None, "nested too deeply to be a marker"
    if not isinstance(data, dict):
        return None, None, "not a JSON object"
    boot_id = data.get("boot_id", "")  # the role's default('') for a marker without one
    reasons = data.get("reasons")
    if not isinstance(boot_id, str):
        return None, None, f"boot_id is {boot_id!r}, not a string"
    if reasons is not None and not (isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)):
        return None, None, "reasons is not a list of strings"
    return boot_id, reasons, ""


def read_marker(root: str, path: str) -> Earlier:
    where = on_node(root, path)
    name = os.path.basename(where)
    try:
        # The directory by descriptor from / (ledger_core.open_root_dir): a user's link on the way is refused.
        dir_fd = open_root_dir(os.path.dirname(where))
    except FileNotFoundError:
        return Earlier(present=False)
    except LedgerError as exc:
        raise MarkerError(f"reboot_marker_path {exc}") from None
    try:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return Earlier(present=False)
        except OSError as exc:
            raise MarkerError(f"reboot_marker_path {path}: cannot be examined ({exc.strerror})") from None
        if stat.S_ISLNK(info.st_mode):
            # Reading through it as root could disclose any file; it is replaced or removed instead.
            target = os.readlink(name, dir_fd=dir_fd)
            return Earlier(present=True, problem=f"is a symlink (to {target!r}), not followed")
        if not stat.S_ISREG(info.st_mode):
            raise MarkerError(f"reboot_marker_path {path}: is not a regular file (a directory?); "
                              "nothing was changed; move it aside")
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            with os.fdopen(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                raw = handle.read(MAX_MARKER_BYTES + 1)
        except OSError as exc:
            return Earlier(present=True, problem=f"cannot be read ({exc.strerror})")
    finally:
        os.close(dir_fd)
    if len(raw) > MAX_MARKER_BYTES:
        return Earlier(present=True, problem=f"is larger than {MAX_MARKER_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Earlier(present=True, text=raw.decode("utf-8", errors="replace"), problem="is not UTF-8 text")
    boot_id, reasons, problem = parse_marker(text)
    owner = wanted_owner()
    file_ok = stat.S_IMODE(info.st_mode) == 0o600 and (owner is None or (info.st_uid, info.st_gid) == owner)
    return Earlier(present=True, text=text, boot_id=boot_id, reasons=reasons, problem=problem, file_ok=file_ok)


def earlier_state(earlier: Earlier, boot_id: str) -> str:
    if not earlier.present:
        return "absent"
    if earlier.boot_id is None:
        return "unknown_boot"
    return "this_boot" if earlier.boot_id == boot_id else "earlier_boot"


def ensure_directory(directory: str, check_mode: bool) -> bool:
    """The marker's directory: root-only (0700, root:root) whether created here or found. True if changed.
    Walked by descriptor from / (ledger_core.open_root_dir), so a user's link to a root directory is refused
    instead of that directory being chmod-ed; mode and owner are set on the descriptor."""
    owner = wanted_owner()
    try:
        fd = open_root_dir(directory, create=not check_mode)
    except FileNotFoundError:
        return True  # check mode: it would be made
    except NotADirectoryError:
        raise MarkerError(f"{directory}: is not a directory, so reboot_marker_path cannot be written there") from None
    except LedgerError as exc:
        raise MarkerError(f"reboot_marker_path: {exc}") from None
    try:
        info = os.fstat(fd)
        changed = False
        if stat.S_IMODE(info.st_mode) != 0o700:
            changed = True
            if not check_mode:
                os.fchmod(fd, 0o700)
        if owner is not None and (info.st_uid, info.st_gid) != owner:
            changed = True
            if not check_mode:
                os.fchown(fd, *owner)
    finally:
        os.close(fd)
    return changed


def apply(root: str, path: str, reasons: List[str], forget_earlier: bool, check_mode: bool) -> dict:
    """Plan and (unless check_mode) do what the reboot role's run needs; the module's whole result."""
    try:
        where = on_node(root, path)
    except LedgerError as exc:
        raise MarkerError(f"reboot_marker_path {exc}") from None
    boot_id = read_boot_id(root)
    earlier = read_marker(root, path)
    found = earlier_state(earlier, boot_id)
    result = {"path": path, "boot_id": boot_id, "earlier_marker": found}
    if earlier.problem:
        result["earlier_problem"] = f"{path} {earlier.problem}: treated as a marker from an unknown earlier boot"
    after = earlier.text
    if reasons:
        after = marker_text(reasons, boot_id)
        same = earlier.boot_id is not None and earlier.text == after and earlier.file_ok
        directory_changed = ensure_directory(os.path.dirname(where), check_mode)
        if not same and not check_mode:
            dir_fd = open_root_dir(os.path.dirname(where))
            try:
                write_in_dir_fd(dir_fd, os.path.basename(where), after.encode("utf-8"), 0o600,
                                *(wanted_owner() or (None, None)))
            finally:
                os.close(dir_fd)
        changed, action, pending = directory_changed or not same, ("unchanged" if same else "written"), list(reasons)
    elif found == "absent":
        changed, action, pending = False, "none", []
    elif found == "this_boot" and not forget_earlier:
        changed, action, pending = False, "kept", list(earlier.reasons or [UNNAMED_REASON])
    else:
        after, changed, action, pending = "", True, "removed", []
        if not check_mode:
            try:
                dir_fd = open_root_dir(os.path.dirname(where))
                try:
                    os.unlink(os.path.basename(where), dir_fd=dir_fd)  # a symlink itself, never its target
                finally:
                    os.close(dir_fd)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise MarkerError(f"reboot_marker_path {path}: cannot be removed ({exc.strerror})") from None
    result.update(changed=changed, action=action, pending=pending)
    if changed:
        result["diff"] = {"before": earlier.text, "after": after, "before_header": path, "after_header": path}
    return result


def read_only(root: str, path: str) -> dict:
    """What the reboot role needs before rebooting: whether a marker is there and its reasons (never written)."""
    earlier = read_marker(root, path)
    reasons = list(earlier.reasons or []) or ([UNNAMED_REASON] if earlier.present else [])
    result = {"changed": False, "path": path, "present": earlier.present, "reasons": reasons}
    if earlier.problem:
        result["earlier_problem"] = f"{path} {earlier.problem}"
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/var/lib/tunefleet/reboot-required"},
            "reasons": {"type": "list", "elements": "str", "default": []},
            "forget_earlier": {"type": "bool", "default": False},
            "read_only": {"type": "bool", "default": False},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    with failing_cleanly(module, "tunefleet.gpu_node.reboot_marker"):
        p = module.params
        try:
            if p["read_only"]:
                module.exit_json(**read_only(p["root"], p["path"]))
            result = apply(p["root"], p["path"], p["reasons"], p["forget_earlier"], module.check_mode)
        except MarkerError as exc:
            module.fail_json(msg=str(exc))
        except OSError as exc:
            module.fail_json(msg=f"reboot_marker_path {p['path']}: {exc.strerror or exc} ({exc.filename or ''})")
        if not module._diff:
            result.pop("diff", None)
        module.exit_json(**result)


if __name__ == "__main__":
    main()
