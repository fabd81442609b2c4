"""`tunefleet compare` of two 10,000-host fleet runs; print the wall time of each phase (issue 51: < 10 s on the
2-core CI machine).

Each host is the real 2x H200 node report (tests/fixtures/node/gpu_machine_report.json) with the real GPU engine
rows the real `verify.bench.gpu.run` makes from the 2x H200 engine capture (tests/unit/test_fleet_baseline.py's
engine_rows: HBM and matmul per GPU, copies per pair and direction: 8 figures a host), every figure at 1 %
seeded noise. The after run has a 3 % drop of the pair copies and one slow node (HBM at 85 %).

Two ways in, each timed in a process of its own, end to end (read, compare, write JSON, Markdown and HTML):
- history (default): both runs recorded into a history store as a fleet run records them
  (verify.history.record.run_record), compared by run key: `tunefleet compare run-a run-b --history H`;
- --directories: both runs written as run directories of node reports: `tunefleet compare DIR_A DIR_B`
  (reading 20,000 node reports through the fleet report's loader is most of it).

usage: python benchmarks/compare_scale.py [--hosts 10000] [--directories] [--keep DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))  # bench_helpers, as the test module imports it

LIMIT_S = 10.0
SLOW_HOST = "gpu-00042"


def template() -> tuple:
    """(the real report with the real engine rows, the rows' check ids)."""
    from verify.bench import gpu

    gpu.module_available = lambda name: True  # the engine's reply is the capture: torch need not be here
    from bench_helpers import fixture
    from test_fleet_baseline import H200_PROFILE, engine_rows, node_report

    from verify.engine import read_result

    rows = engine_rows(read_result(fixture("gpu_engine_h200x2.stdout")), 2, H200_PROFILE)
    report = node_report("template", rows)
    figures = [r["check_id"] for r in rows if r["check_id"] != "bench.gpu"]  # bench.gpu: the run's wall time
    return report, figures


def derive(report: dict, figures: list, hosts: int, seed: int, after: bool):
    """The run's node reports, one at a time."""
    rng = random.Random(seed)
    for index in range(hosts):
        host = f"gpu-{index:05d}"
        copy_ = copy.deepcopy(report)
        copy_["host"] = copy_["facts"]["host"] = host
        for result in copy_["results"]:
            if result["check_id"] not in figures:
                continue
            factor = rng.gauss(1.0, 0.01)
            if after and result["check_id"].startswith("bench.gpu_copy"):
                factor *= 0.97
            if after and host == SLOW_HOST and result["check_id"].startswith("bench.gpu_hbm"):
                factor *= 0.85
            result["observed"] = round(result["observed"] * factor, 3)
            if isinstance(result.get("details"), dict) and "value" in result["details"]:
                result["details"]["value"] = result["observed"]
        yield copy_


def write_run(directory: Path, reports) -> None:
    for report in reports:
        (directory / report["host"]).mkdir(parents=True)
        (directory / report["host"] / "report.json").write_text(json.dumps(report), encoding="utf-8")


def record_runs(history: str, runs: dict) -> None:
    """Each run's reports into the history, as a fleet run records them (one transaction a run)."""
    from verify.history.record import run_record
    from verify.history.store import open_store
    from verify.report import results_of

    with open_store(history) as store:
        for key, reports in runs.items():
            store.record_many([run_record(r, results_of(r), "fleet", key) for r in reports])


def timed(before: str, after: str, out: str, history: str) -> int:
    """The timed part, in a process of its own: what `tunefleet compare` does, without printing."""
    from verify.fleet import compare

    began = time.perf_counter()
    if history:
        from verify.history.store import open_store
        from verify.history.window import parse_window

        with open_store(history, create=False) as store:
            side_before = compare.side_from_window(store, parse_window(before))
            side_after = compare.side_from_window(store, parse_window(after))
    else:
        side_before = compare.side_from_directory(before)
        side_after = compare.side_from_directory(after)
    read = time.perf_counter()
    document = compare.compare(side_before, side_after, compare.Settings())
    compared = time.perf_counter()
    compare.write(document, Path(out), list(compare.FORMATS))
    done = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({
        "read_s": read - began, "compare_s": compared - read, "write_s": done - compared, "wall_s": done - began,
        "cpu_s": usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime,
        "peak_rss_bytes": max(usage.ru_maxrss, children.ru_maxrss) * 1024,
        "figures": len(document["figures"]), "regressed": [f["figure"] for f in document["figures"] if f["regression"]],
        "apart": [n["host"] for n in document["nodes"] if n["apart_from_fleet"]],
        "exit_code": document["verdict"]["exit_code"],
    }))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--directories", action="store_true", help="compare two run directories of node reports "
                                                                    "instead of two runs of the history")
    parser.add_argument("--keep", metavar="DIR", help="prepare the runs in DIR (a new directory) and keep them; "
                                                       "an existing DIR prepared so is timed again as it is")
    parser.add_argument("--timed", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.timed:
        return timed(*args.timed)
    with contextlib.ExitStack() as stack:
        tmp = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="tunefleet-compare-"))
        prepared = Path(tmp, "prepared").is_file()
        began = time.perf_counter()
        if not prepared:
            report, figures = template()
            Path(tmp).mkdir(exist_ok=True)
            runs = {"run-a": derive(report, figures, args.hosts, seed=1, after=False),
                    "run-b": derive(report, figures, args.hosts, seed=2, after=True)}
            if args.directories:
                for key, reports in runs.items():
                    write_run(Path(tmp) / key, reports)
            else:
                record_runs(f"{tmp}/history.sqlite", runs)
            Path(tmp, "prepared").write_text(f"{args.hosts} hosts\n", encoding="utf-8")
        if args.directories:
            timed_args = [f"{tmp}/run-a", f"{tmp}/run-b", f"{tmp}/out", ""]
            how = "two run directories"
        else:
            timed_args = ["run-a", "run-b", f"{tmp}/out", f"{tmp}/history.sqlite"]
            how = "two runs of the history, by run key"
        print(f"{how}: {Path(tmp, 'prepared').read_text().strip()}, 8 figures each, prepared in "
              f"{time.perf_counter() - began:.0f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        child = subprocess.run([sys.executable, __file__, "--timed", *timed_args], capture_output=True, text=True,
                               check=True)
        load = os.getloadavg()[0]
    r = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"read both runs {r['read_s']:.2f} s, compare {r['compare_s']:.2f} s, write JSON/Markdown/HTML "
          f"{r['write_s']:.2f} s")
    print(f"found: {len(r['regressed'])} of {r['figures']} figures regressed ({', '.join(r['regressed'])}); "
          f"apart from the fleet: {', '.join(r['apart']) or 'none'} (planted {SLOW_HOST}); exit {r['exit_code']}")
    print(f"wall time: {r['wall_s']:.2f} s (limit {LIMIT_S:.0f} s); CPU time: {r['cpu_s']:.2f} s; "
          f"peak memory {r['peak_rss_bytes'] / 2**20:.0f} MiB; load average after {load:.1f}")
    return 0 if r["wall_s"] < LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
