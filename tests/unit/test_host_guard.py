"""The host-state guard around `make test` (molecule/host_guard.sh): it sees a host loop device's
queue settings change, passes a command that changes nothing, and expects podman's own first-run
changes (it snapshots after a podman warm-up)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.loop_device import QUEUE_TUNABLES, queue_settings

REPO = Path(__file__).resolve().parents[2]
GUARD = REPO / "molecule" / "host_guard.sh"
sys.path.insert(0, str(REPO / "molecule" / "shared" / "files"))
import node_state  # noqa: E402


def test_the_host_snapshot_holds_every_block_devices_queue():
    devices = sorted(os.listdir("/sys/block"))
    if not devices:
        pytest.skip("no block devices visible here")
    block = node_state.snapshot([], [], host=True)["state"]["block"]
    assert {key.rsplit(".", 1)[0] for key in block} == set(devices)
    assert {key.rsplit(".", 1)[1] for key in block} == set(QUEUE_TUNABLES)


def guard(*command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TUNEFLEET_MOLECULE_ALLOW_HOST_DRIFT"}
    env["PYTHON"] = sys.executable
    return subprocess.run([str(GUARD), *command], capture_output=True, text=True, env=env, timeout=180)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or not Path("/sys/block/loop0/queue/read_ahead_kb").exists(),
                    reason="needs root and a loop device")
def test_a_changed_loop_device_read_ahead_fails_the_guard_and_an_unchanged_host_passes():
    device = sorted(d for d in os.listdir("/sys/block") if d.startswith("loop"))[-1]
    path = Path("/sys/block") / device / "queue" / "read_ahead_kb"
    before = queue_settings(device)
    other = "256" if before["read_ahead_kb"] != "256" else "512"
    try:
        changed = guard("sh", "-c", f"echo {other} > {path}")
        assert changed.returncode == 1, changed.stdout + changed.stderr
        assert f"block: {device}.read_ahead_kb: '{before['read_ahead_kb']}' -> '{other}'" in changed.stdout
    finally:
        path.write_text(before["read_ahead_kb"])
    clean = guard("true")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert guard("false").returncode == 1  # the command's own failure is kept
