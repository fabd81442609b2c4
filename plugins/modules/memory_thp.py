#!/usr/bin/python
"""Set transparent huge page modes (enabled, defrag), writing only where they differ."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.kernel_rules import parse_choices

DOCUMENTATION = r"""
module: memory_thp
short_description: Set the transparent huge page C(enabled) and C(defrag) modes
description:
  - Reads C(/sys/kernel/mm/transparent_hugepage/{enabled,defrag}) (the selected mode is the one in
    brackets) and writes only the files whose mode differs, so check mode reports what would change.
  - Fails before writing anything when the kernel does not offer a requested mode.
  - A kernel built without THP is not an error; C(thp) is returned false.
options:
  enabled:
    description: Mode for C(enabled) (C(always), C(madvise), C(never)).
    type: str
    required: true
  defrag:
    description: Mode for C(defrag) (C(always), C(defer), C(defer+madvise), C(madvise), C(never)).
    type: str
    required: true
  sysfs_root:
    description: Root of sysfs; tests point it at a fake tree.
    type: path
    default: /sys
author: tunefleet developers
"""

RETURN = r"""
thp:
  description: Whether the kernel exposes transparent huge pages.
  type: bool
  returned: always
settings:
  description: Per file, the path, the mode before and after, and the modes offered.
  type: dict
  returned: always
paths:
  description: The files whose mode differs from the request.
  type: list
  returned: always
"""


THP_DIR = "kernel/mm/transparent_hugepage"


class ThpError(ValueError):
    pass


@dataclass
class ThpMode:
    name: str
    path: str
    selected: str
    offered: List[str]


def parse_modes(text: str) -> tuple[Optional[str], List[str]]:
    """'always [madvise] never' -> ('madvise', ['always', 'madvise', 'never'])."""
    return parse_choices(text)


def read_mode(sysfs_root: str, name: str) -> Optional[ThpMode]:
    path = os.path.join(sysfs_root, THP_DIR, name)
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read(4096)
    except OSError:
        return None
    except UnicodeDecodeError as exc:
        raise ThpError(f"{path}: not ASCII text (byte {exc.start}): not a THP mode list") from None
    selected, offered = parse_modes(text)
    if selected is None:
        raise ThpError(f"{path}: no bracketed mode in {text.strip()!r}")
    return ThpMode(name, path, selected, offered)


def apply(sysfs_root: str, wanted: dict[str, str], check_mode: bool) -> dict:
    modes = {name: read_mode(sysfs_root, name) for name in wanted}
    if any(mode is None for mode in modes.values()):
        return {"changed": False, "thp": False, "settings": {}, "paths": [],
                "msg": "this kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage): left alone"}
    for name, mode in modes.items():
        if wanted[name] not in mode.offered:
            raise ThpError(
                f"memory_thp_{name} {wanted[name]!r} is not offered by this kernel "
                f"({mode.path} offers: {' '.join(mode.offered)})"
            )
    to_write = [mode for name, mode in modes.items() if mode.selected != wanted[name]]
    if to_write and not check_mode:
        for mode in to_write:
            try:
                with open(mode.path, "w", encoding="ascii") as handle:
                    handle.write(wanted[mode.name])
            except OSError as exc:
                raise ThpError(f"writing {wanted[mode.name]!r} to {mode.path}: {exc.strerror}") from exc
    settings = {}
    for name, mode in modes.items():
        after = wanted[name]
        if not check_mode and mode in to_write:
            reread = read_mode(sysfs_root, name)
            after = reread.selected if reread else after
            if after != wanted[name]:
                raise ThpError(f"{mode.path} still selects {after!r} after writing {wanted[name]!r}")
        settings[name] = {"path": mode.path, "before": mode.selected, "after": after, "offered": mode.offered}
    return {
        "changed": bool(to_write),
        "thp": True,
        "settings": settings,
        "paths": [mode.path for mode in to_write],
        "diff": {
            "before": "".join(f"{name}: {s['before']}\n" for name, s in settings.items()),
            "after": "".join(f"{name}: {s['after']}\n" for name, s in settings.items()),
        },
        "msg": ", ".join(f"{name} {s['before']} -> {s['after']}" for name, s in settings.items()
                         if s["before"] != s["after"]) or "transparent huge pages already as asked",
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "enabled": {"type": "str", "required": True},
            "defrag": {"type": "str", "required": True},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    wanted = {"enabled": module.params["enabled"], "defrag": module.params["defrag"]}
    try:
        result = apply(module.params["sysfs_root"], wanted, module.check_mode)
    except ThpError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
