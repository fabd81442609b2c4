#!/usr/bin/env python3
"""Set up (and tear down) the real things a molecule test node tunes.

setup: a veth pair and a loop device backed by a file, inside the privileged container; a
login user for the limits checks; the split of the sysctl keys into per-namespace keys (safe
to apply in the container) and host-wide keys (they would change the CI machine itself); and
the host-wide values the scenario changes on purpose, recorded so teardown puts them back.
Everything is written as an Ansible local fact (ansible_local.tunefleet_molecule).

teardown: detaches the loop device, then writes the recorded host-wide values back (the loop
device's queue settings as they were before the attach), and checks both.

Runs on the node with a bare python3 >= 3.9.
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

# node_state.py ships beside this script (prepare.yml installs both) and already loads the
# collection's kernel rules: take them from there instead of a second loader.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from node_state import kernel_rules  # noqa: E402

FACT_FILE = Path("/etc/ansible/facts.d/tunefleet_molecule.fact")
LOOP_BACKING_FILE = Path("/var/tmp/tunefleet-molecule-loop.img")
LOOP_SIZE_BYTES = 64 * 1024 * 1024
VETH_PAIR = ("tfnet0", "tfnet1")
PROBE_USER = "tfprobe"
THP = Path("/sys/kernel/mm/transparent_hugepage")
HUGEPAGES_2M = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
# Tiny on purpose: the pages come out of the CI machine's own memory for the length of a run.
HUGEPAGES_EXTRA = 2


class FixtureError(RuntimeError):
    pass


def run(argv: List[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise FixtureError(f"{' '.join(argv)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip()


def active_choice(text: str) -> str:
    """`always [madvise] never` -> `madvise`; a plain value is returned as is."""
    active, _ = kernel_rules.parse_choices(text)
    return text.strip() if active is None else active


def choices(text: str) -> List[str]:
    return kernel_rules.parse_choices(text)[1]


def other_choice(text: str, preferred: List[str]) -> str:
    """A value different from the active one, so applying it is a real, visible change."""
    current = active_choice(text)
    for candidate in preferred:
        if candidate != current and candidate in choices(text):
            return candidate
    raise FixtureError(f"no alternative to {current!r} among {text!r}")


def ensure_veth_pair() -> None:
    if not Path(f"/sys/class/net/{VETH_PAIR[0]}").exists():
        run(["ip", "link", "add", VETH_PAIR[0], "type", "veth", "peer", "name", VETH_PAIR[1]])
    for name in VETH_PAIR:
        run(["ip", "link", "set", name, "mtu", "1500", "up"])


def queue_settings(loop: str) -> Dict[str, str]:
    """The host loop device's tunables the scenario changes, as the host had them."""
    queue = Path("/sys/block") / loop / "queue"
    if not queue.is_dir():  # a device the kernel makes on demand: nothing to hand back
        return {}
    return {str(queue / "scheduler"): active_choice(read(queue / "scheduler")),
            str(queue / "read_ahead_kb"): read(queue / "read_ahead_kb")}


def ensure_loop_device() -> tuple:
    """Attach the backing file to a loop device (once); return its name (e.g. loop3) and its
    queue settings from BEFORE the attach: attaching a file sets read_ahead_kb from the file's
    filesystem (128 -> 2560 on the CI VM) and detaching keeps it, so teardown writes these back
    after the detach. None when it was attached already (a second prepare)."""
    if not LOOP_BACKING_FILE.exists():
        with open(LOOP_BACKING_FILE, "wb") as handle:
            handle.truncate(LOOP_SIZE_BYTES)
    attached = run(["losetup", "--associated", str(LOOP_BACKING_FILE)])
    if attached:
        return Path(attached.split(":", 1)[0]).name, None
    # /dev in a privileged container is a copy taken at start: a loop device the kernel makes
    # afterwards has no node here until we make one.
    device = run(["losetup", "--find"])
    before = queue_settings(Path(device).name)
    if not Path(device).exists():
        minor = int(device.rsplit("loop", 1)[1])
        os.mknod(device, stat.S_IFBLK | 0o660, os.makedev(7, minor))
    run(["losetup", device, str(LOOP_BACKING_FILE)])
    return Path(device).name, before


def ensure_probe_user() -> None:
    try:
        run(["id", PROBE_USER])
    except FixtureError:
        run(["useradd", "--create-home", "--shell", "/bin/bash", PROBE_USER])
    # bash, not dash: the checks ask `ulimit -u`, which dash does not have.
    run(["usermod", "--shell", "/bin/bash", PROBE_USER])


