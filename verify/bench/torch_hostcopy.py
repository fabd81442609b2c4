"""Built-in host<->device copy engine: pinned memory, CUDA events, one GPU at a time.

Run as `python3 -m verify.bench.torch_hostcopy`; prints a marked JSON line with, per GPU, the
H2D and D2H bandwidth (GB = 1e9 bytes) and the PCIe link NVML reports (max and current).
"""

from __future__ import annotations

import argparse
import sys

from verify.bench.common import parse_size
from verify.engine import NUMBER, ListOf, Maybe, emit_result

# What the engine emits (verify.engine.checked_payload checks it where it enters verify):
# one row per GPU; a malformed row is dropped and named, the others are still judged.
PAYLOAD_SCHEMA = {"gpus": ListOf({"index": int, "name": Maybe(str), "pcie": Maybe(dict),
                                  "pcie_under_load": Maybe(dict), "h2d_gbps": NUMBER, "d2h_gbps": NUMBER})}


def pcie_links(count: int) -> list:
    """NVML PCIe generation and width per GPU; empty dicts when pynvml is absent."""
    try:
        import pynvml
    except ImportError:
        return [{} for _ in range(count)]
    links = []
    pynvml.nvmlInit()
    try:
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            link = {}
            for key, call in (
                ("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                ("width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
                ("gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
                ("width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
                ("gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
            ):
                try:
                    link[key] = int(getattr(pynvml, call)(handle))
                except Exception as exc:  # NVML raises its own error types per call
                    link[f"{key}_error"] = str(exc)
            try:
                link["bus_id"] = pynvml.nvmlDeviceGetPciInfo(handle).busId
                if isinstance(link["bus_id"], bytes):
                    link["bus_id"] = link["bus_id"].decode()
            except Exception as exc:
                link["bus_id_error"] = str(exc)
            links.append(link)
    finally:
        pynvml.nvmlShutdown()
    return links


def link_under_load(index: int) -> dict:
    """NVML's current PCIe generation and width of one GPU, read while its copies are in flight.

    GPUs train the link down at idle to save power, so only a reading under load says whether the
    link really runs at its maximum (the idle health check can only warn).
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no pynvml, or NVML refused to start
        return {"error": f"NVML unavailable: {exc}"}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return {"gen_current": int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
                "width_current": int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle))}
    except Exception as exc:
        return {"error": str(exc)}
    finally:
        pynvml.nvmlShutdown()


def measure_gpu(torch, index: int, nbytes: int, iters: int, warmup: int, sample_link=None) -> dict:
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    out = {}
    for name, target, origin in (("h2d", dev, host), ("d2h", host, dev)):
        for _ in range(warmup):
            target.copy_(origin, non_blocking=True)
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            target.copy_(origin, non_blocking=True)
        end.record()
        if sample_link is not None and name == "h2d":
            out["pcie_under_load"] = sample_link(index)  # the copies are queued and running now
        end.synchronize()
        seconds = start.elapsed_time(end) / 1000.0 / iters
        out[f"{name}_gbps"] = nbytes / seconds / 1e9
    del host, dev, target, origin
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.bench.torch_hostcopy")
    parser.add_argument("--size-bytes", default="1G")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--gpus", default="all", help="'all' or a comma list of indices")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError as exc:
        print(f"torch is not importable: {exc}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch sees no CUDA device", file=sys.stderr)
        return 3
    count = torch.cuda.device_count()
    indices = list(range(count)) if args.gpus == "all" else [int(i) for i in args.gpus.split(",")]
    links = pcie_links(count)
    nbytes = parse_size(args.size_bytes)
    gpus = []
    for index in indices:
        row = {
            "index": index,
            "name": torch.cuda.get_device_name(index),
            "pcie": links[index] if index < len(links) else {},
        }
        row.update(measure_gpu(torch, index, nbytes, args.iters, args.warmup, link_under_load))
        print(
            f"gpu{index} {row['name']}: H2D {row['h2d_gbps']:.1f} GB/s, D2H {row['d2h_gbps']:.1f} GB/s",
            file=sys.stderr,
            flush=True,
        )
        gpus.append(row)
    emit_result(
        {"engine": "torch", "torch": torch.__version__, "size_bytes": nbytes, "iters": args.iters, "gpus": gpus}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
