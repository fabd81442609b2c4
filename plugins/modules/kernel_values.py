#!/usr/bin/python
# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import contextlib
import errno
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import (
    DIRECTION_NAMES,
    EXACT,
    normalise_value,
    parse_choices,
    parse_cpulist,
    settle,
)
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.ledger_core import (
    DEFAULT_LEDGER_PATH,
    LedgerError,
    make_dirs,
    module_loaded,
    record,
    remove_in_root_dir,
    snapshot_file,
    write_file_atomically,
)
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.module_guard import failing_cleanly

DOCUMENTATION = r"""
---
module: kernel_values
short_description: Write live kernel values (/proc/sys, /sys, /proc/irq) all-or-nothing, with honest check and diff
description:
  - Reads every given path first; fails naming each path that is missing, and each I/O scheduler
    that the device does not offer, before writing anything.
  - Writes only the values that differ, reads each one back, and on any refused or ignored
    write puts back the values it already changed, so a node is never left half-tuned.
  - Compares the way the kernel prints each file, so a second run reports no change
    (whitespace in C(/proc/sys) triples, the bracketed I/O scheduler, CPU lists such as C(0-3) vs C(0,1,2,3)).
  - In check mode nothing is written; the result and the diff say what would change, from what to what.
  - With O(recorded_by), this one call is a whole role's work (one module call per role instead
    of a task per step) - refuse the problems the controller found, plan the live values and
    the owned O(files), record what they were in the ledger the first time, apply, read back, and
    return one diff per changed value set and file.
options:
  values:
    description: Absolute path -> wanted value (string or integer).
    type: dict
    required: true
  directions:
    description:
      - Path -> C(at_least), C(at_most) or C(exact) (the default for a path not given). An
        C(at_least) value is raised only where the node is below it, field by field for multi-value
        files (tcp_rmem C(min default max)), where a field of the node above the wanted one stays, so
        tuning never lowers a value the node already has higher; C(at_most) the other way round.
        A value kept this way is neither changed, nor in the diff, nor recorded in the ledger; it is
        returned under C(kept), and C(in_force) says what each path holds after the call.
      - The kernel_rules module of this collection names each key's direction (C(DIRECTIONS)).
    type: dict
    default: {}
  tolerate_eio:
    description:
      - Report writes refused with EIO under C(refused) instead of failing. The kernel answers EIO
        for IRQs whose affinity it manages itself; nothing can pin those.
    type: bool
    default: false
  labels:
    description:
      - Path -> the name the user gave it (e.g. the role variable and key), put in front of any
        error about that path, so a refusal names the variable and not only the /proc path.
    type: dict
    default: {}
  files:
    description:
      - Owned config files, each C(path) with its C(content) (usually a template lookup rendered on the
        controller) and C(mode) (default C(0644)), or C(state=absent) to remove it. Written atomically
        as root:root after the live values, creating missing parent directories (0755); a symlink in
        their place is replaced, never followed.
      - C(persist_values) (a dict, name -> path of O(values)) appends one line C(name = value) per
        entry to C(content), in the order given, the value being what the path holds after the call
        (the node's own where O(directions) kept it), so a reboot does not lower it either.
    type: list
    elements: dict
    default: []
  recorded_by:
    description:
      - When set, every path of O(values) and O(files) is recorded in the ledger (first-seen state,
        what C(playbooks/restore.yml) puts back) after everything is validated and before anything
        is written; the role name is stored with the entries.
    type: str
    default: ""
  ledger_path:
    description: Where the ledger lives on the node.
    type: path
    default: /var/lib/tunefleet/ledger.json
  units:
    description:
      - systemd units the role owns, each C(name) with C(state=enabled) (enabled and started after the
        files are written, with a daemon-reload first when a file under C(/etc/systemd/) changed) or
        C(state=absent) (stopped and disabled before its files are removed). Without systemd as the
        service manager they are left alone, with a warning.
      - C(restart_when_changed) lists paths of O(files) whose change must reach a running unit (a new
        C(ExecStart)); the unit is restarted when one of them changed and it was already running.
      - C(start=false) only enables the unit (for the next boot), for a boot unit that re-applies
        values this call has already set live.
    type: list
    elements: dict
    default: []
  record_also:
    description:
      - With O(recorded_by), more C(paths), C(files) and C(services) to record in the ledger in the same
        step, for the role's later tasks that change them (this call is the role's first change, so
        everything is recorded before anything is written).
    type: dict
    default: {}
  kernel_modules:
    description:
      - Kernel modules to load now (C(modprobe)), after the files are written; recorded in the
        ledger with O(recorded_by), so C(playbooks/restore.yml) unloads one that was not loaded before.
    type: list
    elements: str
    default: []
  refuse:
    description:
      - Problems the controller found in the role's variables (each naming the variable); any at all
        fails the call before anything is read or written.
    type: list
    elements: str
    default: []
author:
  - tunefleet developers
"""

