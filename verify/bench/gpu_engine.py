"""Built-in GPU engine: HBM bandwidth, BF16 matmul, GPU-to-GPU copies and the burn, sampled by NVML.

Run as `python3 -m verify.bench.gpu_engine --mode quick|burn`; prints one marked JSON line
(verify.engine.emit_result). One process holds every GPU: per-GPU figures run on all GPUs at
once (one thread and one stream per GPU: the work is queued asynchronously and timed by CUDA events
on each GPU, so a thread waiting for the GIL never shows in a figure), pairs one after the other.
An NVML thread samples clocks, temperature, power and clock event reasons of every GPU meanwhile;
each figure carries the summary of the samples taken while it ran (verify.bench.gpu_clocks).

HBM and copies are timed over a window (--seconds): they stay far below the power limit. The quick
set's matmul is one short batch (--matmul-iters, 20, after the warm-ups: issue 19's plain loop): a
1 s window of BF16 matmul on a 700 W H200 reaches the power cap (sw_power_cap) and its SM clock falls
to ~1170 MHz, so it read 0.84 of the plain loop and under the profile floor cited from that loop on
a healthy machine. Sustained throughput under the cap is the burn's figure (--mode burn).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import threading
import time

from verify.bench.common import parse_size
from verify.bench.gpu_clocks import summarise
from verify.engine import CANNOT_RUN, NUMBER, ListOf, Maybe, cuda_torch, emit_result, torch_bus_id

# What the engine emits (verify.engine.checked_payload checks it where it enters verify): quick
# mode fills per_gpu/pairs, burn mode fills burn; a malformed per-GPU or pair row is dropped and named.
PAYLOAD_SCHEMA = {
    "gpus": ListOf({"index": int, "name": str, "capability": Maybe(list), "sm_count": Maybe(int),
                    "nvml": Maybe(dict)}),
    "per_gpu": Maybe(ListOf({"index": int, "hbm": {"gbps": NUMBER}, "matmul": {"tflops": NUMBER}},
                            may_be_empty=True)),
    "pairs": Maybe(ListOf({"src": int, "dst": int, "mode": str, "gbps": NUMBER}, may_be_empty=True)),
    "per_gpu_errors": Maybe(dict),
    "pair_errors": Maybe(dict),
    "burn": Maybe(dict),
}


class Sampler:
    """NVML readings of every GPU every `period_s` in a thread; windows are cut out by time."""

    def __init__(self, pynvml, handles: dict, period_s: float):
        self.nvml, self.handles, self.period_s = pynvml, handles, period_s
        self.samples: dict = {index: [] for index in handles}
        self.errors: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _read(self, index: int, handle) -> dict:
        nvml, sample = self.nvml, {"t": time.monotonic()}
        calls = (
            ("sm_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            ("mem_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
            ("temp_c", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            ("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
            ("reasons", lambda: _reasons(nvml, handle)),
        )
        for key, call in calls:
            try:
                sample[key] = call()
            except Exception as exc:  # NVML raises its own error per unsupported reading
                sample[key] = None
                self.errors.setdefault(index, {})[key] = str(exc)
        return sample

    def _loop(self) -> None:
        while not self._stop.is_set():
            for index, handle in self.handles.items():
                self.samples[index].append(self._read(index, handle))
            self._stop.wait(self.period_s)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def sample_now(self, index: int) -> None:
        """One reading of one GPU now, from the caller's thread (a batch too short for the period)."""
        handle = self.handles.get(index)
        if handle is not None:
            self.samples[index].append(self._read(index, handle))  # list.append is atomic under the GIL

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def window(self, index: int, start: float, end: float) -> dict:
        """Summary of one GPU's samples between two monotonic times (the nearest one if none fell inside)."""
        inside = [s for s in self.samples.get(index, []) if start <= s["t"] <= end]
        if not inside and self.samples.get(index):
            inside = [min(self.samples[index], key=lambda s: abs(s["t"] - (start + end) / 2))]
        return summarise(inside)


