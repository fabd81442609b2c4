"""playbooks/reboot.yml against a real systemd container that really reboots (podman restarts it):
no reboot without permission; with it, drain -> reboot -> marker removed -> resume, in that order."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
IMAGE = os.environ.get("TUNEFLEET_MOLECULE_IMAGE", "localhost/tunefleet-debian:bookworm")
ENV = dict(os.environ, CONTAINERS_CONF=str(REPO / "molecule" / "containers.conf"),
           ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=ENV, check=check, timeout=120)


def image_present() -> bool:
    return shutil.which("podman") is not None and podman("image", "exists", IMAGE, check=False).returncode == 0


pytestmark = [
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0 or not PLAYBOOK_BIN.exists() or not image_present(),
                       reason=f"needs root, podman and the molecule image {IMAGE} (molecule/image/build.sh)"),
]

FAKE_HOOKS = """
mkdir -p /var/lib/tunefleet && chmod 700 /var/lib/tunefleet
printf '{"reasons": ["memory: 1 GiB huge pages are reserved on the kernel command line"], "boot_id": "x"}\\n' \
  > /var/lib/tunefleet/reboot-required
for tool in scontrol kubectl; do
  printf '#!/bin/sh\\necho "$(stat -c %%Z /proc/1) %s $*" >> /var/log/tunefleet-hooks.log\\n' "$tool" \
    > /usr/local/bin/$tool
done
printf 'case "$1" in show) echo "NodeName=gpu01 State=IDLE+DRAIN";; esac\\n' >> /usr/local/bin/scontrol
chmod +x /usr/local/bin/scontrol /usr/local/bin/kubectl
"""


@pytest.fixture
def node(tmp_path):
    name = f"tunefleet-reboot-{os.getpid()}"
    podman("run", "-d", "--name", name, "--restart=always", "--privileged", "--systemd=always", IMAGE,
           "/lib/systemd/systemd")
    try:
        podman("exec", name, "sh", "-c", FAKE_HOOKS)
        yield name
    finally:
        podman("rm", "-f", name, check=False)


def init_started(name: str) -> str:
    return podman("exec", name, "stat", "-c", "%Z", "/proc/1").stdout.strip()


def reboot_playbook(tmp_path: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        f"all:\n  hosts:\n    {name}:\n      ansible_connection: containers.podman.podman\n"
        "      ansible_python_interpreter: /usr/bin/python3\n"
        "      reboot_boot_time_command: stat -c %Z /proc/1\n"  # a container shares the host's boot_id
        "      reboot_slurm_drain: true\n      reboot_slurm_node_name: gpu01\n"
        f"      reboot_kubernetes_drain: true\n      reboot_kubernetes_controller: {name}\n"
        "      reboot_kubernetes_node_name: gpu01\n      reboot_timeout_s: 180\n"
    )
    return subprocess.run([str(PLAYBOOK_BIN), "-i", str(inventory), str(REPO / "playbooks" / "reboot.yml"),
                           "-e", "tunefleet_reboot_verify=false", *extra],
                          capture_output=True, text=True, cwd=REPO, env=ENV, timeout=400)


def test_reboot_only_with_permission_and_drained_around_it(tmp_path, node):
    started = init_started(node)
    refused = reboot_playbook(tmp_path, node)
    assert refused.returncode == 0, refused.stdout
    assert "tunefleet_reboot_policy is never" in refused.stdout
    assert init_started(node) == started
    assert podman("exec", node, "test", "-e", "/var/lib/tunefleet/reboot-required", check=False).returncode == 0
    assert podman("exec", node, "test", "-e", "/var/log/tunefleet-hooks.log", check=False).returncode != 0

    allowed = reboot_playbook(tmp_path, node, "-e", "tunefleet_reboot_policy=if_needed")
    assert allowed.returncode == 0, allowed.stdout
    assert init_started(node) != started, "the node did not reboot"
    assert podman("exec", node, "test", "-e", "/var/lib/tunefleet/reboot-required", check=False).returncode != 0
    rebooted = init_started(node)
    # Each hook line starts with the init start time: drains before the reboot, resumes after it.
    hooks = podman("exec", node, "cat", "/var/log/tunefleet-hooks.log").stdout.splitlines()
    assert hooks == [
        f"{started} scontrol update nodename=gpu01 state=drain reason=tunefleet reboot",
        f"{started} scontrol show node gpu01",
        f"{started} kubectl drain gpu01 --ignore-daemonsets --delete-emptydir-data --timeout=3600s",
        f"{rebooted} kubectl uncordon gpu01",
        f"{rebooted} scontrol update nodename=gpu01 state=resume",
    ]
