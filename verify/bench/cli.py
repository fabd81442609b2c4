"""`tunefleet bench NAME [options]`: run one benchmark family on this node and print its results."""

from __future__ import annotations

import argparse
import json
import sys

from verify.bench import FAMILIES, canonical, run_benchmarks
from verify.bench.common import parse_size
from verify.node import Node
from verify.result import exit_code, sort_for_people
from verify.safe_io import for_terminal


def build_parser(family: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"tunefleet bench {family}")
    parser.add_argument("--profile", help="hardware profile for thresholds (see `tunefleet profiles`)")
    parser.add_argument("--spec", help="desired state JSON (its verify.thresholds override the profile)")
    parser.add_argument("--json", dest="json_out", help="write the results as JSON to this file")
    parser.add_argument("--tries", type=int, help="tries; the first passing one wins, all are recorded")
    parser.add_argument("--timeout-s", type=float, help="per-try timeout; a hung run is killed and reported")
    if family == "nccl":
        parser.add_argument("--engine", choices=("auto", "nccl-tests", "torch"))
        parser.add_argument("--backend", choices=("nccl", "gloo"), help="gloo: the torch engine on CPU")
        parser.add_argument("--gpus", type=int, help="ranks (default: the profile's gpu_count or /dev/nvidiaN)")
        parser.add_argument("--min-bytes", type=parse_size)
        parser.add_argument("--max-bytes", type=parse_size)
        parser.add_argument("--iters", type=int)
        parser.add_argument("--warmup", type=int)
        parser.add_argument("--binary", help="path of all_reduce_perf")
        parser.add_argument("--save-raw", help="directory to keep every try's raw stdout/stderr")
    elif family == "rdma":
        parser.add_argument("--tests", help="comma list: write_bw,read_bw,send_bw,write_lat,send_lat")
        parser.add_argument("--devices", help="comma list of HCAs (default: every one with an active port)")
        parser.add_argument("--peer", help="server host for a two-node run (ssh); default loopback")
        parser.add_argument("--gid-index", type=int, help="-x GID index (RoCE)")
        parser.add_argument("--use-cuda", type=int, help="GPU index for --use_cuda (GPUDirect RDMA)")
        parser.add_argument("--bidirectional", action="store_true", default=None)
        parser.add_argument("--size-bytes", type=parse_size)
        parser.add_argument("--port", type=int, help="first TCP port (one per device)")
    elif family == "storage":
        parser.add_argument("--file", help="read this file (default: write and remove a scratch file)")
        parser.add_argument("--dir", help="where the scratch file goes")
        parser.add_argument("--size-bytes", type=parse_size)
        parser.add_argument("--queue-depth", type=int)
        parser.add_argument("--gpu", type=int)
        parser.add_argument("--engines", help="comma list of odirect,cufile,gdsio")
    elif family == "gpu":
        parser.add_argument("--seconds", type=float, help="timed window of each per-GPU figure")
        parser.add_argument("--spread-pct", type=float, help="FAIL a GPU or pair this far below the node median")
        parser.add_argument("--serial", action="store_true", default=None, help="GPUs one at a time")
    elif family == "burn":
        parser.add_argument("--duration-s", type=float, help="how long every GPU runs the matmul (default 60)")
        parser.add_argument("--clock-fraction", type=float, help="FAIL under this fraction of the max SM clock")
    elif family == "hostcopy":
        parser.add_argument("--size-bytes", type=parse_size)
        parser.add_argument("--iters", type=int)
    return parser


def _overrides(family: str, options: argparse.Namespace) -> dict:
    skip = {"profile", "spec", "json_out"}
    values = {k: v for k, v in vars(options).items() if k not in skip and v is not None}
    if family == "storage" and "engines" in values:
        values["engines"] = tuple(e.strip() for e in values["engines"].split(","))
    if family == "rdma":
        for key in ("tests", "devices"):
            if key in values:
                values[key] = [v.strip() for v in values[key].split(",") if v.strip()]
    return values


def main(args) -> int:
    if args.name in ("list", "ls"):
        for name, module in sorted(FAMILIES.items()):
            print(f"{name:10} {module}")
        return 0
    family = canonical(args.name)
    if family is None:
        print(
            f"tunefleet bench: unknown benchmark {args.name!r}; known: {', '.join(sorted(FAMILIES))}", file=sys.stderr
        )
        return 2
    options = build_parser(family).parse_args(list(args.args or []))
    profile, spec = None, {"verify": {"thresholds": {}}}
    try:
        if options.profile:
            from verify.profiles import load_profile

            profile = load_profile(options.profile)
        if options.spec:
            from verify.desired import load_spec_file

            spec = load_spec_file(options.spec)
    except ValueError as exc:
        print(f"tunefleet bench: {exc}", file=sys.stderr)
        return 2
    results = run_benchmarks(spec, profile, Node(), [family], {family: _overrides(family, options)})
    for item in sort_for_people(results):
        print(for_terminal(f"{item.status.value:5} {item.check_id:32} {item.reason}"))
    if options.json_out:
        from verify.safe_io import write_file_atomic  # may run as root: no symlink followed

        write_file_atomic(options.json_out, json.dumps([r.to_dict() for r in results], indent=2, default=str))
    return exit_code(results)