def namespaced(key: str) -> bool:
    """True if this container may set the key without touching the host.

    Only net.* keys can be per network namespace, and the kernel hides the host-only ones from
    a child namespace or refuses writes to them (EINVAL); writing the current value back is the
    test, and changes nothing.
    """
    if not key.startswith("net."):
        return False
    path = Path(kernel_rules.sysctl_path(key))
    try:
        current = path.read_text(encoding="utf-8")
        path.write_text(current, encoding="utf-8")
    except OSError:
        return False
    return True


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()


def setup(sysctl_keys: List[str]) -> dict:
    ensure_veth_pair()
    loop, before_attach = ensure_loop_device()
    ensure_probe_user()
    previous = json.loads(FACT_FILE.read_text(encoding="utf-8")) if FACT_FILE.exists() else {}
    # A second prepare must keep the first one's originals: by then the node may be tuned.
    host_originals: Dict[str, str] = previous.get("host_originals") or {
        **(before_attach if before_attach is not None else queue_settings(loop)),
        str(THP / "enabled"): active_choice(read(THP / "enabled")),
        str(THP / "defrag"): active_choice(read(THP / "defrag")),
        str(HUGEPAGES_2M): read(HUGEPAGES_2M),
    }
    host_wide = sorted(key for key in sysctl_keys if not namespaced(key))
    facts = {
        "veth_pair": list(VETH_PAIR),
        "loop_device": loop,
        "loop_backing_file": str(LOOP_BACKING_FILE),
        "probe_user": PROBE_USER,
        "sysctl_host_wide_keys": host_wide,
        "sysctl_namespaced_keys": sorted(set(sysctl_keys) - set(host_wide)),
        "host_originals": host_originals,
        "hugepages_2m_target": int(host_originals[str(HUGEPAGES_2M)]) + HUGEPAGES_EXTRA,
        "thp_enabled_target": other_choice(read(THP / "enabled"), ["never", "madvise"]),
        "thp_defrag_target": other_choice(read(THP / "defrag"), ["never", "defer", "madvise"]),
    }
    if previous:
        for key in ("hugepages_2m_target", "thp_enabled_target", "thp_defrag_target"):
            facts[key] = previous.get(key, facts[key])
    # What the scenario sets host-wide: teardown puts back only values still holding these, so it
    # never overwrites a value some other job on a shared machine set meanwhile.
    facts["host_targets"] = {
        str(HUGEPAGES_2M): str(facts["hugepages_2m_target"]),
        str(THP / "enabled"): facts["thp_enabled_target"],
        str(THP / "defrag"): facts["thp_defrag_target"],
    }
    FACT_FILE.parent.mkdir(parents=True, exist_ok=True)
    FACT_FILE.write_text(json.dumps(facts, indent=1, sort_keys=True), encoding="utf-8")
    return facts


def teardown() -> List[str]:
    """Put every recorded host-wide value back; return what could not be."""
    if not FACT_FILE.exists():
        return []
    facts = json.loads(FACT_FILE.read_text(encoding="utf-8"))
    targets = facts.get("host_targets", {})
    problems: List[str] = []
    # Detach first: the detach itself rewrites the device's read_ahead_kb, so the originals
    # (read before the attach) are written back after it.
    backing = facts["loop_backing_file"]
    attached = run(["losetup", "--associated", backing])
    for line in attached.splitlines():
        run(["losetup", "--detach", line.split(":", 1)[0]])
    if run(["losetup", "--associated", backing]):
        problems.append(f"loop device for {backing} is still attached")
    Path(backing).unlink(missing_ok=True)
    for path_text, value in facts["host_originals"].items():
        path = Path(path_text)
        if not path.exists():
            continue
        current = active_choice(read(path))
        if path_text in targets and current not in (targets[path_text], value):
            print(f"{path}: left at {current!r}: neither the scenario's {targets[path_text]!r} nor the "
                  f"original {value!r}, so another job changed it", file=sys.stderr)
            continue
        try:
            if current != value:
                path.write_text(value, encoding="utf-8")
        except OSError as exc:
            problems.append(f"{path}: cannot write {value!r} back: {exc.strerror}")
            continue
        if active_choice(read(path)) != value:
            problems.append(f"{path}: is {read(path)!r} after writing {value!r} back")
    return problems


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("setup", "teardown"))
    parser.add_argument("--sysctl-key", action="append", default=[], help="a key the scenario applies")
    args = parser.parse_args(argv)
    try:
        if args.action == "setup":
            print(json.dumps(setup(args.sysctl_key), sort_keys=True))
            return 0
        problems = teardown()
    except (FixtureError, OSError) as exc:
        print(f"node fixture {args.action}: {exc}", file=sys.stderr)
        return 1
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
