"""A synthetic fleet derived from one real node report: for tests and the scale benchmark.

Every host is a copy of the real report with its own name, a measured curve scaled by a
per-host factor (so the fleet has a spread and, on request, slow hosts), and a few checks
flipped, so the fleet report has the shape of a real fleet without inventing any field.
"""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path


def derive_hosts(base_report: dict, measurement: dict, count: int, slow_hosts: int = 0, seed: int = 7,
                 odd_driver_hosts: int = 0) -> list:
    """count node report dicts; the first slow_hosts run at ~60 % busbw, the next odd_driver_hosts
    report a different driver version."""
    rng = random.Random(seed)
    hosts = []
    for index in range(count):
        report = copy.deepcopy(base_report)
        name = f"gpu-{index:05d}"
        report["host"] = name
        report.setdefault("facts", {})["host"] = name
        factor = 0.6 if index < slow_hosts else rng.gauss(1.0, 0.01)
        bench = copy.deepcopy(measurement)
        for point in bench["details"].get("curve", []):
            point["busbw_gbps"] *= factor
        bench["observed"] = bench["observed"] * factor
        if "value" in bench["details"]:
            bench["details"]["value"] = bench["observed"]
        report["results"].append(bench)
        if slow_hosts <= index < slow_hosts + odd_driver_hosts:
            report["facts"].setdefault("gpus", {})["driver_version"] = "575.57.08"
        else:
            report["facts"].setdefault("gpus", {})["driver_version"] = "580.159.04"
        # A real fleet is mostly green: flip most FAILs to PASS, keep a few per host.
        for result in report["results"]:
            if result["status"] == "FAIL" and rng.random() < 0.999:
                result["status"] = "PASS"
                result["reason"] = ""
        hosts.append(report)
    return hosts


def write_fleet(directory: Path, reports: list) -> None:
    for report in reports:
        host_dir = directory / report["host"]
        host_dir.mkdir(parents=True, exist_ok=True)
        (host_dir / "report.json").write_text(json.dumps(report), encoding="utf-8")
