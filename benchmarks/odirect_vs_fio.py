"""O_DIRECT read throughput of tunefleet's built-in reader next to fio, same file and settings.

    python3 benchmarks/odirect_vs_fio.py [--dir DIR] [--size 2G] [--queue-depth 1] [--rounds 3]

Both read the whole file once per round with 1 MiB blocks and O_DIRECT; rounds alternate
(fio, built-in, fio, ...) so drift on the disk hits both alike. fio uses libaio with
iodepth = queue depth (a QD1 libaio run is the synchronous case). Prints every round and the
medians; exits 1 when the built-in median is off fio's by more than --tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from verify.bench.common import parse_size  # noqa: E402
from verify.bench.odirect_read import make_file, read_direct  # noqa: E402


def fio_read_gbps(path: str, size: int, depth: int) -> float:
    argv = [
        "fio",
        "--name=tunefleet-odirect",
        f"--filename={path}",
        "--rw=read",
        "--bs=1M",
        "--direct=1",
        "--ioengine=libaio",
        f"--iodepth={depth}",
        "--numjobs=1",
        f"--size={size}",
        "--output-format=json",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    job = json.loads(out.stdout)["jobs"][0]["read"]
    return job["io_bytes"] / (job["runtime"] / 1000.0) / 1e9 if job.get("runtime") else job["bw_bytes"] / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/var/tmp",
                        help="where a fresh private directory holds the file read (made here, removed after)")
    parser.add_argument("--size", default="2G")
    parser.add_argument("--queue-depth", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    if not shutil.which("fio"):
        print("fio is not installed", file=sys.stderr)
        return 2
    size = parse_size(args.size)
    # Never a fixed name: a fresh 0700 directory, so the file measured is the one this run wrote.
    scratch = tempfile.mkdtemp(prefix="tunefleet-odirect-vs-fio-", dir=args.dir)
    path = os.path.join(scratch, "read.bin")
    make_file(path, size)
    try:
        fio, ours = [], []
        for index in range(args.rounds):
            fio.append(fio_read_gbps(path, size, args.queue_depth))
            ours.append(read_direct(path, 1 << 20, args.queue_depth, limit=size)["gbps"])
            print(f"round {index + 1}: fio {fio[-1]:.3f} GB/s   built-in {ours[-1]:.3f} GB/s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    fio_median, ours_median = statistics.median(fio), statistics.median(ours)
    ratio = ours_median / fio_median
    print(
        f"QD{args.queue_depth}, 1 MiB, O_DIRECT, {args.size}: fio median {fio_median:.3f} GB/s, "
        f"built-in median {ours_median:.3f} GB/s, built-in/fio = {ratio:.3f}"
    )
    return 0 if abs(ratio - 1.0) <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
