"""Built-in O_DIRECT read engine (standard library only): 1 MiB reads of one file, N in flight.

Run as `python3 -m verify.bench.odirect_read --file F`. Queue depth N means N threads, each
with its own page-aligned buffer, reading interleaved blocks (preadv releases the GIL), which
is what fio does with `--ioengine=psync --numjobs=N` or `--ioengine=libaio --iodepth=N`.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import threading
import time

from verify.bench.common import parse_size
from verify.engine import emit_result
from verify.payload_schema import NUMBER, ListOf

# What a read emits (verify.payload_schema.checked_payload checks it where it enters verify).
PAYLOAD_SCHEMA = {"gbps": NUMBER, "runs": ListOf({"bytes": int, "seconds": NUMBER, "gbps": NUMBER})}


def read_direct(path: str, block: int, depth: int, limit: int = 0) -> dict:
    """Read the file once with O_DIRECT; returns bytes, seconds and GB/s (1e9)."""
    size = os.path.getsize(path)
    if limit:
        size = min(size, limit)
    blocks = size // block
    if blocks == 0:
        raise ValueError(f"{path} is smaller than one {block}-byte block")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    errors: list = []
    done = [0] * depth

    def reader(lane: int) -> None:
        buffer = mmap.mmap(-1, block)  # anonymous maps are page aligned, as O_DIRECT needs
        try:
            for index in range(lane, blocks, depth):
                got = os.preadv(fd, [buffer], index * block)
                if got != block:
                    raise OSError(f"short read at block {index}: {got} bytes")
                done[lane] += got
        except OSError as exc:
            errors.append(str(exc))
        finally:
            buffer.close()

    threads = [threading.Thread(target=reader, args=(lane,)) for lane in range(depth)]
    try:
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - began
    finally:
        os.close(fd)
    if errors:
        raise OSError(errors[0])
    total = sum(done)
    return {
        "bytes": total,
        "seconds": seconds,
        "gbps": total / seconds / 1e9,
        "block_bytes": block,
        "queue_depth": depth,
    }


def make_file(path: str, size: int, block: int = 1 << 20) -> None:
    """A new file of incompressible bytes, flushed to the device so the read hits storage.

    Runs as root: never opens a name that already exists or is a symlink (O_EXCL|O_NOFOLLOW),
    and sets the mode on the descriptor, not by name.
    """
    chunk = os.urandom(block)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as handle:
        for _ in range(size // block):
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.bench.odirect_read")
    parser.add_argument("--file", required=True)
    parser.add_argument("--create-bytes", default="0", help="create the file with this size first")
    parser.add_argument("--block", default="1M")
    parser.add_argument("--queue-depth", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="reads of the whole file; each is reported")
    args = parser.parse_args(argv)
    create = parse_size(args.create_bytes)
    if create:
        make_file(args.file, create)
    if args.repeat == 0:
        emit_result({"engine": "odirect", "file": args.file, "created_bytes": create, "runs": []})
        return 0
    runs = []
    for index in range(args.repeat):
        try:
            runs.append(read_direct(args.file, parse_size(args.block), args.queue_depth))
        except (OSError, ValueError) as exc:
            print(f"O_DIRECT read of {args.file} failed: {exc}", file=sys.stderr)
            return 4
        print(f"O_DIRECT read {index + 1}: {runs[-1]['gbps']:.3f} GB/s", file=sys.stderr, flush=True)
    emit_result({"engine": "odirect", "file": args.file, "runs": runs, "gbps": max(r["gbps"] for r in runs)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
