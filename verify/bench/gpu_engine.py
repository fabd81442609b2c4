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
import os
import sys
import threading
import time

from verify.bench.common import parse_size
from verify.bench.gpu_clocks import summarise
from verify.bench.torch_hostcopy import measure_gpu, pcie_of
from verify.engine import CANNOT_RUN, cuda_torch, emit_result, normal_bus, restrict_visible, torch_bus_id
from verify.payload_schema import NUMBER, ListOf, Maybe

# What the engine emits (verify.payload_schema.checked_payload checks it where it enters verify): quick
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
    # One process for every GPU measurement of a run (verify.bench.engine_session): each family's section,
    # checked again against that family's own schema where it enters (hostcopy, allreduce).
    "peer": Maybe({"pairs": ListOf({"src": int, "dst": int, "can_access": bool}, may_be_empty=True)}),
    "hostcopy": Maybe(dict),
    "hostcopy_errors": Maybe(dict),
    "allreduce": Maybe(dict),
    "allreduce_error": Maybe(str),
    "pair_schedule": Maybe(dict),
    "phases": Maybe(dict),
    # Read by the judges and the report line (verify.bench.gpu, nccl.session_gpus, local_run's health.p2p from
    # CUDA's answer): an NVML index list, a number of seconds and names, or the payload is not judged.
    "measured": Maybe(ListOf(int, may_be_empty=True)),
    "engine_s": Maybe(NUMBER),
    "torch": Maybe(str),
    "nvml": Maybe(str),
    "visible": Maybe(str),
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


# ---- which GPUs, by which name --------------------------------------------------------------------
# CUDA's ordinal is a process-local alias (CUDA_VISIBLE_DEVICES renumbers, Slurm sets it for every job
# step): every row this engine emits names a GPU by its NVML index, with its PCI bus id, serial and UUID
# beside it, so "GPU 2" in a benchmark row is the "GPU 2" of nvidia-smi and of the health rows.

def identities(torch, nvml, count: int) -> list:
    """Per CUDA ordinal: its NVML index, bus id, serial and UUID (the ordinal itself where NVML cannot say)."""
    found = []
    for ordinal in range(count):
        props = torch.cuda.get_device_properties(ordinal)
        bus = normal_bus(torch_bus_id(props))
        item = {"cuda_ordinal": ordinal, "index": ordinal, "bus_id": bus or None, "name": props.name,
                "capability": [props.major, props.minor], "sm_count": props.multi_processor_count,
                "memory_bytes": props.total_memory, "identity": "cuda ordinal (NVML could not name it)"}
        if nvml is not None and bus:
            try:
                handle = nvml.nvmlDeviceGetHandleByPciBusId(bus)
                item["index"] = int(nvml.nvmlDeviceGetIndex(handle))
                item["identity"] = "nvml index by bus id"
                for key, call in (("serial", nvml.nvmlDeviceGetSerial), ("uuid", nvml.nvmlDeviceGetUUID)):
                    try:
                        value = call(handle)
                        item[key] = value.decode() if isinstance(value, bytes) else str(value)
                    except Exception:  # a consumer board has no serial: the UUID still names it
                        item[key] = None
            except Exception as exc:  # NVML does not know this bus id: keep the ordinal, say why
                item["identity"] = f"cuda ordinal (NVML: {exc})"
        found.append(item)
    return found


# ---- pairs: which run side by side ---------------------------------------------------------------

def round_robin(indices: list) -> list:
    """Rounds of disjoint pairs covering every unordered pair once (the circle method: n-1 rounds of n/2
    pairs for an even n, n rounds with one GPU resting for an odd n): 7 rounds of 4 pairs on 8 GPUs."""
    ring = list(indices) + ([None] if len(indices) % 2 else [])
    rounds = []
    for _ in range(len(ring) - 1):
        half = len(ring) // 2
        pairs = [tuple(sorted((ring[k], ring[-1 - k]))) for k in range(half)
                 if ring[k] is not None and ring[-1 - k] is not None]
        rounds.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return [r for r in rounds if r]


def measure_pairs(torch, indices: list, args, sampler) -> tuple:
    """(rows, errors by "i-j", rounds): every unordered pair one way each direction and both ways at once.
    `--pair-schedule concurrent` runs a round's disjoint pairs side by side (a switched board: every GPU's
    links are its own); serial runs one pair at a time."""
    rows, errors = [], {}
    rounds = round_robin(indices) if args.pair_schedule == "concurrent" else \
        [[(i, j)] for i in indices for j in indices if i < j]

    def one_pair(pair, results):
        i, j = pair
        results[pair] = pair_copies(torch, i, j, args, sampler) + pair_copies(torch, j, i, args, sampler, bidir=False)

    for pairs in rounds:
        done = _threads(one_pair, pairs)
        for pair in pairs:
            if pair in done["results"]:
                rows.extend(done["results"][pair])
            elif pair in done["errors"]:
                errors[f"{pair[0]}-{pair[1]}"] = done["errors"][pair]
        torch.cuda.empty_cache()
    return rows, errors, rounds


