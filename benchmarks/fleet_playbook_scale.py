"""Wall time of `tunefleet verify -i` (playbooks/verify.yml) for fleets of 1, 3, ... containers.

Each fleet is N systemd containers of the molecule image (molecule/image/build.sh) on one podman
network, reached with the podman connection; the inventory is the molecule fleet scenario's
settings (config checks and path MTU to its peers, every other node in fleets this small; no
benchmarks). Needs root, podman and CONTAINERS_CONF=molecule/containers.conf, as the molecule scenarios do.

usage: python benchmarks/fleet_playbook_scale.py [--sizes 1,3,6]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from container_fleet import CONTAINER_VARS, container_fleet, network

ROOT = Path(__file__).resolve().parent.parent


def measure(size: int, work: Path) -> float:
    with container_fleet("tf-scale", size) as names:
        inventory = work / f"fleet{size}.json"
        inventory.write_text(json.dumps({"all": {"hosts": dict.fromkeys(names, {}), "vars": CONTAINER_VARS}}))
        began = time.perf_counter()
        done = subprocess.run([str(Path(sys.executable).parent / "tunefleet"), "verify", "-i", str(inventory),
                               "--out", str(work / "reports"), "--quiet"], capture_output=True, text=True)
        elapsed = time.perf_counter() - began
        if done.returncode not in (0, 1, 2) or "reports:" not in done.stdout:
            print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
            raise SystemExit(f"fleet of {size}: tunefleet verify failed (rc {done.returncode})")
        return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,3,6")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with network(), tempfile.TemporaryDirectory(prefix="tunefleet-playbook-scale-") as tmp:
        base = None
        for size in sizes:
            elapsed = measure(size, Path(tmp))
            base = base or elapsed
            print(f"{size:3} hosts: {elapsed:6.1f} s wall ({elapsed / base:.2f}x the first fleet's time, "
                  f"{elapsed / size:.1f} s per host)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
