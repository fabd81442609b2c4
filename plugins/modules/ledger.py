#!/usr/bin/python
"""tunefleet.gpu_node.ledger: remember what a node looked like before tunefleet, and put it back."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: ledger
short_description: Record first-seen node state before tuning, and restore it
description:
  - With O(state=recorded) (what every tuning role calls before it changes anything), reads each
    live kernel value, config file and service named and stores it in a root-only JSON ledger on the
    node, the first time it is seen. An entry already in the ledger is never overwritten, so the
    ledger always holds the state from before the first apply.
  - With O(state=restored) (what C(playbooks/restore.yml) calls), writes every recorded kernel value
    back, restores or removes every recorded file, returns services to their recorded state, reloads
    systemd/udev/GRUB where files they read changed, and then moves the ledger aside.
  - The ledger is written atomically (temporary file, fsync, rename) in a 0700 directory, mode 0600.
version_added: "0.1.0"
options:
  state:
    description: V(recorded) adds first-seen state; V(restored) puts it back.
    type: str
    choices: [recorded, restored]
    default: recorded
  paths:
    description:
      - Live kernel files under C(/proc/) or C(/sys/). For files that list choices with the active one
        in brackets (C([mq-deadline] none)) the active choice is recorded.
    type: list
    elements: str
    default: []
  files:
    description:
      - Config files about to be written or removed; content, mode and owner are recorded, or that the file was absent.
    type: list
    elements: str
    default: []
  services:
    description: systemd units whose enabled and active state are recorded.
    type: list
    elements: str
    default: []
  kernel_modules:
    description:
      - Kernel modules about to be loaded (or unloaded); whether each was loaded is recorded, and restore
        unloads (C(modprobe -r)) a module that was not loaded before, or loads one that was.
    type: list
    elements: str
    default: []
  recorded_by:
    description: Role name stored with each new entry, for people reading the ledger.
    type: str
    default: ""
  ledger_path:
    description: Where the ledger lives on the node.
    type: path
    default: /var/lib/tunefleet/ledger.json
  archive:
    description: With O(state=restored), move the ledger aside after a restore without errors.
    type: bool
    default: true
  root:
    description: Tree holding C(/proc), C(/sys) and C(/etc); only tests change it.
    type: path
    default: /
author: tunefleet developers
"""

EXAMPLES = r"""
- name: Remember the values the sysctl role is about to change
  tunefleet.gpu_node.ledger:
    paths:
      - /proc/sys/net/core/rmem_max
    files:
      - /etc/sysctl.d/90-tunefleet.conf
    recorded_by: sysctl

- name: Put the node back
  tunefleet.gpu_node.ledger:
    state: restored
"""

RETURN = r"""
recorded:
  description: Entries new to the ledger in this call, per section.
  returned: state=recorded
  type: dict
  sample: {"paths": ["/proc/sys/net/core/rmem_max"], "files": [], "services": [], "kernel_modules": []}
changes:
  description: What restore changed (or would change in check mode), each with before and after.
  returned: state=restored
  type: list
  elements: dict
reloads:
  description: Reloads done after files changed (systemd-daemon-reload, udev-reload, grub-mkconfig...).
  returned: state=restored
  type: list
  elements: str
reboot_required:
  description: True when restored files only take effect at the next boot (the GRUB command line).
  returned: state=restored
  type: bool
left_alone:
  description:
    - What was left alone and why, e.g. recorded kernel paths that no longer exist (a NIC removed
      since), or reloads of a manager the node does not run.
    - Not named C(skipped), which Ansible would read as the task having been skipped.
  returned: state=restored
  type: list
  elements: str
archived_to:
  description: Where the ledger was moved after a successful restore.
  returned: state=restored
  type: str
"""

import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.ledger_core import (  # noqa: E402
    LedgerError,
    ledger_lock,
    load_ledger,
    on_node,
    record,
)
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.ledger_restore import (  # noqa: E402
    archive_ledger,
    restore,
)
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.module_guard import failing_cleanly  # noqa: E402


def make_runner(module: AnsibleModule):
    def runner(argv):
        if module.get_bin_path(argv[0]) is None:
            return None, "", f"{argv[0]}: not found"
        return module.run_command(argv)

    return runner


def run_record(module: AnsibleModule) -> None:
    p = module.params
    added = record(p["root"], p["ledger_path"], p["paths"], p["files"], p["services"], make_runner(module),
                   recorded_by=p["recorded_by"], check_mode=module.check_mode, kernel_modules=p["kernel_modules"])
    changed = any(added.values())
    result = {"changed": changed, "recorded": added, "ledger_path": p["ledger_path"]}
    if changed and module._diff:
        result["diff"] = {"before_header": p["ledger_path"], "after_header": p["ledger_path"],
                          "before": "", "after": json.dumps(added, indent=2) + "\n"}
    module.exit_json(**result)


def run_restore(module: AnsibleModule) -> None:
    p = module.params
    if not os.path.exists(on_node(p["root"], p["ledger_path"])):
        module.exit_json(changed=False, changes=[], reloads=[], left_alone=[], reboot_required=False, archived_to=None,
                         msg=f"no ledger at {p['ledger_path']}: nothing was recorded, nothing to restore")
    lock = contextlib.nullcontext() if module.check_mode else ledger_lock(p["root"], p["ledger_path"])
    with lock:
        ledger = load_ledger(p["root"], p["ledger_path"])
        outcome = restore(p["root"], ledger, make_runner(module), check_mode=module.check_mode)
        if p["archive"] and not outcome.errors and not module.check_mode:
            outcome.archived_to = archive_ledger(p["root"], p["ledger_path"])
    result = dict(outcome.to_dict(), changed=bool(outcome.changes) or bool(outcome.archived_to))
    if module._diff and outcome.changes:
        result["diff"] = {
            "before": "".join(f"{c['kind']} {c['target']}: {c['before']}\n" for c in outcome.changes),
            "after": "".join(f"{c['kind']} {c['target']}: {c['after']}\n" for c in outcome.changes),
        }
    if outcome.errors:
        module.fail_json(msg="restore incomplete, ledger kept: " + "; ".join(outcome.errors), **result)
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["recorded", "restored"], default="recorded"),
            paths=dict(type="list", elements="str", default=[]),
            files=dict(type="list", elements="str", default=[]),
            services=dict(type="list", elements="str", default=[]),
            kernel_modules=dict(type="list", elements="str", default=[]),
            recorded_by=dict(type="str", default=""),
            ledger_path=dict(type="path", default="/var/lib/tunefleet/ledger.json"),
            archive=dict(type="bool", default=True),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    with failing_cleanly(module, "tunefleet.gpu_node.ledger"):
        try:
            if module.params["state"] == "recorded":
                run_record(module)
            else:
                run_restore(module)
        except LedgerError as exc:
            module.fail_json(msg=str(exc))
        except OSError as exc:
            module.fail_json(msg=f"{exc.filename or module.params['ledger_path']}: {exc.strerror}")
        except Exception as exc:  # noqa: BLE001 - a failure with a message, the traceback kept in the result
            import traceback

            module.fail_json(msg=f"ledger ({module.params['state']}) {module.params['ledger_path']}: "
                                 f"{type(exc).__name__}: {exc}; the ledger was left as it is",
                             exception=traceback.format_exc())


if __name__ == "__main__":
    main()
