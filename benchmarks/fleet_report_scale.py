"""Build the fleet report from 10,000 node reports; print the wall time and the peak memory.

The node reports are derived from a real captured one (tests/fixtures/fleet/, see its README)
with varied measurements, a few slow hosts and a few odd drivers, written to a temporary
directory first. The timed part is what `tunefleet report DIR` does: read every report, build
the fleet model (outliers, drift, matrix), write JSON, JUnit, Markdown and HTML.

With --slices N (issue 52) the reports are written as N slices' run directories, and the timed part starts
with what `tunefleet verify -i --slices N` and `tunefleet report DIR1 .. DIRN` do first: the slices joined
into one run directory (verify.fleet.slices.join_run_dirs: each host directory moved, the side files joined).

usage: python benchmarks/fleet_report_scale.py [--hosts 10000] [--slices N]
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
from verify.fleet.synthetic import derive_hosts  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "fleet"
LIMIT_S = 5.0
CHUNK = 10_000
LIMIT_BYTES = 1 << 30


def build(directory: str, slices: int = 0) -> int:
    """The timed part, in a process of its own so its peak memory is the report's alone."""
    joining = time.perf_counter()
    if slices:
        from verify.fleet.slices import join_run_dirs

        parts = [str(Path(directory) / f"slice-{i}") for i in range(slices)]
        directory = str(Path(directory) / "joined")
        os.mkdir(directory, 0o700)
        join_run_dirs(parts, directory, move=True)
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
        "join_s": began - joining, "read_s": loaded - began, "model_s": built - loaded, "write_s": done - built,
        "wall_s": done - began,
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
    parser.add_argument("--slices", type=int, default=0, help="write the reports as this many slices' run "
                        "directories and time their join first")
    parser.add_argument("--build", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stdlib_json:
        sys.modules["orjson"] = None  # makes `import orjson` fail, as on a controller without it
    if args.build:
        return build(args.build, args.slices)
    base = json.loads((FIXTURES / "node_report_ci_vm.json").read_text())
    measurement = json.loads((FIXTURES / "crossnode_allreduce_gloo_2node.json").read_text())[0]
    with tempfile.TemporaryDirectory(prefix="tunefleet-scale-") as tmp:
        names = [f"gpu-{i:05d}" for i in range(args.hosts)]
        where = dict.fromkeys(names, Path(tmp))
        if args.slices:
            from verify.fleet.slices import plan_slices

            for index, part in enumerate(plan_slices(names, args.slices)):
                os.mkdir(Path(tmp) / f"slice-{index}", 0o700)
                where.update(dict.fromkeys(part, Path(tmp) / f"slice-{index}"))
        # Past CHUNK hosts the first CHUNK derived reports repeat under new names (their serialized text, the
        # quoted name replaced): 100,000 derived reports held or derived one by one cost more than the report.
        hosts = derive_hosts(base, measurement, min(CHUNK, args.hosts), slow_hosts=4, odd_driver_hosts=3)
        texts = [json.dumps(host) for host in hosts]
        del hosts
        for index, name in enumerate(names):
            text = texts[index % CHUNK]
            if index >= CHUNK:
                text = text.replace(f'"{names[index % CHUNK]}"', f'"{name}"')
            host_dir = where[name] / name
            host_dir.mkdir()
            (host_dir / "report.json").write_text(text, encoding="utf-8")
        size = sum(p.stat().st_size for p in Path(tmp).glob("**/report.json"))
        print(f"{args.hosts} node reports, {size / 1e6:.0f} MB on disk; load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")
        json_flag = ["--stdlib-json"] if args.stdlib_json else []
        child = subprocess.run([sys.executable, __file__, "--build", tmp, "--slices", str(args.slices), *json_flag],
                               capture_output=True, text=True, check=True)
    r = json.loads(child.stdout)
    print(f"join {r['join_s']:.2f} s ({args.slices} slices), " if args.slices else "", end="")
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
