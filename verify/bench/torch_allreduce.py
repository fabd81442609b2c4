"""Built-in all-reduce engine: torch.distributed, one process per GPU (gloo: per CPU rank).

Run as `python3 -m verify.bench.torch_allreduce ...`; it prints one row per size to stderr while
it runs and one marked JSON line on stdout at the end. Timing follows nccl-tests: `iters`
back-to-back all-reduces between two CUDA events after `warmup` untimed ones, the slowest rank's
time counts, algbw = bytes / time, busbw = algbw * 2(n-1)/n, GB = 1e9 bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import timedelta

from verify.bench.common import parse_size
from verify.engine import emit_result
from verify.payload_schema import NUMBER, ListOf, Maybe

# One all-reduce size of the curve, as allreduce_rows writes it (verify/fleet/multinode.py reads the same).
ROW_SCHEMA = {"size_bytes": int, "count": int, "dtype": str, "redop": str, "time_us": NUMBER, "algbw_gbps": NUMBER,
              "busbw_gbps": NUMBER, "wrong": int}
# What the engine emits (verify.payload_schema.checked_payload checks it where it enters verify).
# sendrecv_rows: the send/recv curve between ranks (verify/fleet/nccl_pair.py's pair test asks for it).
PAYLOAD_SCHEMA = {"world_size": int, "rows": ListOf(ROW_SCHEMA), "nccl_version": Maybe(str),
                  "sendrecv_rows": Maybe(ListOf(ROW_SCHEMA))}


def sweep(min_bytes: int, max_bytes: int, factor: int = 2) -> list:
    """Sizes from min to max by factor, always ending exactly at max (the size that is judged)."""
    sizes, size = [], max(4, min_bytes)
    while size < max_bytes:
        sizes.append(size)
        size *= factor
    sizes.append(max_bytes)
    return sizes


def bus_factor(world: int) -> float:
    return 2.0 * (world - 1) / world if world > 1 else 1.0


def _seconds_per_iter(torch, dist, tensor, iters: int, device, step=None) -> float:
    """Mean time of `iters` back-to-back all-reduces (or `step(tensor)`s) on this rank.

    GPU: between two CUDA events on the stream the collectives run on, as nccl-tests times
    (host timers would add launch and synchronisation costs). CPU (gloo): perf_counter, since
    gloo's all_reduce returns only when the data has moved.
    """
    step = step or dist.all_reduce
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step(tensor)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0 / iters
    began = time.perf_counter()
    for _ in range(iters):
        step(tensor)
    return (time.perf_counter() - began) / iters


def timing_method(device) -> str:
    return "cuda-events" if device.type == "cuda" else "perf_counter"


def allreduce_rows(dist, device, rank: int, world: int, sizes: list, iters: int, warmup: int, on_row=None) -> list:
    """THE all-reduce timing loop: verify.bench.torch_allreduce (one node) and
    verify.fleet.multinode (many) both measure with it, so their figures stay comparable.

    Runs inside an initialised process group. Per size: `warmup` untimed all-reduces, a barrier,
    `iters` timed ones; the slowest rank's time counts; then a correctness pass like nccl-tests'
    #wrong (every rank contributes rank+1). algbw = bytes / time, busbw = algbw * 2(n-1)/n, GB = 1e9.
    Every rank gets the same rows; `on_row(row)` is called as each size finishes.
    """
    import torch

    factor = bus_factor(world)
    rows = []
    for size in sizes:
        count = max(1, size // 4)
        nbytes = count * 4
        tensor = torch.zeros(count, dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        seconds = _seconds_per_iter(torch, dist, tensor, iters, device)
        slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = float(slowest.item())
        tensor.fill_(float(rank + 1))
        dist.all_reduce(tensor)
        wrong = torch.tensor([int((tensor != world * (world + 1) / 2.0).sum().item())], dtype=torch.int64,
                             device=device)
        dist.all_reduce(wrong)
        del tensor
        algbw = nbytes / seconds / 1e9
        row = {
            "size_bytes": nbytes,
            "count": count,
            "dtype": "float",
            "redop": "sum",
            "time_us": seconds * 1e6,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * factor,
            "wrong": int(wrong.item()),
        }
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def sendrecv_rows(dist, device, rank: int, world: int, sizes: list, iters: int, warmup: int, on_row=None) -> list:
    """Send/recv between ranks with allreduce_rows' timing loop (warmup, barrier, `iters` timed, the
    slowest rank counts), as nccl-tests' sendrecv_perf: every rank sends `size` bytes to rank+1 and
    receives as many from rank-1 at once, so on 2 ranks across 2 nodes each direction of the link
    carries the full size. algbw = bytes / time, busbw = algbw (no bus factor for send/recv). The
    correctness pass: every rank sends rank+1, so the received tensor must hold the sender's rank+1."""
    import torch

    to_rank, from_rank = (rank + 1) % world, (rank - 1) % world
    rows = []
    for size in sizes:
        count = max(1, size // 4)
        nbytes = count * 4
        outgoing = torch.zeros(count, dtype=torch.float32, device=device)
        incoming = torch.zeros(count, dtype=torch.float32, device=device)

        def exchange(tensor, outgoing=outgoing, incoming=incoming):
            for request in dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing, to_rank),
                                                   dist.P2POp(dist.irecv, incoming, from_rank)]):
                request.wait()

        for _ in range(warmup):
            exchange(outgoing)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        seconds = _seconds_per_iter(torch, dist, outgoing, iters, device, exchange)
        slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = float(slowest.item())
        outgoing.fill_(float(rank + 1))
        exchange(outgoing)
        wrong = torch.tensor([int((incoming != float(from_rank + 1)).sum().item())], dtype=torch.int64, device=device)
        dist.all_reduce(wrong)
        del outgoing, incoming
        algbw = nbytes / seconds / 1e9
        row = {"size_bytes": nbytes, "count": count, "dtype": "float", "redop": "none", "time_us": seconds * 1e6,
               "algbw_gbps": algbw, "busbw_gbps": algbw, "wrong": int(wrong.item())}
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def print_row(row: dict) -> None:
    print(
        f"{row['size_bytes']:>12} {row['count']:>12}  float  sum  {row['time_us']:10.1f} {row['algbw_gbps']:8.2f}"
        f" {row['busbw_gbps']:8.2f} {row['wrong']:>6}",
        file=sys.stderr,
        flush=True,
    )