EXAMPLES = r"""
- name: Set read-ahead and scheduler of nvme0n1
  tunefleet.gpu_node.kernel_values:
    values:
      /sys/block/nvme0n1/queue/scheduler: none
      /sys/block/nvme0n1/queue/read_ahead_kb: 4096
"""

RETURN = r"""
changes:
  description: One entry per path whose value changed (or would change in check mode).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/proc/sys/vm/swappiness", "before": "60", "after": "0"}]
refused:
  description: Paths whose write the kernel refused with EIO (only with I(tolerate_eio)).
  returned: always
  type: list
  elements: str
kept:
  description: Paths whose node value is already past the wanted one in its O(directions) (not changed, not recorded).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/proc/sys/vm/max_map_count", "node": "8249672", "wanted": "262144", "in_force": "8249672"}]
in_force:
  description: Path -> the value it holds after the call (or would hold, in check mode).
  returned: always
  type: dict
files_changed:
  description: Paths of O(files) that were written or removed (or would be in check mode).
  returned: always
  type: list
  elements: str
units_changed:
  description: Units enabled, started, restarted, stopped or disabled (or that would be), each with before and after.
  returned: always
  type: list
  elements: dict
modules_loaded:
  description: Kernel modules of O(kernel_modules) that were loaded (or would be in check mode).
  returned: always
  type: list
  elements: str
recorded:
  description: Entries new to the ledger in this call, per section (empty without O(recorded_by)).
  returned: always
  type: dict
"""


class KernelValueError(Exception):
    """A value that cannot be applied; the message names the path and the reason."""


# Files that print a menu with the active choice bracketed (`[mq-deadline] none`, `always [madvise] never`);
# a write selects one of the offered words.
THP_DIR = "/sys/kernel/mm/transparent_hugepage/"


def _kind(path: str) -> str:
    name = os.path.basename(path)
    if name == "scheduler":
        return "scheduler"
    if path.startswith(THP_DIR) and name in ("enabled", "defrag", "shmem_enabled"):
        return "choice"
    if name.endswith("_list") or name.endswith("cpulist"):
        return "cpulist"
    return "plain"


def current_value(path: str, raw: str) -> str:
    """The value as it should be compared and reported (the selected scheduler, not the menu)."""
    if _kind(path) in ("scheduler", "choice"):
        active, _ = parse_choices(raw)
        return raw.strip() if active is None else active
    return normalise_value(raw)


def offered_schedulers(raw: str) -> list:
    return parse_choices(raw)[1]


def same_value(path: str, current: str, wanted: str) -> bool:
    if _kind(path) == "cpulist":
        try:
            return parse_cpulist(current) == parse_cpulist(wanted)
        except ValueError:
            return False
    return current == normalise_value(wanted)


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as handle:
        return handle.read()


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def plan(values: dict, directions: dict = None) -> tuple:
    """Read every path, validate every value; return (changes, errors) without writing anything."""
    changes, _, _, errors = plan_values(values, directions)
    return changes, errors


