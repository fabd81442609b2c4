"""Path MTU failures that all point at one host are blamed on that host, not on the fleet."""
from __future__ import annotations

from tests.unit.test_fleet_report import base
from verify.fleet.model import parse_node_report
from verify.fleet.summary import build_summary
from verify.fleet.synthetic import derive_hosts

ADDRESSES = {"gpu-00000": ["10.0.0.10"], "gpu-00001": ["10.0.0.11"], "gpu-00002": ["10.0.0.12"],
             "gpu-00003": ["10.0.0.13"]}


def path_mtu(peer: str, ok: bool) -> dict:
    """The shape verify/checks/path_mtu.py gives a peer that answers small pings but not 9000-byte ones."""
    if ok:
        return {"check_id": f"network.path_mtu.{peer}", "role": "network", "status": "PASS", "expected": 9000,
                "observed": 9000, "reason": f"9000-byte packets reach {peer} unfragmented", "remediation": "",
                "details": {}}
    return {"check_id": f"network.path_mtu.{peer}", "role": "network", "status": "FAIL", "expected": 9000,
            "observed": "< 9000", "reason": f"{peer} answers small pings but not 9000-byte ones: a switch port or "
            "the peer is below MTU 9000", "remediation": "network_mtu", "details": {}}


def fleet_with_bad_port(bad: str) -> list:
    report, measurement = base()
    hosts = derive_hosts(report, measurement, 4)
    for host in hosts:
        host["results"] = [r for r in host["results"] if r["status"] != "FAIL"]
        for peer, addrs in ADDRESSES.items():
            if peer != host["host"]:
                host["results"].append(path_mtu(addrs[0], ok=bad not in (peer, host["host"])))
    return [parse_node_report(h, h["host"]) for h in hosts]


def test_the_host_everybody_fails_to_reach_is_the_one_bad_host():
    summary = build_summary(fleet_with_bad_port("gpu-00002"), [], ADDRESSES)
    assert summary.bad_hosts == ["gpu-00002"]
    row = summary.rows[0]
    assert row.problems[0].check_id == "fleet.path_mtu_blame"
    assert row.problems[0].reason.startswith("3 of 3 hosts cannot reach gpu-00002 with full-MTU packets")
    others = [r for r in summary.rows if r.host != "gpu-00002"]
    assert {r.worst for r in others} == {"WARN"}
    assert all("(the fleet blames gpu-00002)" in p.reason for r in others for p in r.problems)


def test_without_the_address_map_every_failing_host_stays_failed():
    summary = build_summary(fleet_with_bad_port("gpu-00002"), [], None)
    assert sorted(summary.bad_hosts) == ["gpu-00000", "gpu-00001", "gpu-00002", "gpu-00003"]
