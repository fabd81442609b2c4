"""GPU engines in the quick set: per-GPU HBM bandwidth and BF16 matmul, per ordered GPU pair the copy
one way and both ways at once, each with the NVML readings taken while it ran (verify.bench.gpu_engine
measures, verify.bench.gpu_judge judges)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from verify.bench import gpu_engine, gpu_judge
from verify.bench.common import (
    human_bytes,
    last_line,
    module_available,
    payload_error,
    progress,
    result,
    tail,
)
from verify.engine import CANNOT_RUN, ENGINE_CWD, engine_argv, engine_env, read_result
from verify.judging import verdicts
from verify.payload_schema import checked_payload
from verify.profiles import resolve_threshold
from verify.result import Status

CHECK_ID = "bench.gpu"
# torch numbers GPUs fastest-first unless told; nvidia-smi, NVML and the health checks by PCI bus.
ENGINE_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@dataclass
class GpuOptions:
    hbm_bytes: int = 2 << 30  # as issue 19 measured (2 GiB copied: 4 GiB of HBM traffic)
    matmul_n: int = 8192
    seconds: float = 2.0  # timed window of the HBM copy ("quick": 1 s, verify.bench.QUICK)
    # The matmul is one batch of this many iterations after 3 warm-ups (issue 19's plain loop, ~30 ms on
    # H200): a longer window reaches the power cap and measures the capped clock (the burn's figure).
    matmul_iters: int = 20
    pair_bytes: int = 256 << 20
    pair_seconds: float = 0.5
    pairs: bool = True
    serial: bool = False
    spread_pct: float = gpu_judge.DEFAULT_SPREAD_PCT
    sample_ms: float = 50.0
    timeout_s: float = 300.0


def options_from(overrides: Optional[dict]) -> GpuOptions:
    chosen = GpuOptions()
    for key, value in (overrides or {}).items():
        if hasattr(chosen, key) and value is not None:
            setattr(chosen, key, value)
    return chosen


def engine_args(options: GpuOptions) -> list:
    return ["--mode", "quick", "--hbm-bytes", options.hbm_bytes, "--matmul-n", options.matmul_n,
            "--matmul-iters", options.matmul_iters, "--seconds", options.seconds, "--pair-bytes", options.pair_bytes,
            "--pair-seconds", options.pair_seconds,
            "--pairs", "on" if options.pairs else "off", "--sample-ms", options.sample_ms,
            *(["--serial"] if options.serial else [])]


def engine_failure(check_id: str, what: str, out, timeout: float) -> Optional[list]:
    """The one row for an engine that gave no result (hung, cannot run here, crashed), else None."""
    raw = {"returncode": out.returncode, "stderr_tail": tail(out.stderr), "stdout_tail": tail(out.stdout)}
    if out.timed_out:
        return [result(check_id, Status.ERROR, f"{what} hung: killed after {timeout:.0f} s",
                       details={"partial_output": raw})]
    if read_result(out.stdout) is not None:
        return None
    if out.returncode == CANNOT_RUN:
        return [result(check_id, Status.SKIP, f"{what} cannot run here: {last_line(out.stderr)}",
                       details={"partial_output": raw})]
    return [result(check_id, Status.ERROR, f"{what} exited {out.returncode} without a result: "
                                           f"{last_line(out.stderr)}", details={"partial_output": raw})]


def link_facts(node) -> tuple:
    """({GPU index: NVLink GB/s per direction} or None where the links could not be read, PCIe peak) from
    the run's hardware (verify.facts.hardware)."""
    from verify.facts.hardware import detect

    found = detect(node)
    nvlink = None if found.nvlink_reason else {g.index: g.nvlink_gbps for g in found.gpus}
    return nvlink, found.pcie_peak()