def plan_values(values: dict, directions: dict = None) -> tuple:
    """(changes, kept, in_force, errors): what to write, what the node already has better, and what
    every path holds afterwards; reads only."""
    changes, kept, in_force, errors = [], [], {}, []
    directions = directions or {}
    for path, direction in sorted(directions.items()):
        if direction not in DIRECTION_NAMES:
            errors.append(f"{path}: direction {direction!r} is not one of {', '.join(DIRECTION_NAMES)}")
        elif path not in values:
            errors.append(f"{path}: has a direction but no value")
    for path, wanted in sorted(values.items()):
        if isinstance(wanted, bool) or not isinstance(wanted, (str, int)):
            errors.append(f"{path}: value {wanted!r} must be a string or an integer, not {type(wanted).__name__}")
            continue
        wanted = normalise_value(wanted)
        if not os.path.isabs(path):
            errors.append(f"{path}: not an absolute path")
            continue
        try:
            raw = _read(path)
        except OSError as exc:
            errors.append(f"{path}: cannot read ({exc.strerror})")
            continue
        if _kind(path) in ("scheduler", "choice") and wanted not in offered_schedulers(raw):
            what = "scheduler" if _kind(path) == "scheduler" else "mode"
            errors.append(f"{path}: {what} {wanted!r} is not offered (offered: {' '.join(offered_schedulers(raw))})")
            continue
        if _kind(path) == "cpulist":
            try:
                parse_cpulist(wanted)
            except ValueError as exc:
                errors.append(f"{path}: {wanted!r} is not a CPU list ({exc})")
                continue
        before = current_value(path, raw)
        direction = directions.get(path, EXACT)
        settled = settle(direction, before, wanted) if _kind(path) == "plain" else wanted
        in_force[path] = before if same_value(path, before, settled) else settled
        if settled != wanted:
            kept.append({"path": path, "node": before, "wanted": wanted, "in_force": settled})
        if not same_value(path, before, settled):
            changes.append({"path": path, "before": before, "after": settled})
    return changes, kept, in_force, errors


def apply(changes: list, tolerate_eio: bool = False) -> list:
    """Write each change and read it back; on failure put back what was written, then raise."""
    written, refused = [], []
    for change in changes:
        path = change["path"]
        try:
            _write(path, change["after"])
        except OSError as exc:
            if tolerate_eio and exc.errno == errno.EIO:
                refused.append(path)
                continue
            _undo(written)
            raise KernelValueError(
                f"{path}: the kernel refused {change['after']!r} ({exc.strerror}); "
                f"{len(written)} value(s) written before it were put back"
            ) from exc
        written.append(change)
        observed = current_value(path, _read(path))
        if not same_value(path, observed, change["after"]):
            _undo(written)
            raise KernelValueError(
                f"{path}: wrote {change['after']!r} but the kernel kept {observed!r}; "
                f"all {len(written)} value(s) written in this task were put back"
            )
    return refused


def _undo(written: list) -> None:
    for change in reversed(written):
        # best effort: the error that triggered the undo is the one to report
        with contextlib.suppress(OSError):
            _write(change["path"], change["before"])


FILE_STATES = ("present", "absent")


