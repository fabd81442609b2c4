#!/usr/bin/python
"""Clear the PCIe ACS redirect bits on the bridges between GPUs and NICs, live, with every old value in the
ledger; or put the recorded values back."""
from __future__ import annotations

from typing import List

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tunefleet.gpu_node.plugins.module_utils import pci_config
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.ledger_core import (
    DEFAULT_LEDGER_PATH,
    LedgerError,
    ledger_lock,
    load_ledger,
    save_ledger,
    utc_now,
)
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.module_guard import failing_cleanly

DOCUMENTATION = r"""
module: pcie_acs
short_description: Disable PCIe ACS redirects on the bridges between GPUs and NICs (live), or restore them
description:
  - Reads each bridge's ACS control register from C(/sys/bus/pci/devices/BDF/config) (extended
    capability 0x000D, control at +6) and clears Source Validation, P2P Request Redirect, P2P Completion
    Redirect and Upstream Forwarding, the bits that send peer-to-peer traffic to the root complex.
    No C(setpci) is run; the config space is written directly, so nothing on the caller's PATH is trusted.
  - Refused on a virtual machine (CPU hypervisor flag, DMI vendor) and where devices are bound to
    C(vfio-pci) (passthrough needs ACS isolation) unless O(force) is true; the message names C(pcie_force).
  - Every bridge it changes is recorded first-seen in the ledger (section C(pci_acs)) before the write;
    O(state=restored) writes those values back and drops the section. The bits reset at every boot; the
    pcie role's boot unit re-applies them.
  - Check mode writes nothing; C(--diff) shows every bridge's bits before and after.
options:
  state:
    description: C(present) clears the bits; C(restored) writes back what the ledger recorded.
    type: str
    choices: [present, restored]
    default: present
  bridges:
    description:
      - PCI addresses of the bridges to change (C(0000:3b:00.0)). Empty means every bridge on the sysfs
        path of an NVIDIA GPU or a Mellanox network function.
    type: list
    elements: str
    default: []
  force:
    description: Change ACS on a virtual machine or with vfio-pci devices (the inventory's C(pcie_force)).
    type: bool
    default: false
  ledger_path:
    description: Where the ledger lives on the node.
    type: path
    default: /var/lib/tunefleet/ledger.json
author:
  - tunefleet developers
"""

EXAMPLES = r"""
- name: Disable ACS redirects between the GPUs and NICs
  tunefleet.gpu_node.pcie_acs:
    bridges: []
"""

RETURN = r"""
bridges:
  description: Per bridge, its address, ACS offset, control register before and after, and the bits.
  type: list
  returned: always
restored:
  description: With state=restored, the bridges written back.
  type: list
  returned: when state is restored
"""

SECTION = "pci_acs"
# The node's root: "/" on a node; tests point it at a fake tree.
ROOT = "/"


def _line(bdf: str, control: int) -> str:
    return f"{bdf}: ACS {pci_config.bits_text(control)} ({control:#06x})\n"


def plan(root: str, bridges: List[str]) -> tuple:
    """([(bdf, offset, before, after)], [bdf without ACS]); a bridge that cannot be read fails the call."""
    changes, without = [], []
    for bdf in bridges:
        found = pci_config.read_acs(root, bdf)
        if found is None:
            without.append(bdf)
            continue
        offset, control = found
        changes.append((bdf, offset, control, control & ~pci_config.CLEARED_BITS))
    return changes, without


def refusal(root: str, force: bool) -> str:
    if force:
        return ""
    virtual = pci_config.virtualization(root)
    if virtual:
        return (f"pcie: ACS refused: this is a virtual machine ({virtual}); the hypervisor owns the real bridges "
                "and the guest's are emulated. Set pcie_force: true only if you know this is bare metal")
    vfio = pci_config.vfio_devices(root)
    if vfio:
        return (f"pcie: ACS refused: {', '.join(vfio[:8])} bound to vfio-pci (passed through: their isolation "
                "needs ACS). Set pcie_force: true to disable it anyway")
    return ""


