"""Built-in host<->device copy engine: pinned memory, CUDA events, one GPU at a time.

Run as `python3 -m verify.bench.torch_hostcopy`; prints a marked JSON line with, per GPU, the
H2D and D2H bandwidth (GB = 1e9 bytes) and the PCIe link NVML reports (max and current).
"""

from __future__ import annotations

import argparse
import sys

from verify.bench.common import parse_size
from verify.engine import emit_result, normal_bus, restrict_visible, torch_bus_id
from verify.payload_schema import NUMBER, ListOf, Maybe

# What the engine emits (verify.payload_schema.checked_payload checks it where it enters verify):
# one row per GPU; a malformed row is dropped and named, the others are still judged.
PAYLOAD_SCHEMA = {"gpus": ListOf({"index": int, "name": Maybe(str), "pcie": Maybe(dict),
                                  "pcie_under_load": Maybe(dict), "h2d_gbps": NUMBER, "d2h_gbps": NUMBER})}


_LINK_CALLS = (
    ("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
    ("width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
    ("gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
    ("width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
    ("gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
)


def pcie_of(handle, current_only: bool = False) -> dict:
    """One GPU's PCIe link as NVML reports it (max and current generation and width, bus id), inside an
    initialised NVML session; `current_only`: the current generation and width alone (read under load:
    GPUs train the link down at idle to save power, so only a reading while copies run says whether the
    link really runs at its maximum; the idle health check can only warn). {} without a handle."""
    if handle is None:
        return {"error": "NVML has no handle for this GPU"} if current_only else {}
    import pynvml

    link: dict = {}
    for key, call in _LINK_CALLS[2:4] if current_only else _LINK_CALLS:
        try:
            link[key] = int(getattr(pynvml, call)(handle))
        except Exception as exc:  # NVML raises its own error types per call
            link[f"{key}_error"] = str(exc)
    if current_only:
        return link if "gen_current" in link and "width_current" in link else {"error": "; ".join(link.values())}
    try:
        bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
        link["bus_id"] = bus.decode() if isinstance(bus, bytes) else bus
    except Exception as exc:
        link["bus_id_error"] = str(exc)
    return link


def nvml_handles(torch, count: int) -> dict:
    """{CUDA ordinal: NVML handle} by PCI bus id (CUDA's numbering is the process's own: CUDA_VISIBLE_DEVICES
    renumbers), {} without pynvml or NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no pynvml, or NVML refused to start: copies are still measured
        return {}
    handles = {}
    for ordinal in range(count):
        bus = torch_bus_id(torch.cuda.get_device_properties(ordinal))
        try:
            handles[ordinal] = pynvml.nvmlDeviceGetHandleByPciBusId(bus) if bus else None
        except Exception:
            handles[ordinal] = None
    return handles


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
    parser.add_argument("--exclude-bus-ids", default="",
                        help="GPUs (PCI bus ids) never touched: another job holds them")
    args = parser.parse_args(argv)
    restrict_visible({normal_bus(b) for b in args.exclude_bus_ids.split(",") if b.strip()})  # before torch starts
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
    handles = nvml_handles(torch, count)
    nbytes = parse_size(args.size_bytes)
    gpus = []
    for index in indices:
        handle = handles.get(index)
        row = {"index": index, "name": torch.cuda.get_device_name(index), "pcie": pcie_of(handle)}
        if handle is not None:  # the row names the GPU as nvidia-smi does, whatever CUDA's numbering
            import pynvml

            row["cuda_ordinal"], row["index"] = index, int(pynvml.nvmlDeviceGetIndex(handle))
        row.update(measure_gpu(torch, index, nbytes, args.iters, args.warmup,
                               lambda _ordinal, h=handle: pcie_of(h, current_only=True)))
        print(
            f"gpu{row['index']} {row['name']}: H2D {row['h2d_gbps']:.1f} GB/s, D2H {row['d2h_gbps']:.1f} GB/s",
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
