"""Compare the built-in all-reduce engine with nccl-tests from two `tunefleet bench nccl --json` files.

    python3 benchmarks/nccl_fidelity.py NCCLTESTS.json BUILTIN.json [--sizes 1G,4G] [--target 0.98]

Prints busbw per size for both and the ratio built-in / all_reduce_perf; exits 1 when a ratio is
under the target (the project's fidelity target: 0.98 at 1 GiB and 4 GiB, same machine, same run).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from verify.bench.common import human_bytes, parse_size  # noqa: E402


def curve(path: str) -> dict:
    results = json.loads(Path(path).read_text(encoding="utf-8"))
    nccl = next(r for r in results if r["check_id"] == "bench.nccl_allreduce")
    return {p["size_bytes"]: p["busbw_gbps"] for p in nccl["details"]["curve"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nccl_tests")
    parser.add_argument("builtin")
    parser.add_argument("--sizes", default="1G,4G")
    parser.add_argument("--target", type=float, default=0.98)
    args = parser.parse_args()
    reference, ours = curve(args.nccl_tests), curve(args.builtin)
    worst = None
    for size in (parse_size(s) for s in args.sizes.split(",")):
        if size not in reference or size not in ours:
            print(f"{human_bytes(size)}: missing from one of the curves")
            return 2
        ratio = ours[size] / reference[size]
        worst = ratio if worst is None else min(worst, ratio)
        print(f"{human_bytes(size):>8}: all_reduce_perf {reference[size]:7.1f} GB/s  built-in {ours[size]:7.1f} GB/s"
              f"  ratio {ratio:.3f}")
    return 0 if worst is not None and worst >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
