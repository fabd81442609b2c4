"""The ledger against the real kernel of this machine: record, change, restore, compare.

Only values this test owns are touched: sysctls inside a private network namespace and a loop
device the test attaches itself.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / ".cache" / "collections"
sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_core as core  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_restore as undo  # noqa: E402

from tests.helpers.loop_device import LoopUnavailable, attached_loop  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to write kernel values"),
]

NETNS_ROUND_TRIP = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_core as core
from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_restore as undo
paths = ["/proc/sys/net/core/somaxconn", "/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_mtu_probing"]
ledger = sys.argv[2]
before = {p: core.read_live_value("/", p) for p in paths}
core.record("/", ledger, paths, [], [], None)
core.write_live_value("/", paths[0], "8192")
core.write_live_value("/", paths[1], "4096 87380 16777216")
core.write_live_value("/", paths[2], "1")
applied = {p: core.read_live_value("/", p) for p in paths}
core.record("/", ledger, paths, [], [], None)
result = undo.restore("/", core.load_ledger("/", ledger), lambda argv: (0, "", ""))
after = {p: core.read_live_value("/", p) for p in paths}
print(json.dumps({"before": before, "applied": applied, "after": after, "errors": result.errors}))
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) not installed")
def test_real_sysctls_in_a_private_network_namespace_round_trip(tmp_path):
    ledger = str(tmp_path / "ledger.json")
    out = subprocess.run(["unshare", "--net", sys.executable, "-c", NETNS_ROUND_TRIP, str(COLLECTIONS), ledger],
                         capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(out.stdout)
    assert seen["errors"] == []
    assert seen["applied"] != seen["before"]
    assert seen["after"] == seen["before"]


@pytest.fixture
def loop_device(tmp_path):
    if shutil.which("losetup") is None:
        pytest.skip("losetup not installed")
    backing = tmp_path / "disk.img"
    backing.write_bytes(b"\0" * (8 * 1024 * 1024))
    try:
        with attached_loop(backing) as name:  # its queue settings are put back after the detach
            yield name
    except LoopUnavailable as exc:
        pytest.skip(f"cannot attach a loop device here: {exc}")


def test_real_block_device_scheduler_and_read_ahead_round_trip(tmp_path, loop_device):
    queue = f"/sys/block/{loop_device}/queue"
    paths = [f"{queue}/scheduler", f"{queue}/read_ahead_kb"]
    ledger = str(tmp_path / "ledger.json")
    offered = Path(queue, "scheduler").read_text().replace("[", "").replace("]", "").split()
    before = {p: core.read_live_value("/", p) for p in paths}
    other = next(s for s in offered if s != before[paths[0]])

    core.record("/", ledger, paths, [], [], None)
    core.write_live_value("/", paths[0], other)
    core.write_live_value("/", paths[1], "4096" if before[paths[1]] != "4096" else "8192")
    assert core.read_live_value("/", paths[0]) == other

    result = undo.restore("/", core.load_ledger("/", ledger), lambda argv: (0, "", ""))
    assert result.errors == []
    assert {p: core.read_live_value("/", p) for p in paths} == before
