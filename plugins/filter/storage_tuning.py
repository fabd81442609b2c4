# Copyright: tunefleet developers
# Apache License 2.0 (see LICENSE)
"""Filters for the storage role: which devices cannot take the scheduler, and the sysfs values to write."""
from __future__ import annotations


def storage_scheduler_refusals(devices: list, scheduler: str) -> list:
    return [
        f"{device['name']} offers {' '.join(device['schedulers']) or 'no scheduler'}, not {scheduler!r}"
        for device in devices
        if scheduler not in device["schedulers"]
    ]


def storage_values(devices: list, scheduler: str, read_ahead_kb: int) -> dict:
    values = {}
    for device in devices:
        queue = f"/sys/block/{device['name']}/queue"
        values[f"{queue}/scheduler"] = scheduler
        values[f"{queue}/read_ahead_kb"] = int(read_ahead_kb)
    return values


class FilterModule:
    def filters(self):
        return {
            "storage_scheduler_refusals": storage_scheduler_refusals,
            "storage_values": storage_values,
        }