def _worker(rank: int, world: int, store: str, opts: dict, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    backend = opts["backend"]
    timeout = timedelta(seconds=opts["timeout_s"])
    kwargs = {
        "backend": backend,
        "init_method": f"file://{store}",
        "rank": rank,
        "world_size": world,
        "timeout": timeout,
    }
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        kwargs["device_id"] = device  # eager communicator init; torch >= 2.3
    else:
        device = torch.device("cpu")
    try:
        dist.init_process_group(**kwargs)
    except TypeError:
        kwargs.pop("device_id", None)
        dist.init_process_group(**kwargs)

    sizes = sweep(opts["min_bytes"], opts["max_bytes"])
    rows = allreduce_rows(dist, device, rank, world, sizes, opts["iters"], opts["warmup"],
                          print_row if rank == 0 else None)
    if rank == 0:
        meta = {
            "torch": torch.__version__,
            "backend": backend,
            "world_size": world,
            "rows": rows,
            "iters": opts["iters"],
            "warmup": opts["warmup"],
            "timing": timing_method(device),
        }
        if backend == "nccl":
            version = torch.cuda.nccl.version()
            meta["nccl_version"] = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
            meta["gpus"] = [torch.cuda.get_device_name(i) for i in range(world)]
        with open(out_path, "w", encoding="utf-8") as handle:
            json.dump(meta, handle)
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.bench.torch_allreduce")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--ranks", type=int, required=True, help="processes: one per GPU for nccl")
    parser.add_argument("--min-bytes", default="8M")
    parser.add_argument("--max-bytes", default="4G")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--timeout-s", type=int, default=300, help="process-group timeout")
    args = parser.parse_args(argv)
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as exc:
        print(f"torch is not importable: {exc}", file=sys.stderr)
        return 3
    if args.backend == "nccl" and (not torch.cuda.is_available() or torch.cuda.device_count() < args.ranks):
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        print(f"nccl backend needs {args.ranks} CUDA devices, torch sees {found}", file=sys.stderr)
        return 3
    opts = {
        "backend": args.backend,
        "min_bytes": parse_size(args.min_bytes),
        "max_bytes": parse_size(args.max_bytes),
        "iters": args.iters,
        "warmup": args.warmup,
        "timeout_s": args.timeout_s,
    }
    print(
        f"{'size(B)':>12} {'count':>12}  type redop {'time(us)':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>6}",
        file=sys.stderr,
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="tunefleet-allreduce-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        mp.spawn(_worker, args=(args.ranks, os.path.join(tmp, "store"), opts, out_path), nprocs=args.ranks, join=True)
        with open(out_path, encoding="utf-8") as handle:
            payload = json.load(handle)
    payload["engine"] = "torch"
    emit_result(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