def plan_files(files: list) -> tuple:
    """Each owned file against what is on disk: (changes, errors); reads only."""
    changes, errors = [], []
    for spec in files:
        path, state = spec.get("path"), spec.get("state", "present")
        if not isinstance(path, str) or not os.path.isabs(path) or os.path.normpath(path) != path:
            errors.append(f"{path}: files[].path must be a normalised absolute path")
            continue
        if state not in FILE_STATES:
            errors.append(f"{path}: state {state!r} is not one of {', '.join(FILE_STATES)}")
            continue
        content, mode = spec.get("content"), str(spec.get("mode", "0644"))
        if state == "present" and not isinstance(content, str):
            errors.append(f"{path}: no content (a string) to write")
            continue
        if state == "present" and not (len(mode) in (3, 4) and all(c in "01234567" for c in mode)):
            errors.append(f"{path}: mode {mode!r} is not an octal mode")
            continue
        try:
            current = snapshot_file("/", path)
        except LedgerError as exc:
            errors.append(str(exc))
            continue
        before = current.get("content", "") if current["state"] == "file" and current.get("encoding") == "utf-8" else ""
        if state == "absent":
            if current["state"] != "absent":
                changes.append({"path": path, "state": "absent", "before": before, "after": "",
                                "before_mode": current.get("mode", "")})
            continue
        wanted = {"state": "file", "content": content, "mode": f"{int(mode, 8):04o}", "uid": 0, "gid": 0}
        if any(current.get(key) != value for key, value in wanted.items()):
            changes.append({"path": path, "state": "present", "before": before, "after": content,
                            "before_mode": current.get("mode", ""), "mode": wanted["mode"]})
    return changes, errors


def with_persisted_values(files: list, in_force: dict, values: dict) -> tuple:
    """The files with their persist_values lines appended (the values in force), and the errors."""
    done, errors = [], []
    for spec in files:
        lines = spec.get("persist_values") if isinstance(spec, dict) else None
        if not lines:
            done.append(spec)
            continue
        if not isinstance(lines, dict) or not isinstance(spec.get("content", ""), str):
            errors.append(f"{spec.get('path')}: persist_values must be a mapping of name to a path of values")
            continue
        unknown = [path for path in lines.values() if path not in values]
        if unknown:
            errors.append(f"{spec.get('path')}: persist_values names {', '.join(map(str, unknown))}, not in values")
            continue
        head = spec.get("content", "")
        if head and not head.endswith("\n"):  # a template lookup may drop its last newline
            head += "\n"
        content = head + "".join(
            f"{name} = {in_force.get(path, normalise_value(values[path]))}\n" for name, path in lines.items())
        done.append(dict({k: v for k, v in spec.items() if k != "persist_values"}, content=content))
    return done, errors


def apply_files(changes: list) -> None:
    for change in changes:
        path = change["path"]
        if change["state"] == "absent":
            remove_in_root_dir(path)
            continue
        # Missing directories made 0755 by descriptor from / (ledger_core.open_root_dir: no user's link followed).
        make_dirs(os.path.dirname(path), 0o755)
        write_file_atomically(path, change["after"].encode("utf-8"), int(change["mode"], 8), 0, 0)


def file_diffs(changes: list) -> list:
    return [{"before_header": f"{c['path']} ({c['before_mode'] or 'absent'})",
             "after_header": f"{c['path']} ({c.get('mode') or 'absent'})",
             "before": c["before"], "after": c["after"]} for c in changes]


UNIT_STATES = ("enabled", "absent")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9@._:-]+\.(service|timer|socket|path)$")
_KERNEL_MODULE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def unit_problems(units: list) -> list:
    return [f"units: {unit!r} needs a unit name (e.g. x.service) and state enabled or absent"
            for unit in units
            if not isinstance(unit.get("name"), str) or not _UNIT_NAME.match(unit["name"])
            or unit.get("state", "enabled") not in UNIT_STATES
            or not isinstance(unit.get("restart_when_changed", []), list)
            or not isinstance(unit.get("start", True), bool)]


def kernel_module_problems(names: list) -> list:
    return [f"kernel_modules: {name!r} is not a kernel module name" for name in names if not _KERNEL_MODULE.match(name)]


def unit_state(run, name: str) -> dict:
    """systemctl's own words (enabled/disabled/not-found, active/inactive), as the ledger records them."""
    _, enabled, _ = run(["systemctl", "is-enabled", name])
    _, active, _ = run(["systemctl", "is-active", name])
    return {"enabled": (enabled.strip().splitlines() or ["not-found"])[0],
            "active": (active.strip().splitlines() or ["unknown"])[0]}


