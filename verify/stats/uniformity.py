"""Fleet uniformity: the versions that must match across a fleet (NVIDIA driver, CUDA, kernel, NCCL, GPU
VBIOS, HCA firmware), flattened per host for `outliers.version_drift`, which flags the hosts that differ
from the majority.

Firmware is compared per device model, as the set of distinct versions a host runs: a host with one GPU
fewer is not a VBIOS drift (the presence check says that), a host whose GPUs disagree among themselves
is ("96.00.74.00.1C,96.00.89.00.01"), and a fleet mixing HCA models does not read every model's
firmware as drift of the other's.
"""
from __future__ import annotations

from verify.stats.outliers import versions_of

FIRMWARE_FACT = "firmware"  # verify.facts.firmware.firmware_facts, under the node's facts


def fleet_versions(facts: dict) -> dict:
    """The version facts of one node report: versions_of() for the rest, the firmware grouped by model."""
    if not isinstance(facts, dict):
        return {}
    flat = versions_of({key: value for key, value in facts.items() if key != FIRMWARE_FACT})
    flat.update(firmware_versions(facts.get(FIRMWARE_FACT)))
    return flat


def firmware_versions(firmware) -> dict:
    """{"firmware.vbios[NVIDIA H200]": "96.00.A5.00.03", "firmware.hca_fw[MT4129]": "28.39.1002"}."""
    if not isinstance(firmware, dict):
        return {}
    grouped: dict = {}
    for kind, items, model_keys, value_key in (("vbios", firmware.get("gpus"), ("name",), "vbios"),
                                               ("hca_fw", firmware.get("hcas"), ("hca_type", "board_id"), "fw_ver")):
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get(value_key), str) or not item[value_key]:
                continue
            model = next((str(item[k]) for k in model_keys if item.get(k)), "unknown model")
            grouped.setdefault(f"firmware.{kind}[{model}]", set()).add(item[value_key])
    return {key: ",".join(sorted(values)) for key, values in grouped.items()}