def judge_payload(payload: dict, spec: Optional[dict], profile: Optional[dict], node, spread_pct: float) -> list:
    nvlink, pcie = link_facts(node)
    items, rows = gpu_judge.figures(payload, nvlink, pcie)
    floors = {kind: resolve_threshold(key, profile, spec) for kind, key in gpu_judge.KEYS.items()}
    rows += [gpu_judge.judge(item, items, floors[item.kind], spread_pct) for item in items]
    count = len(payload.get("gpus", []))
    if count == 1:
        rows += gpu_judge.one_gpu_skip(count)
    return rows


def run(spec: Optional[dict], profile: Optional[dict], node, overrides: Optional[dict] = None,
        session=None) -> list:
    """Judge the GPU engine's figures: the run's one engine (verify.bench.engine_session) where it measured
    them, else this family's own engine run."""
    options = options_from(overrides)
    busy_rows = session.busy_rows("gpu") if session is not None else []
    if session is not None and session.has("gpu"):
        if session.failure is not None:
            return [session.failure, *busy_rows]
        payload, problems, wall = session.section("gpu"), list(session.problems), session.wall_s
        if payload is None and busy_rows:
            return [result(CHECK_ID, Status.ERROR, f"every GPU is in use by another process: not benchmarked "
                           f"({len(busy_rows) // 2} GPU(s))", details={verdicts.ACTION_KEY: verdicts.APPLICATION}),
                    *busy_rows]
        if payload is None:
            return [payload_error(CHECK_ID, "the GPU engine", problems or ["no per-GPU figures"])]
    else:
        if not module_available("torch"):
            return [result(CHECK_ID, Status.SKIP, "PyTorch is not installed (the GPU engines need it)",
                           remediation="pip install tunefleet[torch]")]
        argv = engine_argv("verify.bench.gpu_engine", engine_args(options))
        progress(f"GPU engines: HBM copy {human_bytes(options.hbm_bytes)} for {options.seconds:g} s, BF16 matmul "
                 f"{options.matmul_n}^3 x {options.matmul_iters}, all GPUs at once; pair copies "
                 f"{human_bytes(options.pair_bytes)}")
        start = time.perf_counter()
        out = node.run(argv, timeout_s=options.timeout_s, env=engine_env(ENGINE_ENV), cwd=ENGINE_CWD)
        wall = time.perf_counter() - start
        failed = engine_failure(CHECK_ID, "GPU engine", out, options.timeout_s)
        if failed:
            return failed
        payload, problems = checked_payload(read_result(out.stdout), gpu_engine.PAYLOAD_SCHEMA)
        if payload is None:  # nothing safe to judge: one row naming what is wrong, never a crash
            return [payload_error(CHECK_ID, "the GPU engine", problems)]
    rows = judge_payload(payload, spec, profile, node, options.spread_pct) + busy_rows
    problems = [p for p in problems if not p.startswith(("hostcopy.", "allreduce."))]
    if problems:  # the well-formed GPUs are judged above; the malformed ones are named here
        rows.append(payload_error(f"{CHECK_ID}.payload", "the GPU engine", problems))
    worst = max(rows, key=lambda r: (r.status is Status.ERROR, r.status is Status.FAIL, r.status is Status.WARN))
    schedule = payload.get("pair_schedule") or {}
    summary = result(CHECK_ID, Status.PASS if worst.status in (Status.PASS, Status.SKIP) else worst.status,
                     f"GPU engines: {len(payload.get('gpus', []))} GPU(s), {len(rows)} rows in {wall:.1f} s "
                     f"(engine {payload.get('engine_s', 0):.1f} s, NVML {payload.get('nvml')})"
                     + (f"; pairs {schedule.get('mode')}: {schedule.get('why')}" if schedule.get("why") else ""),
                     observed=round(wall, 2),
                     details={"wall_s": round(wall, 2), "engine_s": payload.get("engine_s"),
                              "torch": payload.get("torch"), "parallel": payload.get("parallel"),
                              "gpus": payload.get("gpus"), "nvml_errors": payload.get("nvml_errors"),
                              "measured": payload.get("measured"), "visible": payload.get("visible"),
                              "pair_schedule": schedule, "phases": payload.get("phases")})
    progress(summary.reason)
    return [summary, *rows]