def unit_steps(unit: dict, state: dict, changed_files: frozenset = frozenset()) -> list:
    """The systemctl verbs that bring one unit where it should be (empty when it is there)."""
    if unit.get("state", "enabled") == "absent":
        return ["disable", "stop"] if state["enabled"] == "enabled" or state["active"] == "active" else []
    running = state["active"] == "active"
    restart = running and bool(changed_files.intersection(unit.get("restart_when_changed", [])))
    start = [] if not unit.get("start", True) else ["restart"] if restart else [] if running else ["start"]
    return ([] if state["enabled"] == "enabled" else ["enable"]) + start


def unit_text(changes: list, side: str) -> str:
    return "".join(f"{c['name']}: enabled={c[side]['enabled']} active={c[side]['active']}\n" for c in changes)


def diff_text(changes: list, side: str) -> str:
    return "".join(f"{change['path']} = {change[side]}\n" for change in changes)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "values": {"type": "dict", "required": True},
            "tolerate_eio": {"type": "bool", "default": False},
            "directions": {"type": "dict", "default": {}},
            "labels": {"type": "dict", "default": {}},
            "files": {"type": "list", "elements": "dict", "default": []},
            "recorded_by": {"type": "str", "default": ""},
            "ledger_path": {"type": "path", "default": DEFAULT_LEDGER_PATH},
            "refuse": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "dict", "default": []},
            "kernel_modules": {"type": "list", "elements": "str", "default": []},
            "record_also": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    with failing_cleanly(module, "tunefleet.gpu_node.kernel_values"):
        p = module.params
        if p["refuse"]:
            module.fail_json(msg="nothing was changed: " + "; ".join(p["refuse"]), errors=p["refuse"])
        changes, kept, in_force, errors = plan_values(p["values"], p["directions"])
        files, persist_errors = with_persisted_values(p["files"], in_force, p["values"])
        file_changes, file_errors = plan_files(files)
        file_errors = persist_errors + file_errors
        labels = p["labels"]

        def named(text: str) -> str:  # every error starts with its path
            label = labels.get(text.split(": ", 1)[0])
            return f"{label}: {text}" if label else text

        also = p["record_also"]
        also_problems = [f"record_also: {key!r} must be a list of strings (paths, files or services)"
                         for key, value in also.items()
                         if key not in ("paths", "files", "services")
                         or not isinstance(value, list) or not all(isinstance(item, str) for item in value)]
        errors = ([named(error) for error in errors] + file_errors + unit_problems(p["units"])
                  + kernel_module_problems(p["kernel_modules"]) + also_problems)
        if errors:
            module.fail_json(msg="nothing was changed: " + "; ".join(errors), errors=errors)
        systemd = os.path.isdir("/run/systemd/system") and module.get_bin_path("systemctl") is not None

        def run(argv: list) -> tuple:
            if not systemd:
                return None, "", "not systemd"
            return module.run_command(argv)

        def systemctl(verb: str, name: str = "") -> None:
            rc, out, err = module.run_command(["systemctl", verb] + ([name] if name else []))
            if rc != 0:
                module.fail_json(msg=f"systemctl {verb} {name}: {(err or out).strip()} (exit {rc})", recorded=recorded,
                                 files_changed=[c["path"] for c in file_changes])

        units = p["units"] if systemd else []
        wanted = [u["name"] for u in p["units"] if u.get("state", "enabled") == "enabled"]
        if wanted and not systemd and not module.check_mode:  # check mode: the diff shows the unit file
            module.warn("the service manager here is not systemd: " + ", ".join(wanted)
                        + " written but not enabled, so the setting is not applied again at boot")
        recorded = {}
        if p["recorded_by"]:
            # After validation (a refused input leaves no ledger), before the first write.
            try:
                # A value the node already has better is not touched, so restore has nothing to put back.
                untouched = {k["path"] for k in kept} - {c["path"] for c in changes}
                recorded = record("/", p["ledger_path"],
                                  [path for path in sorted(p["values"]) if path not in untouched]
                                  + also.get("paths", []),
                                  [f["path"] for f in p["files"]] + also.get("files", []),
                                  [u["name"] for u in p["units"]] + also.get("services", []), run,
                                  recorded_by=p["recorded_by"], check_mode=module.check_mode,
                                  kernel_modules=p["kernel_modules"])
            except (LedgerError, OSError) as exc:
                module.fail_json(msg=f"nothing was changed: ledger {p['ledger_path']}: {exc}")
        refused = []
        if changes and not module.check_mode:
            try:
                refused = apply(changes, p["tolerate_eio"])
            except KernelValueError as exc:
                module.fail_json(msg=named(str(exc)), recorded=recorded)
        unit_changes = []
        changed_files = frozenset(c["path"] for c in file_changes)
        for unit in units:
            before = unit_state(run, unit["name"])
            steps = unit_steps(unit, before, changed_files)
            if steps:
                enabling = unit.get("state", "enabled") == "enabled"
                active = ("active" if unit.get("start", True) else before["active"]) if enabling else "inactive"
                after = {"enabled": "enabled" if enabling else "disabled", "active": active}
                unit_changes.append({"name": unit["name"], "state": unit.get("state", "enabled"), "steps": steps,
                                     "before": before, "after": after})
        if not module.check_mode:  # stop before the unit file goes
            for change in unit_changes:
                if change["state"] == "absent":
                    for verb in change["steps"]:
                        systemctl(verb, change["name"])
        if file_changes and not module.check_mode:
            try:
                apply_files(file_changes)
            except OSError as exc:
                module.fail_json(msg=f"{exc.filename}: cannot be written ({exc.strerror}); "
                                 "the live values stay applied",
                                 recorded=recorded)
        if systemd and not module.check_mode and any(c["path"].startswith("/etc/systemd/") for c in file_changes):
            systemctl("daemon-reload")  # a drop-in for a unit this call does not manage (openibd) too
        if units and not module.check_mode:
            for change in unit_changes:
                if change["state"] == "enabled":
                    for verb in change["steps"]:
                        systemctl(verb, change["name"])
        modules_loaded = [name for name in p["kernel_modules"] if not module_loaded("/", name)]
        if modules_loaded and not module.check_mode:
            modprobe = module.get_bin_path("modprobe", opt_dirs=["/usr/sbin", "/sbin"], required=True)
            for name in modules_loaded:
                rc, out, err = module.run_command([modprobe, name])
                if rc != 0:
                    module.fail_json(msg=f"modprobe {name}: {(err or out).strip()} (exit {rc}); the files stay written",
                                     recorded=recorded, files_changed=[c["path"] for c in file_changes])
        applied = [change for change in changes if change["path"] not in refused]
        diffs = []
        if applied:
            diffs.append({"before_header": "live kernel values", "after_header": "live kernel values",
                          "before": diff_text(applied, "before"), "after": diff_text(applied, "after")})
        diffs.extend(file_diffs(file_changes))
        if unit_changes:
            diffs.append({"before_header": "systemd units", "after_header": "systemd units",
                          "before": unit_text(unit_changes, "before"), "after": unit_text(unit_changes, "after")})
        if modules_loaded:
            diffs.append({"before_header": "kernel modules", "after_header": "kernel modules", "before": "",
                          "after": "".join(f"{name} loaded\n" for name in modules_loaded)})
        module.exit_json(
            changed=bool(applied) or bool(file_changes) or bool(unit_changes) or bool(modules_loaded)
            or any(recorded.values()),
            units_changed=unit_changes,
            modules_loaded=modules_loaded,
            changes=applied,
            kept=kept,
            in_force=in_force,
            refused=refused,
            files_changed=[c["path"] for c in file_changes],
            recorded=recorded,
            diff=diffs[0] if len(diffs) == 1 else diffs,
        )


if __name__ == "__main__":
    main()
