"""The history at fleet scale: 10,000 hosts x 100 runs, then `tunefleet history` for one host and the fleet
regression pass, each timed as a person runs them (a new `python3 -m verify` process) and in-process.

    .venv/bin/python benchmarks/history_scale.py [--hosts 10000] [--runs 100] [--keep PATH]

The database is filled in bulk through the store's own schema (open_store makes and migrates it):
4 figures per run (all-reduce busbw, H2D per GPU, storage read) and the run's configuration set, with a
known set of planted regressions (every 1000th host's last run 20 % slower in each of its 4 figures)
that the pass must find.
Prints each timing and exits 1 if one is over the limit (2 s) or the planted regressions are not found.
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verify.history import regress  # noqa: E402
from verify.history.record import fleet_pass  # noqa: E402
from verify.history.store import open_store  # noqa: E402

LIMIT_S = 2.0
CHECKS = (("bench.nccl_allreduce", 340.0), ("bench.h2d.gpu0", 55.4), ("bench.h2d.gpu1", 55.3),
          ("bench.storage.odirect", 2.2))
PLANT_EVERY = 1000


def fill(path: str, hosts: int, runs: int) -> float:
    start = time.perf_counter()
    with open_store(path) as store:
        db = store.db
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO hosts (id, name) VALUES (?, ?)", ((h + 1, f"gpu-{h:05d}") for h in range(hosts)))
        db.executemany("INSERT INTO checks (id, name, unit) VALUES (?, ?, 'GB/s')",
                       ((i + 1, name) for i, (name, _) in enumerate(CHECKS)))
        db.executemany("INSERT INTO config_sets (id, digest, body) VALUES (?, ?, ?)",
                       ((1, "a", '{"facts.kernel":"6.8.0-45"}'), (2, "b", '{"facts.kernel":"6.8.0-47"}')))
        rng = random.Random(7)
        run_id = 0
        for r in range(runs):  # run by run across the fleet, as fleet runs arrive
            started = f"2026-{1 + r // 28:02d}-{1 + r % 28:02d}T00:00:00+00:00"
            rows, figures = [], []
            for h in range(hosts):
                run_id += 1
                config = 2 if (r == runs - 1 and h % 997 == 0) else 1
                rows.append((run_id, h + 1, started, "fleet", f"run-{r:03d}", "PASS", 0, config))
                slow = 0.8 if (r == runs - 1 and h % PLANT_EVERY == 0) else 1.0
                for c, (_, nominal) in enumerate(CHECKS):
                    figures.append((run_id, c + 1, h + 1, "PASS", round(nominal * slow * rng.uniform(0.98, 1.02), 3)))
            db.executemany("INSERT INTO runs (id, host_id, started_at, source, run_key, worst, exit_code, "
                           "config_set_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            db.executemany("INSERT INTO measurements (run_id, check_id, host_id, status, value) VALUES (?, ?, ?, ?, ?)",
                           figures)
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return time.perf_counter() - start


def timed_cli(argv: list) -> tuple:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "verify", *argv], capture_output=True, text=True, env=env, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"tunefleet {' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return elapsed, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--keep", default=None, help="build (or reuse) the database here instead of a temporary one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tunefleet-history-scale-") as tmp:
        path = args.keep or os.path.join(tmp, "history.sqlite")
        if not (args.keep and os.path.exists(path)):
            fill_s = fill(path, args.hosts, args.runs)
            print(f"filled {args.hosts} hosts x {args.runs} runs x {len(CHECKS)} figures in {fill_s:.1f} s "
                  f"({os.path.getsize(path) / 2**20:.0f} MiB)")
        host = f"gpu-{args.hosts // 2:05d}"
        one_s, table = timed_cli(["history", "--history", path, "--host", host])
        csv_s, _ = timed_cli(["history", "--history", path, "--host", host, "--format", "csv"])
        fleet_s, text = timed_cli(["history", "--history", path, "--regressions"])
        with open_store(path, create=False) as store:
            start = time.perf_counter()
            regressions, drift = fleet_pass(store, regress.Settings())
            pass_s = time.perf_counter() - start
        planted = (args.hosts + PLANT_EVERY - 1) // PLANT_EVERY * len(CHECKS)  # every figure of those runs
        print(f"tunefleet history --host {host}: {one_s:.2f} s ({table.count(chr(10)) - 2} runs shown); "
              f"--format csv {csv_s:.2f} s")
        print(f"tunefleet history --regressions (fleet pass, new process): {fleet_s:.2f} s; in-process {pass_s:.2f} s: "
              f"{len(regressions)} regressions (planted {planted}), {len(drift)} config changes")
        ok = max(one_s, csv_s, fleet_s) < LIMIT_S and len(regressions) == planted and text.startswith(
            f"{planted} regressions")
        print(f"{'PASS' if ok else 'FAIL'}: each under {LIMIT_S:g} s and the planted regressions found")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
