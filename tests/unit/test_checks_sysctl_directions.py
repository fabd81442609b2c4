"""verify's sysctl check against at_least recommendations, on the 2x H200 node's captured /proc/sys
(tests/fixtures/node/snapshots/gpu_h200: vm.max_map_count 8250343, tcp_rmem 4096 131072 33554432)."""
from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.fake_node import FakeTree, desired_state
from verify.checks import sysctl
from verify.result import Status

SNAPSHOT = Path(__file__).resolve().parents[1] / "fixtures/node/snapshots/gpu_h200/tree"


def judged(tmp_path, **sysctl_section) -> dict:
    if not (tmp_path / "proc").exists():
        shutil.copytree(SNAPSHOT / "proc", tmp_path / "proc")
    spec = desired_state(sysctl=dict({"settings": {"vm.max_map_count": 262144,
                                                   "net.ipv4.tcp_rmem": "4096 87380 268435456",
                                                   "vm.swappiness": 0},
                                      "skip_keys": [], "exact_keys": []}, **sysctl_section))
    return {r.check_id: r for r in sysctl.run(spec, FakeTree(tmp_path).node())}


def test_a_node_above_an_at_least_recommendation_passes_and_says_kept(tmp_path):
    results = judged(tmp_path)
    kept = results["sysctl.vm.max_map_count"]
    assert kept.status is Status.PASS
    assert kept.reason.startswith("8250343 is above the recommended 262144: kept")
    assert (kept.expected, kept.observed) == ("262144", "8250343")


def test_a_multi_field_value_must_reach_every_field(tmp_path):
    # the node's default (131072) is above, but its max (33554432) is below 268435456: the role raises it
    below = judged(tmp_path)["sysctl.net.ipv4.tcp_rmem"]
    assert below.status is Status.FAIL and "below the recommended 4096 87380 268435456" in below.reason
    (tmp_path / "proc/sys/net/ipv4/tcp_rmem").write_text("4096\t131072\t268435456\n")  # what the role leaves
    assert judged(tmp_path)["sysctl.net.ipv4.tcp_rmem"].status is Status.PASS


def test_an_exact_key_from_the_inventory_fails_above(tmp_path):
    forced = judged(tmp_path, exact_keys=["vm.max_map_count"])["sysctl.vm.max_map_count"]
    assert forced.status is Status.FAIL and "the desired state says 262144" in forced.reason
    (tmp_path / "proc/sys/vm/swappiness").write_text("10\n")  # a mode is exact: 10 is no "better" 0
    assert judged(tmp_path)["sysctl.vm.swappiness"].status is Status.FAIL


def test_a_node_below_fails_naming_the_variable(tmp_path):
    shutil.copytree(SNAPSHOT / "proc", tmp_path / "proc")
    (tmp_path / "proc/sys/vm/max_map_count").write_text("65530\n")
    low = judged(tmp_path)["sysctl.vm.max_map_count"]
    assert low.status is Status.FAIL and "sysctl_settings['vm.max_map_count']" in low.remediation


def test_the_desired_state_carries_the_inventorys_exact_keys():
    from verify.desired import render_spec

    assert render_spec()["sysctl"]["exact_keys"] == []
