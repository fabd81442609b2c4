"""Wall time of `tunefleet verify -i` (playbooks/verify.yml) for fleets of 1, 3, ... containers.

Each fleet is N systemd containers of the molecule image (molecule/image/build.sh) on one podman
network, reached with the podman connection; the inventory is the molecule fleet scenario's
settings (config checks and path MTU to every other node; no benchmarks). Needs root, podman
and CONTAINERS_CONF=molecule/containers.conf, as the molecule scenarios do.

usage: python benchmarks/fleet_playbook_scale.py [--sizes 1,3,6]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGE = os.environ.get("TUNEFLEET_MOLECULE_IMAGE", "localhost/tunefleet-debian:bookworm")
NETWORK = "tunefleet-scale"
GROUP_VARS = {
    "ansible_connection": "containers.podman.podman", "ansible_become_method": "ansible.builtin.su",
    "sysctl_settings": {"net.core.somaxconn": 4096}, "sysctl_extra_settings": {}, "sysctl_skip_keys": [],
    "network_interfaces": ["eth0"], "network_mtu": 1500, "storage_enabled": False, "gpu_enabled": False,
    "memory_enabled": False, "limits_enabled": False, "cpu_enabled": False,
}


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check)


def start(names: list) -> None:
    for name in names:
        podman("run", "-d", "--name", name, "--hostname", name, "--privileged", "--network", NETWORK,
               "--systemd", "always", IMAGE, "/sbin/init")
    for name in names:  # systemd must be up before Ansible execs into the container
        for _ in range(60):
            state = podman("exec", name, "systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(1)
        mac = "02:" + ":".join(f"{b:02x}" for b in os.urandom(5))
        podman("exec", name, "ip", "link", "set", "dev", "eth0", "address", mac)


def measure(size: int, work: Path) -> float:
    names = [f"tf-scale-{size}-{i}" for i in range(size)]
    start(names)
    try:
        inventory = work / f"fleet{size}.json"
        inventory.write_text(json.dumps({"all": {"hosts": dict.fromkeys(names, {}), "vars": GROUP_VARS}}))
        began = time.perf_counter()
        done = subprocess.run([str(Path(sys.executable).parent / "tunefleet"), "verify", "-i", str(inventory),
                               "--out", str(work / "reports"), "--quiet"], capture_output=True, text=True)
        elapsed = time.perf_counter() - began
        if done.returncode not in (0, 1, 2) or "reports:" not in done.stdout:
            print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
            raise SystemExit(f"fleet of {size}: tunefleet verify failed (rc {done.returncode})")
        return elapsed
    finally:
        podman("rm", "-f", "-t", "0", *names, check=False)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,3,6")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    created = podman("network", "exists", NETWORK, check=False).returncode != 0
    if created:
        podman("network", "create", NETWORK)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    try:
        with tempfile.TemporaryDirectory(prefix="tunefleet-playbook-scale-") as tmp:
            base = None
            for size in sizes:
                elapsed = measure(size, Path(tmp))
                base = base or elapsed
                print(f"{size:3} hosts: {elapsed:6.1f} s wall ({elapsed / base:.2f}x the first fleet's time, "
                      f"{elapsed / size:.1f} s per host)", flush=True)
    finally:
        if created:
            podman("network", "rm", NETWORK, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
