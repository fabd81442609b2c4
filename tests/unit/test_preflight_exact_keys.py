"""sysctl_exact_keys (issue 26 item 7) is judged by preflight before any role changes anything."""
from __future__ import annotations

from tests.unit.test_preflight import build_host, judge


def test_exact_keys_must_name_keys_the_inventory_sets(tmp_path):
    root = build_host(tmp_path)
    assert judge(root, sysctl_exact_keys=[]) == []
    assert judge(root, sysctl_exact_keys=["vm.swappiness"], sysctl_settings={"vm.swappiness": 0}) == []
    unset = judge(root, sysctl_exact_keys=["vm.max_map_count"], sysctl_settings={"vm.swappiness": 0})
    assert len(unset) == 1 and "sysctl_exact_keys" in unset[0] and "'vm.max_map_count'" in unset[0]
    assert "neither sysctl_settings nor sysctl_extra_settings sets" in unset[0]
    bad = judge(root, sysctl_exact_keys="vm.max_map_count")
    assert len(bad) == 1 and "must be a list of sysctl keys" in bad[0]
    assert "is not a sysctl key" in judge(root, sysctl_exact_keys=["../etc"], sysctl_settings={})[0]
