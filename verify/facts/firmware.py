"""Firmware the fleet report compares across hosts (verify/stats/uniformity.py): each GPU's VBIOS, from
the health checks' one nvidia-smi query (no second call), and each RDMA HCA's firmware, type and board
from /sys/class/infiniband (fw_ver, hca_type, board_id)."""
from __future__ import annotations

from verify.facts.pci import driver_reason
from verify.node import Node


def firmware_facts(node: Node) -> dict:
    facts: dict = {"gpus": [], "hcas": []}
    reason = driver_reason(node)
    if reason:
        facts["gpus_unavailable"] = reason
    else:
        from verify.facts import health_smi

        gpus, why = health_smi.query(node)
        facts["gpus"] = [{"index": g.index, "bus_id": g.bus_id, "name": g.name, "vbios": g.text("vbios_version")}
                         for g in gpus]
        if why:
            facts["gpus_unavailable"] = why
    for device in node.listdir("/sys/class/infiniband"):
        base = f"/sys/class/infiniband/{device}"
        facts["hcas"].append({"device": device, "fw_ver": node.read_value(f"{base}/fw_ver"),
                              "hca_type": node.read_value(f"{base}/hca_type"),
                              "board_id": node.read_value(f"{base}/board_id")})
    return facts