def _reasons(nvml, handle) -> int:
    call = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
    return int(call(handle))


def nvml_open(count: int, bus_ids: list) -> tuple:
    """(pynvml or None, {torch index: handle}, {index: static facts}, why not)."""
    try:
        import pynvml
    except ImportError as exc:
        return None, {}, {}, f"pynvml is not importable: {exc}"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return None, {}, {}, f"NVML did not start: {exc}"
    handles, facts = {}, {}
    for index in range(count):
        try:
            # By PCI bus id: torch's order and NVML's can differ unless CUDA_DEVICE_ORDER=PCI_BUS_ID.
            handle = (pynvml.nvmlDeviceGetHandleByPciBusId(bus_ids[index]) if bus_ids[index]
                      else pynvml.nvmlDeviceGetHandleByIndex(index))
        except Exception:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        handles[index] = handle
        info: dict = {}
        for key, call in (
            ("bus_width_bits", lambda h=handle: pynvml.nvmlDeviceGetMemoryBusWidth(h)),
            ("max_mem_mhz", lambda h=handle: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)),
            ("max_sm_mhz", lambda h=handle: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
            ("power_limit_w", lambda h=handle: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
            ("nvml_index", lambda h=handle: pynvml.nvmlDeviceGetIndex(h)),
        ):
            try:
                info[key] = call()
            except Exception as exc:
                info[f"{key}_error"] = str(exc)
        facts[index] = info
    return pynvml, handles, facts, ""


def timed(torch, device: int, step, warmup: int, seconds: float, min_iters: int = 3) -> tuple:
    """(iterations, GPU seconds, monotonic start, monotonic end) of `step` repeated for about `seconds`.

    Warm-ups first (clocks up, caches and cuBLAS plans ready), then a short calibration tells how
    many iterations fill the window; the timed batch is queued back to back between two CUDA events.
    """
    stream = torch.cuda.current_stream(device)
    for _ in range(warmup):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe = max(1, warmup)
    start.record(stream)
    for _ in range(probe):
        step()
    end.record(stream)
    end.synchronize()
    per_iter = max(start.elapsed_time(end) / 1000.0 / probe, 1e-6)
    iters = max(min_iters, int(seconds / per_iter))
    began = time.monotonic()
    start.record(stream)
    for _ in range(iters):
        step()
    end.record(stream)
    end.synchronize()
    return iters, start.elapsed_time(end) / 1000.0, began, time.monotonic()


def batch(torch, device: int, step, warmup: int, iters: int, sampler=None, sample_s: float = 0.005) -> tuple:
    """(iterations, GPU seconds, monotonic start, monotonic end) of `iters` runs of `step` after `warmup`.

    Issue 19's plain loop: warm-ups, a synchronize, then `iters` queued back to back between two CUDA
    events. The batch is shorter than the sampler's period, so this thread reads NVML itself every
    `sample_s` while the GPU works through the queue (queuing 20 matmuls takes well under a millisecond).
    """
    stream = torch.cuda.current_stream(device)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    iters = max(1, iters)
    began = time.monotonic()
    start.record(stream)
    for _ in range(iters):
        step()
    end.record(stream)
    if sampler:
        sampler.sample_now(device)
        while not end.query():
            time.sleep(sample_s)
            sampler.sample_now(device)
    end.synchronize()
    return iters, start.elapsed_time(end) / 1000.0, began, time.monotonic()


def per_gpu(torch, index: int, args, sampler) -> dict:
    """HBM copy (a timed window), then the BF16 matmul (one short batch), on one GPU (its own thread and stream)."""
    torch.cuda.set_device(index)
    row: dict = {"index": index}
    with torch.cuda.device(index), torch.cuda.stream(torch.cuda.Stream(index)):
        nbytes = args.hbm_bytes
        src = torch.empty(nbytes, dtype=torch.uint8, device=index)
        dst = torch.empty_like(src)
        iters, secs, t0, t1 = timed(torch, index, lambda: dst.copy_(src), args.warmup, args.seconds)
        # A device-to-device copy reads and writes every byte: both cross the HBM bus.
        row["hbm"] = {"gbps": 2 * nbytes * iters / secs / 1e9, "bytes": nbytes, "iters": iters, "seconds": secs,
                      "nvml": sampler.window(index, t0, t1) if sampler else None}
        n = args.matmul_n
        gen = torch.Generator(device="cpu").manual_seed(1234)
        a = torch.randn(n, n, generator=gen).to(device=index, dtype=torch.bfloat16)
        b = torch.randn(n, n, generator=gen).to(device=index, dtype=torch.bfloat16)
        c = torch.empty(n, n, device=index, dtype=torch.bfloat16)
        # One short batch, not a window: see the module docstring (power cap).
        iters, secs, t0, t1 = batch(torch, index, lambda: torch.matmul(a, b, out=c), args.warmup, args.matmul_iters,
                                    sampler)
        row["matmul"] = {"tflops": 2 * n ** 3 * iters / secs / 1e12, "n": n, "dtype": "bfloat16", "iters": iters,
                         "warmup": args.warmup, "seconds": secs,
                         "nvml": sampler.window(index, t0, t1) if sampler else None}
    torch.cuda.empty_cache()
    return row


def pair_copies(torch, i: int, j: int, args, sampler, bidir: bool = True) -> list:
    """i->j alone, then (bidir) i->j and j->i at once (each direction on its own pair of streams, so torch's
    cross-device barrier never makes one direction wait for the other)."""
    nbytes = args.pair_bytes
    src_i = torch.empty(nbytes, dtype=torch.uint8, device=i)
    dst_j = torch.empty(nbytes, dtype=torch.uint8, device=j)
    src_j = torch.empty(nbytes, dtype=torch.uint8, device=j)
    dst_i = torch.empty(nbytes, dtype=torch.uint8, device=i)
    p2p = bool(torch.cuda.can_device_access_peer(i, j))
    rows = []
    s_ij, s_ij_dst = torch.cuda.Stream(i), torch.cuda.Stream(j)
    s_ji, s_ji_dst = torch.cuda.Stream(j), torch.cuda.Stream(i)

    def forward():
        with torch.cuda.stream(s_ij_dst), torch.cuda.stream(s_ij):
            dst_j.copy_(src_i, non_blocking=True)

    def backward():
        with torch.cuda.stream(s_ji_dst), torch.cuda.stream(s_ji):
            dst_i.copy_(src_j, non_blocking=True)

    def window(t0, t1, src=i, dst=j):
        if not sampler:
            return None
        return {"src": sampler.window(src, t0, t1), "dst": sampler.window(dst, t0, t1)}

    with torch.cuda.device(i), torch.cuda.stream(s_ij):
        iters, secs, t0, t1 = timed(torch, i, forward, args.warmup, args.pair_seconds)
    rows.append({"src": i, "dst": j, "mode": "oneway", "p2p": p2p, "gbps": nbytes * iters / secs / 1e9,
                 "bytes": nbytes, "iters": iters, "seconds": secs, "nvml": window(t0, t1)})
    if not bidir:
        return rows
    # Both ways: queue both directions interleaved, time each on its own source stream.
    for _ in range(args.warmup):
        forward()
        backward()
    probe = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    probe[0].record(s_ij)
    forward()
    backward()
    probe[1].record(s_ij)
    probe[1].synchronize()
    torch.cuda.synchronize(j)
    iters = max(3, int(args.pair_seconds / max(probe[0].elapsed_time(probe[1]) / 1000.0, 1e-6)))
    marks = {name: [torch.cuda.Event(enable_timing=True) for _ in range(2)] for name in ("ij", "ji")}
    t0 = time.monotonic()
    marks["ij"][0].record(s_ij)
    marks["ji"][0].record(s_ji)
    for _ in range(iters):
        forward()
        backward()
    marks["ij"][1].record(s_ij)
    marks["ji"][1].record(s_ji)
    marks["ij"][1].synchronize()
    marks["ji"][1].synchronize()
    t1 = time.monotonic()
    for name, (src, dst) in (("ij", (i, j)), ("ji", (j, i))):
        secs = marks[name][0].elapsed_time(marks[name][1]) / 1000.0
        rows.append({"src": src, "dst": dst, "mode": "bidir", "p2p": p2p, "gbps": nbytes * iters / secs / 1e9,
                     "bytes": nbytes, "iters": iters, "seconds": secs, "nvml": window(t0, t1, src, dst)})
    return rows


def burn_gpu(torch, index: int, args, sampler, inputs: tuple, out: dict) -> None:
    """Sustained matmul of the same inputs on one GPU; a digest of the result at each checkpoint."""
    torch.cuda.set_device(index)
    with torch.cuda.device(index), torch.cuda.stream(torch.cuda.Stream(index)):
        a, b = (t.to(device=index) for t in inputs)
        c = torch.empty_like(a)
        stream = torch.cuda.current_stream(index)
        digests, iters, gpu_s = [], 0, 0.0
        began = time.monotonic()
        stop = began + args.burn_seconds
        next_check = began
        while True:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(args.burn_chunk):
                torch.matmul(a, b, out=c)
            end.record(stream)
            end.synchronize()
            iters += args.burn_chunk
            gpu_s += start.elapsed_time(end) / 1000.0
            now = time.monotonic()
            if now >= next_check or now >= stop:
                # Same inputs, same kernel: every checkpoint on every GPU of one model must match bit for bit.
                digests.append(digest(torch, c))
                next_check = now + args.burn_check_s
            if now >= stop:
                break
        n = a.shape[0]
        out[index] = {"index": index, "iters": iters, "seconds": gpu_s, "wall_s": time.monotonic() - began,
                      "tflops": 2 * n ** 3 * iters / gpu_s / 1e12 if gpu_s else None, "digests": digests,
                      "nvml": sampler.window(index, began + args.burn_settle_s, time.monotonic()) if sampler else None}


def digest(torch, tensor) -> str:
    """sha256 of a tensor's bytes (first 32 hex digits): equal only when every bit is equal."""
    data = tensor.contiguous().view(torch.uint8).cpu()
    try:
        raw = data.numpy().tobytes()
    except (ImportError, RuntimeError):  # torch without numpy: two position-weighted sums on the GPU
        words = tensor.contiguous().view(-1).view(torch.int16).to(torch.int64)
        weights = torch.arange(1, words.numel() + 1, device=words.device, dtype=torch.int64)
        raw = f"{int(words.sum())}:{int((words * weights).sum())}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def _threads(target, indices: list, *extra) -> dict:
    """Run target(index, *extra, results) on every GPU at once; an exception is that GPU's error."""
    results, errors = {}, {}

    def body(index):
        try:
            target(index, *extra, results)
        except Exception as exc:  # one GPU's failure is its own row, the others still count
            errors[index] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=body, args=(index,)) for index in indices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"results": results, "errors": errors}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.bench.gpu_engine")
    parser.add_argument("--mode", choices=("quick", "burn"), default="quick")
    parser.add_argument("--gpus", default="all", help="'all' or a comma list of indices")
    parser.add_argument("--hbm-bytes", type=parse_size, default=2 << 30)
    parser.add_argument("--matmul-n", type=int, default=8192)
    parser.add_argument("--seconds", type=float, default=1.0, help="timed window of the HBM copy")
    parser.add_argument("--matmul-iters", type=int, default=20, help="timed batch of the quick matmul (after --warmup)")
    parser.add_argument("--pair-bytes", type=parse_size, default=256 << 20)
    parser.add_argument("--pair-seconds", type=float, default=0.25)
    parser.add_argument("--pairs", choices=("on", "off"), default="on")
    parser.add_argument("--serial", action="store_true", help="GPUs one at a time (default: all at once)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sample-ms", type=float, default=50.0)
    parser.add_argument("--burn-seconds", type=float, default=60.0)
    parser.add_argument("--burn-chunk", type=int, default=20)
    parser.add_argument("--burn-check-s", type=float, default=10.0)
    parser.add_argument("--burn-settle-s", type=float, default=2.0, help="ramp-up left out of the clock judgement")
    args = parser.parse_args(argv)
    torch, why = cuda_torch()
    if torch is None:
        print(why, file=sys.stderr)
        return CANNOT_RUN
    count = torch.cuda.device_count()
    indices = list(range(count)) if args.gpus == "all" else [int(i) for i in args.gpus.split(",")]
    gpus, bus_ids = [], []
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        bus = torch_bus_id(props)
        bus_ids.append(bus)
        gpus.append({"index": index, "name": props.name, "capability": [props.major, props.minor],
                     "sm_count": props.multi_processor_count, "memory_bytes": props.total_memory, "bus_id": bus})
    nvml, handles, facts, nvml_reason = nvml_open(count, bus_ids)
    for gpu in gpus:
        gpu["nvml"] = facts.get(gpu["index"], {})
    sampler = Sampler(nvml, {i: handles[i] for i in indices if i in handles}, args.sample_ms / 1000.0).start() \
        if nvml else None
    payload = {"engine": "torch", "torch": torch.__version__, "mode": args.mode, "gpus": gpus,
               "nvml": nvml_reason or "sampled", "sample_ms": args.sample_ms, "parallel": not args.serial}
    began = time.monotonic()
    try:
        if args.mode == "quick":
            if args.serial:
                done = {"results": {}, "errors": {}}
                for index in indices:
                    part = _threads(lambda i, res: res.__setitem__(i, per_gpu(torch, i, args, sampler)), [index])
                    done["results"].update(part["results"])
                    done["errors"].update(part["errors"])
            else:
                done = _threads(lambda i, res: res.__setitem__(i, per_gpu(torch, i, args, sampler)), indices)
            payload["per_gpu"] = [done["results"][i] for i in indices if i in done["results"]]
            payload["per_gpu_errors"] = {str(k): v for k, v in done["errors"].items()}
            payload["per_gpu_s"] = round(time.monotonic() - began, 3)
            pairs, pair_errors = [], {}
            if args.pairs == "on":
                for i in indices:
                    for j in indices:
                        if i < j:
                            try:
                                pairs.extend(pair_copies(torch, i, j, args, sampler))
                                pairs.extend(pair_copies(torch, j, i, args, sampler, bidir=False))
                            except Exception as exc:
                                pair_errors[f"{i}-{j}"] = f"{type(exc).__name__}: {exc}"
                            torch.cuda.empty_cache()
            payload["pairs"], payload["pair_errors"] = pairs, pair_errors
        else:
            n = args.matmul_n
            gen = torch.Generator(device="cpu").manual_seed(4321)
            inputs = tuple(torch.randn(n, n, generator=gen).to(torch.bfloat16) for _ in range(2))
            done = _threads(lambda i, res: burn_gpu(torch, i, args, sampler, inputs, res), indices)
            payload["burn"] = {"seconds": args.burn_seconds, "n": n, "dtype": "bfloat16",
                               "gpus": [done["results"][i] for i in indices if i in done["results"]],
                               "errors": {str(k): v for k, v in done["errors"].items()}}
    finally:
        if sampler:
            sampler.stop()
            payload["nvml_errors"] = {str(k): v for k, v in sampler.errors.items()}
    payload["engine_s"] = round(time.monotonic() - began, 3)
    for row in payload.get("per_gpu", []):
        print(f"gpu{row['index']}: HBM {row['hbm']['gbps']:.0f} GB/s, BF16 {row['matmul']['tflops']:.0f} TFLOPS",
              file=sys.stderr, flush=True)
    emit_result(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
