"""Built-in cuFile read engine (CUDA Python's cuda.bindings: cufile, and runtime for the GPU buffer).

Run as `python3 -m verify.bench.cufile_read --file F`. It reads the file in blocks into one GPU
buffer and reports GB/s and the mode cuFile ran in: "gds" only when the nvidia-fs driver is
loaded and its read counter moved; otherwise "compatibility" (cuFile's POSIX path through a
bounce buffer), which gdsio would still label GPUD.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from verify.bench.common import parse_size
from verify.engine import CANNOT_RUN, emit_result, normal_bus, restrict_visible
from verify.payload_schema import NUMBER, ListOf

# What a read emits (verify.payload_schema.checked_payload checks it where it enters verify).
PAYLOAD_SCHEMA = {"gbps": NUMBER, "mode": str,
                  "runs": ListOf({"bytes": int, "seconds": NUMBER, "gbps": NUMBER, "mode": str})}

NVFS_STATS = "/proc/driver/nvidia-fs/stats"


def nvfs_reads(path: str = NVFS_STATS):
    """Completed reads counted by nvidia-fs, or None when the driver is not loaded."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    match = re.search(r"^Reads\s*:\s*n=(\d+)", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


def cufile_mode(before, after) -> str:
    if before is None or after is None:
        return "compatibility"
    return "gds" if after > before else "compatibility"


def cuda_call(cudart, name: str, *args):
    """One CUDA runtime call through cuda-python (it returns (error, *values)); RuntimeError names a failure."""
    error, *values = getattr(cudart, name)(*args)
    if error != cudart.cudaError_t.cudaSuccess:
        raise RuntimeError(f"{name} failed: {error}")
    return values[0] if len(values) == 1 else values


def gpu_buffer(cudart, gpu: int, size: int) -> int:
    """A device buffer of `size` bytes on CUDA device `gpu`: its address."""
    cuda_call(cudart, "cudaSetDevice", gpu)
    return int(cuda_call(cudart, "cudaMalloc", size))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.bench.cufile_read")
    parser.add_argument("--file", required=True)
    parser.add_argument("--block", default="1M")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--open",
        choices=("direct", "buffered"),
        default="direct",
        help="open flags for the file: GDS needs O_DIRECT; compatibility mode takes either",
    )
    parser.add_argument("--exclude-bus-ids", default="",
                        help="GPUs (PCI bus ids) never touched: another job holds them")
    args = parser.parse_args(argv)
    restrict_visible({normal_bus(b) for b in args.exclude_bus_ids.split(",") if b.strip()})  # before torch starts
    try:
        # CUDA's runtime through cuda-python for the one GPU buffer: importing torch for it cost 2.5 s a run.
        from cuda.bindings import cufile
        from cuda.bindings import runtime as cudart
    except ImportError as exc:
        print(f"cuFile benchmark needs cuda-python (cuda.bindings.cufile and .runtime): {exc}", file=sys.stderr)
        return CANNOT_RUN
    block = parse_size(args.block)
    size = os.path.getsize(args.file) // block * block
    try:
        pointer = gpu_buffer(cudart, args.gpu, block)
    except RuntimeError as exc:
        print(f"cuFile benchmark: {exc}", file=sys.stderr)
        return CANNOT_RUN

    def synchronize():
        cuda_call(cudart, "cudaDeviceSynchronize")

    stage = "driver_open"
    cufile.driver_open()
    fd = os.open(args.file, os.O_RDONLY | (os.O_DIRECT if args.open == "direct" else 0))
    handle = None
    runs = []
    try:
        stage = "buf_register"
        cufile.buf_register(pointer, block, 0)
        descr = cufile.Descr()
        descr.type = cufile.FileHandleType.OPAQUE_FD
        descr.handle.fd = fd
        descr.fs_ops = 0
        stage = "handle_register"
        handle = cufile.handle_register(descr.ptr)
        stage = "read"
        for index in range(args.repeat):
            before = nvfs_reads()
            synchronize()
            began = time.perf_counter()
            done = 0
            for offset in range(0, size, block):
                got = cufile.read(handle, pointer, block, offset, 0)
                if got != block:
                    raise OSError(f"cuFileRead returned {got} at offset {offset}")
                done += got
            synchronize()
            seconds = time.perf_counter() - began
            after = nvfs_reads()
            runs.append(
                {
                    "bytes": done,
                    "seconds": seconds,
                    "gbps": done / seconds / 1e9,
                    "mode": cufile_mode(before, after),
                    "nvfs_reads_before": before,
                    "nvfs_reads_after": after,
                }
            )
            print(
                f"cuFile read {index + 1}: {runs[-1]['gbps']:.3f} GB/s ({runs[-1]['mode']} mode)",
                file=sys.stderr,
                flush=True,
            )
    except Exception as exc:  # cuFile raises cuFileError; any failure here is reported, not hidden
        hint = ""
        if stage == "handle_register":
            # Seen on a VM without udev: cuFile cannot read the volume's attributes, so it refuses
            # the file even in compatibility mode. CUFILE_LOGGING_LEVEL=TRACE names the cause.
            hint = (" (cuFile refused this file's filesystem/device: where udev does not run, its database lacks the"
                    " volume's ID_FS_USAGE/ID_FS_TYPE; CUFILE_LOGGING_LEVEL=TRACE shows the cause)")
        print(f"cuFile {stage} on {args.file} failed: {type(exc).__name__}: {exc}{hint}", file=sys.stderr)
        # A refused registration means this node cannot run cuFile on this volume (CANNOT_RUN, a
        # SKIP), not that the read was slow or broken.
        return CANNOT_RUN if stage == "handle_register" else 4
    finally:
        if handle is not None:
            cufile.handle_deregister(handle)
        try:
            cufile.buf_deregister(pointer)
        except Exception as exc:
            print(f"cuFile buffer deregister: {exc}", file=sys.stderr)
        os.close(fd)
        cufile.driver_close()
        cudart.cudaFree(pointer)
    version = None
    try:
        version = cufile.get_version()
    except Exception as exc:
        print(f"cuFile version unknown: {exc}", file=sys.stderr)
    emit_result(
        {
            "engine": "cufile",
            "file": args.file,
            "block_bytes": block,
            "gpu": args.gpu,
            "runs": runs,
            "gbps": max(r["gbps"] for r in runs),
            "mode": runs[-1]["mode"],
            "cufile_version": version,
            "nvidia_fs_loaded": os.path.exists("/proc/driver/nvidia-fs"),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
