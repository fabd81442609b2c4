#!/usr/bin/env python3
"""Snapshot the tunable state of a node, or compare the node against a saved snapshot.

The molecule scenarios use it to prove "nothing changed": around the check-mode run, around
restore, and on the CI host around the whole `make molecule` (host-wide kernel knobs are
shared with every container). It runs on a bare python3 >= 3.9 (inside the test node too).

    node_state.py save PATH [--block loop3] [--files /etc] [--selection-from OTHER_SNAPSHOT]
    node_state.py save PATH --host    # the CI machine: no interfaces podman manages
    node_state.py compare PATH        # exit 1 and list every difference
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Dict, List


def _load_kernel_rules():
    """The collection's kernel_rules.py (how the kernel prints values), standard library only: next to
    this script on a test node (prepare.yml installs it there), else in the checkout it sits in."""
    here = Path(__file__).resolve().parent
    checkout = here.parent.parent.parent  # molecule/shared/files -> the repository
    for source in (here / "kernel_rules.py", checkout / "plugins" / "module_utils" / "kernel_rules.py"):
        if source.is_file():
            spec = importlib.util.spec_from_file_location("tunefleet_kernel_rules", source)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise ImportError(f"kernel_rules.py is neither next to {__file__} nor in the checkout around it")


kernel_rules = _load_kernel_rules()

# Kernel counters and self-tuning values: they move on an idle machine, so they are no evidence
# that anything was changed. perf_event_max_sample_rate is lowered by the kernel itself when
# perf interrupts run long; stable_secret cannot be read until it is set.
VOLATILE_SYSCTL = re.compile(
    r"^(fs\.(dentry-state|file-nr|inode-nr|inode-state|aio-nr|quota\..*|binfmt_misc\..*)"
    r"|kernel\.(random\..*|ns_last_pid|pty\.nr|perf_event_max_sample_rate|hung_task_detect_count|tainted"
    r"|cad_pid|sched_domain\..*)"
    r"|net\.netfilter\.nf_conntrack_count"
    r"|net\.ipv6\.conf\..*\.stable_secret"
    r"|net\.ipv4\.tcp_fastopen_key|net\.ipv4\.route\.flush|net\.ipv6\.route\.flush"
    r"|vm\.(drop_caches|compact_memory|stat_refresh))$"
)
# Files that systemd, the package manager or the test itself rewrite on their own.
VOLATILE_FILES = ("/etc/machine-id", "/etc/ld.so.cache", "/etc/mtab", "/etc/resolv.conf", "/etc/hostname",
                  "/etc/hosts", "/etc/.pwd.lock", "/etc/ansible/facts.d")
# On the CI host itself, podman adds and removes its own interfaces (podman0, one veth per
# container) while scenarios run: their per-interface keys are podman's business, not ours.
PER_INTERFACE_SYSCTL = re.compile(r"^net\.ipv[46]\.(conf|neigh)\.(?!all\.|default\.)")
SYSTEMD_MANAGER_LIMITS = ("DefaultLimitMEMLOCK", "DefaultLimitNOFILE", "DefaultLimitNPROC", "DefaultLimitSTACK")


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def sysctls(proc_sys: Path = Path("/proc/sys")) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for dirpath, _dirs, files in os.walk(proc_sys):
        for name in files:
            path = Path(dirpath) / name
            key = ".".join(path.relative_to(proc_sys).parts)
            if VOLATILE_SYSCTL.match(key):
                continue
            value = read_text(path)
            if value is not None:
                values[key] = kernel_rules.normalise_value(value)
    return values


def memory(sys_mm: Path = Path("/sys/kernel/mm")) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for name in ("enabled", "defrag"):
        value = read_text(sys_mm / "transparent_hugepage" / name)
        if value is not None:
            values[f"thp.{name}"] = value
    for size_dir in sorted((sys_mm / "hugepages").glob("hugepages-*")):
        value = read_text(size_dir / "nr_hugepages")
        if value is not None:
            values[f"{size_dir.name}.nr_hugepages"] = value
    return values


def interfaces(sys_net: Path = Path("/sys/class/net")) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for iface in sorted(sys_net.iterdir()) if sys_net.is_dir() else []:
        for attr in ("mtu", "tx_queue_len"):
            value = read_text(iface / attr)
            if value is not None:
                values[f"{iface.name}.{attr}"] = value
    return values


def block_queues(devices: List[str], sys_block: Path = Path("/sys/block")) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for device in devices:
        for attr in ("scheduler", "read_ahead_kb", "nr_requests", "max_sectors_kb"):
            value = read_text(sys_block / device / "queue" / attr)
            values[f"{device}.{attr}"] = value if value is not None else "<absent>"
    return values


def irq_affinities(proc_irq: Path = Path("/proc/irq")) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for irq in sorted(proc_irq.glob("[0-9]*")):
        value = read_text(irq / "smp_affinity_list")
        if value is not None:
            values[f"{irq.name}.smp_affinity_list"] = value
    return values


def cpu_governors(sys_cpu: Path = Path("/sys/devices/system/cpu")) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for governor in sorted(sys_cpu.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        values[governor.parent.parent.name] = read_text(governor) or ""
    return values


def file_digests(roots: List[str]) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in VOLATILE_FILES]
            for name in files:
                path = os.path.join(dirpath, name)
                if path in VOLATILE_FILES:
                    continue
                values[path] = _digest(path)
    return values


def _digest(path: str) -> str:
    """sha256 of a file anyone may read; of a secret one (shadow, gshadow, SSH host keys, anything
    not world-readable) only what ls shows: the snapshot is a report file, and a digest of a short
    secret can be brute-forced."""
    if os.path.islink(path):
        return "link:" + os.readlink(path)
    try:
        st = os.stat(path)
        if not st.st_mode & stat.S_IROTH:
            return f"secret: mode {stat.S_IMODE(st.st_mode):04o} uid {st.st_uid} gid {st.st_gid} size {st.st_size}" \
                   f" mtime {st.st_mtime_ns}"
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError as exc:
        return f"unreadable:{exc.errno}"


def systemd_manager() -> Dict[str, str]:
    if not Path("/run/systemd/system").is_dir():
        return {}
    try:
        result = subprocess.run(
            ["systemctl", "show", "--property", ",".join(SYSTEMD_MANAGER_LIMITS)],
            capture_output=True, text=True, timeout=30, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def host_block_devices(sys_block: Path = Path("/sys/block")) -> List[str]:
    """Every block device of the CI machine: the scenarios and tests attach host loop devices,
    and attaching alone rewrites a queue setting (read_ahead_kb 128 -> 2560 seen on loop0)."""
    try:
        return sorted(os.listdir(sys_block))
    except OSError:
        return []


def snapshot(blocks: List[str], file_roots: List[str], host: bool = False) -> dict:
    kernel = sysctls()
    if host:
        kernel = {key: value for key, value in kernel.items() if not PER_INTERFACE_SYSCTL.match(key)}
        blocks = sorted(set(blocks) | set(host_block_devices()))
    return {
        "selection": {"block": blocks, "files": file_roots, "host": host},
        "state": {
            "sysctl": kernel,
            "memory": memory(),
            "net": {} if host else interfaces(),
            "block": block_queues(blocks),
            "irq": irq_affinities(),
            "cpu_governor": cpu_governors(),
            "systemd": systemd_manager(),
            "files": file_digests(file_roots),
        },
    }


def differences(before: dict, after: dict) -> List[str]:
    lines: List[str] = []
    for section in sorted(set(before) | set(after)):
        old, new = before.get(section, {}), after.get(section, {})
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                lines.append(f"{section}: {key}: {old.get(key, '<absent>')!r} -> {new.get(key, '<absent>')!r}")
    return lines


def split_drift(lines: List[str], allowed: List[str]) -> tuple:
    """(counted, tolerated): differences matching an --allow-drift pattern are only reported."""
    patterns = [re.compile(pattern) for pattern in allowed if pattern]
    tolerated = [line for line in lines if any(p.match(line) for p in patterns)]
    return [line for line in lines if line not in tolerated], tolerated


def write_new(path: str, text: str) -> None:
    """Root writes the snapshot (make demo: into the checkout's reports/): a new file of a random
    name (O_EXCL|O_NOFOLLOW, 0600), renamed over `path`, so no symlink planted there is followed."""
    temp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{secrets.token_hex(6)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, path)
    except BaseException:
        if os.path.lexists(temp):
            os.unlink(temp)
        raise


def load(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        sys.exit(f"cannot read snapshot {path}: {exc}")


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("save", "compare"))
    parser.add_argument("path", help="snapshot file")
    parser.add_argument("--block", action="append", default=[], help="block device whose queue settings count")
    parser.add_argument("--files", action="append", default=[], help="directory whose files count (digests)")
    parser.add_argument("--host", action="store_true", help="the CI host: leave out podman's own interfaces")
    parser.add_argument(
        "--allow-drift", action="append", default=[],
        help="compare: regex on 'section: key' of differences to report but not count (a machine shared "
        "with other jobs that change host-wide knobs; CI leaves it unset)",
    )
    parser.add_argument("--selection-from", help="take --block/--files from this earlier snapshot")
    args = parser.parse_args(argv)

    if args.action == "save":
        blocks, file_roots = args.block, args.files
        if args.selection_from:
            selection = load(args.selection_from)["selection"]
            blocks, file_roots = blocks + selection["block"], file_roots + selection["files"]
        data = snapshot(blocks, file_roots, args.host)
        Path(args.path).parent.mkdir(parents=True, exist_ok=True)
        write_new(args.path, json.dumps(data, indent=1, sort_keys=True))
        print(f"saved {sum(len(v) for v in data['state'].values())} values to {args.path}")
        return 0

    saved = load(args.path)
    selection = saved["selection"]
    now = snapshot(selection["block"], selection["files"], selection.get("host", False))
    changed, tolerated = split_drift(differences(saved["state"], now["state"]), args.allow_drift)
    for line in changed:
        print(line)
    for line in tolerated:
        print(f"tolerated (--allow-drift): {line}")
    print(f"{len(changed)} difference(s) against {args.path}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
