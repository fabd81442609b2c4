"""N systemd containers of the molecule image on one podman network, reached with the podman
connection: the fleet the scale benchmarks run against. Needs root and podman; podman reads
molecule/containers.conf unless CONTAINERS_CONF names another, as in the molecule scenarios.

    with container_fleet("tf-scale", 4) as names: ...   # removed again on the way out
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from typing import Iterator, List

REPO = Path(__file__).resolve().parent.parent

IMAGE = os.environ.get("TUNEFLEET_MOLECULE_IMAGE", "localhost/tunefleet-debian:bookworm")
NETWORK = "tunefleet-scale"
# Only what a container can be tuned and judged on (the molecule fleet scenario's settings): a
# namespaced sysctl and the MTU of the fleet network; the other roles would judge the machine itself.
CONTAINER_VARS = {
    "ansible_connection": "containers.podman.podman", "ansible_become_method": "ansible.builtin.su",
    "sysctl_settings": {"net.core.somaxconn": 4096}, "sysctl_extra_settings": {}, "sysctl_skip_keys": [],
    "network_interfaces": ["eth0"], "network_mtu": 1500, "storage_enabled": False, "gpu_enabled": False,
    "memory_enabled": False, "limits_enabled": False, "cpu_enabled": False,
}


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(REPO / "molecule" / "containers.conf"))
    done = subprocess.run(["podman", *args], capture_output=True, text=True, env=env, check=False)
    if check and done.returncode != 0:
        raise SystemExit(f"podman {' '.join(args[:2])} ... exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done


def start(names: List[str]) -> None:
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


@contextlib.contextmanager
def network() -> Iterator[None]:
    created = podman("network", "exists", NETWORK, check=False).returncode != 0
    if created:
        podman("network", "create", NETWORK)
    try:
        yield
    finally:
        if created:
            podman("network", "rm", NETWORK, check=False)


@contextlib.contextmanager
def container_fleet(prefix: str, size: int) -> Iterator[List[str]]:
    names = [f"{prefix}-{size}-{i}" for i in range(size)]
    try:
        start(names)
        yield names
    finally:
        podman("rm", "-f", "-t", "0", *names, check=False)