def apply(module: AnsibleModule, root: str) -> dict:
    bridges = module.params["bridges"]
    bad = [b for b in bridges if not pci_config.BDF.match(str(b))]
    if bad:
        module.fail_json(msg=f"pcie_acs_bridges: {bad[0]!r} is not a PCI address of the form 0000:3b:00.0")
    why = refusal(root, module.params["force"])
    if why:
        module.fail_json(msg=why)
    bridges = sorted(set(bridges)) or pci_config.default_bridges(root)
    changes, without = plan(root, bridges)
    changing = [c for c in changes if c[2] != c[3]]
    report = [{"bridge": bdf, "acs_offset": f"{offset:#x}", "before": f"{before:#06x}", "after": f"{after:#06x}",
               "bits_before": pci_config.bits_text(before), "bits_after": pci_config.bits_text(after)}
              for bdf, offset, before, after in changes]
    result = {"changed": bool(changing), "bridges": report, "without_acs": without,
              "diff": {"before": "".join(_line(b, before) for b, _, before, _ in changing),
                       "after": "".join(_line(b, after) for b, _, _, after in changing)}}
    if not bridges:
        result["msg"] = "pcie: no bridge between the GPUs / NICs and the root complex: nothing to change"
    if not changing or module.check_mode:
        return result
    ledger_path = module.params["ledger_path"]
    with ledger_lock(root, ledger_path):
        ledger = load_ledger(root, ledger_path)
        section = ledger.setdefault(SECTION, {})
        when = utc_now()
        for bdf, offset, before, _ in changing:
            section.setdefault(bdf, {"offset": offset, "control": f"{before:#06x}", "recorded_at": when,
                                     "recorded_by": "pcie"})
        save_ledger(root, ledger_path, ledger)
    failed = []
    for bdf, offset, _, after in changing:
        pci_config.write_control(root, bdf, offset, after)
        found = pci_config.read_acs(root, bdf)
        if found is None or found[1] & pci_config.CLEARED_BITS:
            failed.append(f"{bdf} reads back {pci_config.bits_text(found[1]) if found else 'no ACS'}")
    if failed:
        module.fail_json(msg="pcie: ACS bits did not clear (hard-wired by the switch's firmware?): "
                             + "; ".join(failed), **result)
    return result


def restore(module: AnsibleModule, root: str) -> dict:
    ledger_path = module.params["ledger_path"]
    with ledger_lock(root, ledger_path):
        ledger = load_ledger(root, ledger_path)
        section = ledger.get(SECTION) or {}
        if not isinstance(section, dict):
            module.fail_json(msg=f"ledger {ledger_path}: {SECTION!r} is not a mapping; nothing was changed")
        writes, errors = [], []
        for bdf, entry in sorted(section.items()):
            try:
                offset, control = int(entry["offset"]), int(str(entry["control"]), 16)
                found = pci_config.read_acs(root, bdf)
            except (KeyError, TypeError, ValueError, pci_config.PciConfigError) as exc:
                errors.append(f"{bdf}: {exc}")
                continue
            if found is None or found[0] != offset:
                errors.append(f"{bdf}: ACS capability not at the recorded offset {offset:#x}")
                continue
            if found[1] != control:
                writes.append((bdf, offset, found[1], control))
        if errors:
            module.fail_json(msg="pcie: cannot restore ACS (the ledger is kept): " + "; ".join(errors))
        result = {"changed": bool(writes) or bool(section),
                  "restored": [{"bridge": b, "before": f"{now:#06x}", "after": f"{old:#06x}"}
                               for b, _, now, old in writes],
                  "diff": {"before": "".join(_line(b, now) for b, _, now, _ in writes),
                           "after": "".join(_line(b, old) for b, _, _, old in writes)}}
        if module.check_mode:
            return result
        for bdf, offset, _, control in writes:
            pci_config.write_control(root, bdf, offset, control)
        if SECTION in ledger:
            del ledger[SECTION]
            save_ledger(root, ledger_path, ledger)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "restored"], "default": "present"},
            "bridges": {"type": "list", "elements": "str", "default": []},
            "force": {"type": "bool", "default": False},
            "ledger_path": {"type": "path", "default": DEFAULT_LEDGER_PATH},
        },
        supports_check_mode=True,
    )
    with failing_cleanly(module, "tunefleet.gpu_node.pcie_acs"):
        try:
            if module.params["state"] == "restored":
                module.exit_json(**restore(module, ROOT))
            module.exit_json(**apply(module, ROOT))
        except (pci_config.PciConfigError, LedgerError) as exc:
            module.fail_json(msg=f"pcie: {exc}")


if __name__ == "__main__":
    main()