# ---- host copies, peer access, all-reduce: the other measurements of the same process ------------

def measure_hostcopy(torch, ordinals: list, handles: dict, args) -> tuple:
    """(rows, errors): pinned H2D and D2H per GPU, one GPU at a time (host memory and the root complex are
    shared), with the PCIe link NVML reads while the H2D copies run (verify.bench.torch_hostcopy's method)."""
    rows, errors = [], {}
    for ordinal in ordinals:
        handle = handles.get(ordinal)
        try:
            row = {"index": ordinal, "name": torch.cuda.get_device_name(ordinal), "pcie": pcie_of(handle)}
            row.update(measure_gpu(torch, ordinal, args.hostcopy_bytes, args.hostcopy_iters, args.warmup,
                                   lambda _ordinal, h=handle: pcie_of(h, current_only=True)))
            rows.append(row)
        except Exception as exc:  # one GPU's failure is its own row
            errors[ordinal] = f"{type(exc).__name__}: {exc}"
    return rows, errors


def peer_matrix(torch, ordinals: list) -> list:
    """CUDA's own answer (cudaDeviceCanAccessPeer) for every ordered pair: what health.p2p reports after
    the benchmarks (the hooks read NVML's instead: they never create a CUDA context)."""
    return [{"src": a, "dst": b, "can_access": bool(torch.cuda.can_device_access_peer(a, b))}
            for a in ordinals for b in ordinals if a != b]


def allreduce_sweep(torch, ordinals: list, args) -> dict:
    """NCCL all-reduce over `ordinals` from this one process (torch.cuda.nccl: one communicator per GPU,
    ncclCommInitAll, as nccl-tests' `all_reduce_perf -g N`), timed as verify.bench.torch_allreduce times
    it: per size `warmup` untimed, then `iters` between CUDA events on each GPU's stream, the slowest GPU
    counts; busbw = algbw x 2(n-1)/n; then a correctness pass (GPU k contributes k+1)."""
    import torch.cuda.nccl as nccl

    from verify.bench.torch_allreduce import bus_factor, sweep

    world, factor, rows = len(ordinals), bus_factor(len(ordinals)), []
    for size in sweep(args.allreduce_min_bytes, args.allreduce_max_bytes):
        count = max(1, size // 4)
        tensors = [torch.zeros(count, dtype=torch.float32, device=o) for o in ordinals]
        for _ in range(args.allreduce_warmup):
            nccl.all_reduce(tensors)
        for o in ordinals:
            torch.cuda.synchronize(o)
        marks = {o: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for o in ordinals}
        for o in ordinals:
            marks[o][0].record(torch.cuda.current_stream(o))
        for _ in range(args.allreduce_iters):
            nccl.all_reduce(tensors)
        for o in ordinals:
            marks[o][1].record(torch.cuda.current_stream(o))
        for _, end in marks.values():
            end.synchronize()
        slowest_ms = max(start.elapsed_time(end) for start, end in marks.values())
        seconds = slowest_ms / 1000.0 / args.allreduce_iters
        for rank, tensor in enumerate(tensors):
            tensor.fill_(float(rank + 1))
        nccl.all_reduce(tensors)
        expected = world * (world + 1) / 2.0
        wrong = sum(int((tensor != expected).sum().item()) for tensor in tensors)
        del tensors
        algbw = count * 4 / seconds / 1e9
        rows.append({"size_bytes": count * 4, "count": count, "dtype": "float", "redop": "sum",
                     "time_us": seconds * 1e6, "algbw_gbps": algbw, "busbw_gbps": algbw * factor, "wrong": wrong})
        print(f"all-reduce {count * 4:>12} B: busbw {algbw * factor:8.2f} GB/s, #wrong {wrong}", file=sys.stderr,
              flush=True)
    torch.cuda.empty_cache()
    version = torch.cuda.nccl.version()
    return {"world_size": world, "rows": rows, "iters": args.allreduce_iters, "warmup": args.allreduce_warmup,
            "timing": "cuda-events", "engine": "torch.cuda.nccl (one process, every GPU)",
            "nccl_version": ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)}


SECTIONS = ("gpu", "pairs", "hostcopy", "peer", "allreduce")


