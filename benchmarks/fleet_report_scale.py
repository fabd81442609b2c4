"""Build the fleet report from 10,000 node reports; print the wall time and the peak memory.

The node reports are derived from a real captured one (tests/fixtures/fleet/, see its README)
with varied measurements, a few slow hosts and a few odd drivers, written to a temporary
directory first. The timed part is what `tunefleet report DIR` does: read every report, build
the fleet model (outliers, drift, matrix), write JSON, JUnit, Markdown and HTML.

usage: python benchmarks/fleet_report_scale.py [--hosts 10000]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verify.fleet.model import load_fleet_dir  # noqa: E402
from verify.fleet.report import FORMATS, write_reports  # noqa: E402
from verify.fleet.summary import build_summary  # noqa: E402
from verify.fleet.synthetic import derive_hosts, write_fleet  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "fleet"
LIMIT_S = 5.0
LIMIT_BYTES = 1 << 30


def build(directory: str) -> int:
    """The timed part, in a process of its own so its peak memory is the report's alone."""
    began = time.perf_counter()
    nodes, errors = load_fleet_dir(directory)
    loaded = time.perf_counter()
    summary = build_summary(nodes, errors)
    built = time.perf_counter()
    written = write_reports(summary, Path(directory) / "out", FORMATS)
    done = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({
        "read_s": loaded - began, "model_s": built - loaded, "write_s": done - built, "wall_s": done - began,
        "cpu_s": usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime,
        "peak_rss_bytes": max(usage.ru_maxrss, children.ru_maxrss) * 1024,
        "bad_hosts": len(summary.bad_hosts), "first_bad": summary.bad_hosts[:5], "drift": len(summary.drift),
        "outliers": len(summary.outliers), "files": {p.name: p.stat().st_size for p in written},
        "json": "orjson" if _has_orjson() else "standard library json",
    }))
    return 0


def _has_orjson() -> bool:
    try:
        import orjson  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--stdlib-json", action="store_true", help="measure without orjson even where installed")
    parser.add_argument("--build", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stdlib_json:
        sys.modules["orjson"] = None  # makes `import orjson` fail, as on a controller without it
    if args.build:
        return build(args.build)
    base = json.loads((FIXTURES / "node_report_ci_vm.json").read_text())
    measurement = json.loads((FIXTURES / "crossnode_allreduce_gloo_2node.json").read_text())[0]
    with tempfile.TemporaryDirectory(prefix="tunefleet-scale-") as tmp:
        write_fleet(Path(tmp), derive_hosts(base, measurement, args.hosts, slow_hosts=4, odd_driver_hosts=3))
        size = sum(p.stat().st_size for p in Path(tmp).glob("*/report.json"))
        print(f"{args.hosts} node reports, {size / 1e6:.0f} MB on disk; load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")
        json_flag = ["--stdlib-json"] if args.stdlib_json else []
        child = subprocess.run([sys.executable, __file__, "--build", tmp, *json_flag], capture_output=True, text=True,
                               check=True)
    r = json.loads(child.stdout)
    print(f"read {r['read_s']:.2f} s, model {r['model_s']:.2f} s, write {r['write_s']:.2f} s")
    for name, size in r["files"].items():
        print(f"  {name}: {size / 1e6:.1f} MB")
    print(f"bad hosts: {r['bad_hosts']} (first {', '.join(r['first_bad'])}), outliers {r['outliers']}, "
          f"version drift {r['drift']}")
    print(f"JSON decoder: {r['json']}")
    print(f"wall time: {r['wall_s']:.2f} s (limit {LIMIT_S:.0f} s); CPU time: {r['cpu_s']:.2f} s")
    print(f"peak memory (max RSS of the report process and its readers): {r['peak_rss_bytes'] / 2**20:.0f} MiB "
          f"(limit {LIMIT_BYTES / 2**20:.0f} MiB)")
    return 0 if r["wall_s"] < LIMIT_S and r["peak_rss_bytes"] < LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
