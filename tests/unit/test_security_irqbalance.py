"""Planted attacks on the irqbalance check, which runs as root: a process another user named
"irqbalance", and a policy script argument naming a FIFO, a device or a file of theirs."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.other_user import give, needs_root, run_as_other
from verify.checks import irqbalance
from verify.node import Node
from verify.result import Status

pytestmark = needs_root
# The shell names itself (comm) irqbalance, as any user may, then waits.
NAME_ITSELF = "printf irqbalance > /proc/$$/comm; sleep 30; true"


def _started(proc) -> str:
    pid = str(proc.pid)
    for _ in range(100):
        if Path(f"/proc/{pid}/comm").read_text().strip() == "irqbalance":
            return pid
        time.sleep(0.05)
    raise AssertionError("the planted process never renamed itself")


def test_a_process_another_user_named_irqbalance_is_not_the_daemon():
    proc = run_as_other(NAME_ITSELF)
    try:
        pid = _started(proc)
        assert pid not in irqbalance.irqbalance_pids(Node())
    finally:
        proc.kill()
        proc.wait()


def test_a_root_process_named_irqbalance_is_not_the_daemon_unless_its_executable_is():
    import subprocess

    proc = subprocess.Popen(["/bin/sh", "-c", NAME_ITSELF])
    try:
        pid = _started(proc)
        assert pid not in irqbalance.irqbalance_pids(Node())  # its executable is the shell
    finally:
        proc.kill()
        proc.wait()


def _daemon(tree: FakeTree, script: str, owner: int = 0) -> FakeTree:
    argv = ["/usr/sbin/irqbalance", "--foreground", f"--policyscript={script}"]
    tree.write("/proc/4242/comm", "irqbalance\n").write("/proc/4242/cmdline", "\0".join(argv) + "\0")
    os.chown(tree.root / "proc" / "4242", owner, owner)
    return tree


def test_the_arguments_of_a_fake_irqbalance_are_never_read(tmp_path):
    tree = _daemon(FakeTree(tmp_path).nic("ens1", pci="0000:17:00.0"), "/home/nobody/policy", owner=65534)
    assert irqbalance.irqbalance_cmdline(tree.node()) is None


@pytest.mark.parametrize("plant", ["fifo", "device link", "other owner", "too large"])
def test_a_policy_script_that_is_not_a_small_root_file_fails_at_once(tmp_path, plant):
    tree = _daemon(FakeTree(tmp_path).nic("ens1", pci="0000:17:00.0"), "/etc/tf-policy")
    script = tree.root / "etc" / "tf-policy"
    script.parent.mkdir()
    if plant == "fifo":
        os.mkfifo(script)  # a plain open would wait for a writer forever
    elif plant == "device link":
        script.symlink_to("/dev/zero")  # read whole, it never ends
    elif plant == "other owner":
        script.write_text("0000:17:00.0")
        give(script)
    else:
        script.write_text("0000:17:00.0\n" + "#" * (64 * 1024))
    outcome = []
    judging = threading.Thread(target=lambda: outcome.extend(irqbalance.run(desired_state(), tree.node())),
                               daemon=True)
    judging.start()
    judging.join(10)
    assert outcome, "the check hung on the planted policy script"
    assert outcome[0].status is Status.FAIL and "cannot be trusted" in outcome[0].reason