def renumbered(payload: dict, by_ordinal: dict) -> None:
    """Every GPU the payload names by CUDA ordinal, renamed to its NVML index (in place)."""
    def name(ordinal):
        return by_ordinal.get(ordinal, ordinal)

    for row in payload.get("per_gpu") or []:
        row["index"] = name(row["index"])
    for row in (payload.get("pairs") or []) + ((payload.get("peer") or {}).get("pairs") or []):
        row["src"], row["dst"] = name(row["src"]), name(row["dst"])
    for row in (payload.get("hostcopy") or {}).get("gpus") or []:
        row["cuda_ordinal"], row["index"] = row["index"], name(row["index"])
    for key in ("per_gpu_errors", "hostcopy_errors"):
        if isinstance(payload.get(key), dict):
            payload[key] = {str(name(int(k))): v for k, v in payload[key].items()}
    if isinstance(payload.get("pair_errors"), dict):
        payload["pair_errors"] = {"-".join(str(name(int(p))) for p in k.split("-")): v
                                  for k, v in payload["pair_errors"].items()}
    schedule = payload.get("pair_schedule") or {}
    schedule["rounds"] = [[[name(a), name(b)] for a, b in pairs] for pairs in schedule.get("rounds") or []]
    if isinstance(payload.get("allreduce"), dict):
        payload["allreduce"]["gpus"] = [name(o) for o in payload["allreduce"].get("cuda_ordinals") or []]


def main(argv=None) -> int:
    began_process = time.monotonic()
    parser = argparse.ArgumentParser(prog="python3 -m verify.bench.gpu_engine")
    parser.add_argument("--mode", choices=("quick", "burn"), default="quick")
    parser.add_argument("--sections", default="gpu,pairs",
                        help=f"quick mode: a comma list of {', '.join(SECTIONS)} (one process measures them all)")
    parser.add_argument("--gpus", default="all", help="'all' or a comma list of CUDA ordinals")
    parser.add_argument("--exclude-bus-ids", default="",
                        help="GPUs (PCI bus ids) never touched: another job holds them")
    parser.add_argument("--hbm-bytes", type=parse_size, default=2 << 30)
    parser.add_argument("--matmul-n", type=int, default=8192)
    parser.add_argument("--seconds", type=float, default=1.0, help="timed window of the HBM copy")
    parser.add_argument("--matmul-iters", type=int, default=20, help="timed batch of the quick matmul (after --warmup)")
    parser.add_argument("--pair-bytes", type=parse_size, default=256 << 20)
    parser.add_argument("--pair-seconds", type=float, default=0.25)
    parser.add_argument("--pairs", choices=("on", "off"), default="on")
    parser.add_argument("--pair-schedule", choices=("serial", "concurrent"), default="serial",
                        help="concurrent: disjoint pairs side by side (only where every GPU's links are its own)")
    parser.add_argument("--pair-schedule-why", default="", help="why this schedule (for the report)")
    parser.add_argument("--hostcopy-bytes", type=parse_size, default=256 << 20)
    parser.add_argument("--hostcopy-iters", type=int, default=10)
    parser.add_argument("--allreduce-min-bytes", type=parse_size, default=8 << 20)
    parser.add_argument("--allreduce-max-bytes", type=parse_size, default=1 << 30)
    parser.add_argument("--allreduce-iters", type=int, default=20)
    parser.add_argument("--allreduce-warmup", type=int, default=5)
    parser.add_argument("--serial", action="store_true", help="GPUs one at a time (default: all at once)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sample-ms", type=float, default=50.0)
    parser.add_argument("--burn-seconds", type=float, default=60.0)
    parser.add_argument("--burn-chunk", type=int, default=20)
    parser.add_argument("--burn-check-s", type=float, default=10.0)
    parser.add_argument("--burn-settle-s", type=float, default=2.0, help="ramp-up left out of the clock judgement")
    args = parser.parse_args(argv)
    sections = [s for s in (p.strip() for p in args.sections.split(",")) if s]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    excluded = {normal_bus(b) for b in args.exclude_bus_ids.split(",") if b.strip()}
    hidden = restrict_visible(excluded)  # before torch: CUDA reads CUDA_VISIBLE_DEVICES once, at its start
    phases: dict = {}
    mark = time.monotonic()
    torch, why = cuda_torch()
    phases["torch_import_s"] = round(time.monotonic() - mark, 3)
    if torch is None:
        print(why, file=sys.stderr)
        return CANNOT_RUN
    count = torch.cuda.device_count()
    mark = time.monotonic()
    nvml, handles, facts, nvml_reason = nvml_open(
        count, [normal_bus(torch_bus_id(torch.cuda.get_device_properties(o))) or None for o in range(count)])
    gpus = identities(torch, nvml, count)
    by_ordinal = {g["cuda_ordinal"]: g["index"] for g in gpus}
    # A GPU still listed although hidden (NVML could not restrict): never touched, by ordinal.
    ordinals = [g["cuda_ordinal"] for g in gpus if normal_bus(g.get("bus_id")) not in excluded] \
        if args.gpus == "all" else [int(i) for i in args.gpus.split(",")]
    for gpu in gpus:
        gpu["nvml"] = facts.get(gpu["cuda_ordinal"], {})
    for ordinal in ordinals:
        torch.empty(1, device=ordinal)  # the contexts, once, up front: each costs ~0.3 s and no figure
    phases["cuda_init_s"] = round(time.monotonic() - mark, 3)
    sampler = Sampler(nvml, {i: handles[i] for i in ordinals if i in handles}, args.sample_ms / 1000.0).start() \
        if nvml else None
    payload = {"engine": "torch", "torch": torch.__version__, "mode": args.mode, "gpus": gpus,
               "nvml": nvml_reason or "sampled", "sample_ms": args.sample_ms, "parallel": not args.serial,
               "sections": sections, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "hidden": hidden,
               "measured": [by_ordinal.get(o, o) for o in ordinals], "phases": phases}
    began = time.monotonic()

    def timed_phase(name, call):
        start = time.monotonic()
        try:
            return call()
        finally:
            phases[f"{name}_s"] = round(time.monotonic() - start, 3)

    try:
        if args.mode == "burn":
            n = args.matmul_n
            gen = torch.Generator(device="cpu").manual_seed(4321)
            inputs = tuple(torch.randn(n, n, generator=gen).to(torch.bfloat16) for _ in range(2))
            done = _threads(lambda i, res: burn_gpu(torch, i, args, sampler, inputs, res), ordinals)
            payload["burn"] = {"seconds": args.burn_seconds, "n": n, "dtype": "bfloat16",
                               "gpus": [done["results"][i] for i in ordinals if i in done["results"]],
                               "errors": {str(k): v for k, v in done["errors"].items()}}
        if args.mode == "quick" and "peer" in sections and len(ordinals) > 1:
            payload["peer"] = timed_phase("peer", lambda: {"pairs": peer_matrix(torch, ordinals)})
        if args.mode == "quick" and "gpu" in sections:
            def per_gpus():
                if not args.serial:
                    return _threads(lambda i, res: res.__setitem__(i, per_gpu(torch, i, args, sampler)), ordinals)
                done = {"results": {}, "errors": {}}
                for index in ordinals:
                    part = _threads(lambda i, res: res.__setitem__(i, per_gpu(torch, i, args, sampler)), [index])
                    done["results"].update(part["results"])
                    done["errors"].update(part["errors"])
                return done
            done = timed_phase("per_gpu", per_gpus)
            payload["per_gpu"] = [done["results"][i] for i in ordinals if i in done["results"]]
            payload["per_gpu_errors"] = {str(k): v for k, v in done["errors"].items()}
            payload["per_gpu_s"] = phases["per_gpu_s"]
        if args.mode == "quick" and "pairs" in sections and args.pairs == "on":
            rows, errors, rounds = timed_phase("pairs", lambda: measure_pairs(torch, ordinals, args, sampler))
            payload["pairs"], payload["pair_errors"] = rows, errors
            payload["pair_schedule"] = {"mode": args.pair_schedule, "why": args.pair_schedule_why, "rounds": rounds}
        if args.mode == "quick" and "hostcopy" in sections:
            rows, errors = timed_phase("hostcopy", lambda: measure_hostcopy(torch, ordinals, handles, args))
            payload["hostcopy"] = {"engine": "torch", "torch": torch.__version__, "size_bytes": args.hostcopy_bytes,
                                   "iters": args.hostcopy_iters, "gpus": rows}
            payload["hostcopy_errors"] = {str(k): v for k, v in errors.items()}
        if args.mode == "quick" and "allreduce" in sections and len(ordinals) > 1:
            try:
                payload["allreduce"] = timed_phase("allreduce", lambda: allreduce_sweep(torch, ordinals, args))
                payload["allreduce"]["cuda_ordinals"] = list(ordinals)
            except Exception as exc:  # its own ERROR row; the other sections still count
                payload["allreduce_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if sampler:
            sampler.stop()
            payload["nvml_errors"] = {str(by_ordinal.get(k, k)): v for k, v in sampler.errors.items()}
    renumbered(payload, by_ordinal)
    payload["engine_s"] = round(time.monotonic() - began, 3)
    phases["process_s"] = round(time.monotonic() - began_process, 3)
    for row in payload.get("per_gpu", []):
        print(f"gpu{row['index']}: HBM {row['hbm']['gbps']:.0f} GB/s, BF16 {row['matmul']['tflops']:.0f} TFLOPS",
              file=sys.stderr, flush=True)
    emit_result(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
