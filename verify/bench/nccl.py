"""NCCL all-reduce check: nccl-tests' all_reduce_perf when installed, else the built-in torch engine.

Both engines give the same curve (size -> busbw); the check judges the busbw at the largest
size (nccl-tests' "Avg bus bandwidth" footer averages every size and both in/out-of-place, so
it sits far below peak), validates the output's shape and reads NCCL_DEBUG=INFO for the transport.
"""

from __future__ import annotations

import glob
import math
import os
from dataclasses import dataclass, field
from typing import Optional

from verify.bench import nccl_transport, torch_allreduce
from verify.bench.common import (
    Threshold,
    Try,
    broken_measurement,
    figure_text,
    human_bytes,
    judged,
    last_line,
    module_available,
    parse_size,
    payload_error,
    progress,
    result,
    tail,
    with_retries,
)
from verify.bench.nccl_parse import CurvePoint, NcclParseError, NcclTransport, parse_nccl_debug, parse_nccl_tests
from verify.engine import ENGINE_CWD, engine_argv, engine_env, read_result
from verify.judging import peaks, verdicts
from verify.payload_schema import checked_payload
from verify.profiles import bench_setting, resolve_threshold
from verify.result import CheckResult, Status
from verify.runner import which

CHECK_ID = "bench.nccl_allreduce"
REMEDIATION = "gpu: gpu_nccl_conf (and the NVLink/NIC state); re-run `tunefleet bench nccl` after fixing"
NOTHING_MOVED = "an all-reduce that moved nothing at the largest size"
DEBUG_ENV = nccl_transport.DEBUG_ENV  # what NCCL must print for its transport to be read (one home)


@dataclass
class NcclOptions:
    engine: str = "auto"  # auto | nccl-tests | torch
    gpus: Optional[int] = None
    min_bytes: int = 8 << 20
    max_bytes: int = 4 << 30
    iters: int = 20
    warmup: int = 5
    tries: int = 2
    timeout_s: float = 600.0
    binary: Optional[str] = None
    backend: str = "nccl"  # gloo runs the torch engine on CPU (tests, CI)
    allow_socket: bool = False
    extra_env: dict = field(default_factory=dict)
    save_raw: Optional[str] = None


@dataclass
class Measurement:
    """One engine run, reduced to what the judge needs."""

    engine: str
    points: list
    ranks: int
    transport: NcclTransport
    problems: list  # shape problems that make the run untrustworthy (FAIL)
    raw: dict
    payload_problems: list = field(default_factory=list)  # malformed engine rows, dropped before judging


# Fraction of one GPU's unidirectional NVLink bandwidth a healthy ring all-reduce reaches: 0.72 on
# the 2x H200 here (342 of 478 GB/s), ~0.81 on 8x H100/H200 with NVLS off (365 of 450 GB/s,
# stas00/ml-engineering network/README.md). Below 0.6 something is wrong; below 0.68 is suspicious.
NVLINK_FAIL_SHARE, NVLINK_WARN_SHARE = 0.60, 0.68


def derive_threshold(nvlink_per_gpu: Optional[float], gpus: int) -> Optional[Threshold]:
    """A floor for unknown hardware from the slowest GPU's NVLink bandwidth (None without NVLink)."""
    if gpus < 2 or not nvlink_per_gpu:
        return None
    slowest = nvlink_per_gpu
    return Threshold(
        limit=round(NVLINK_FAIL_SHARE * slowest, 1),
        warn=round(NVLINK_WARN_SHARE * slowest, 1),
        source=f"derived: {NVLINK_FAIL_SHARE}/{NVLINK_WARN_SHARE} x {slowest:.1f} GB/s unidirectional NVLink per GPU "
        "(nvidia-smi nvlink --status)",
    )


def link_peak(node, nvls: bool) -> Optional[peaks.Peak]:
    """The busbw bound from the node's NVLink and PCIe links (live node only; None when unknown)."""
    if not node.is_live:
        return None
    from verify.facts.hardware import detect

    found = detect(node)
    return peaks.allreduce_peak(found.nvlink_per_gpu(), found.pcie_peak(), nvls)


def reachable_peak(node, nvls_ran: bool) -> Optional[peaks.Peak]:
    """The busbw the algorithm that ran can reach on this node (the "% of peak" a report shows), live node only."""
    if not node.is_live:
        return None
    from verify.facts.hardware import detect

    found = detect(node)
    return peaks.allreduce_reachable(found.nvlink_per_gpu(), found.pcie_peak(), nvls_ran)


def count_gpus(root: str) -> int:
    return len([p for p in glob.glob(os.path.join(root, "dev", "nvidia[0-9]*")) if os.path.basename(p)[6:].isdigit()])


def options_from(profile: Optional[dict], overrides: Optional[dict] = None) -> NcclOptions:
    opts = NcclOptions(
        min_bytes=parse_size(bench_setting("nccl_min_bytes", profile, 8 << 20)),
        max_bytes=parse_size(bench_setting("nccl_max_bytes", profile, 4 << 30)),
        iters=int(bench_setting("nccl_iters", profile, 20)),
        warmup=int(bench_setting("nccl_warmup", profile, 5)),
        tries=int(bench_setting("tries", profile, 2)),
        allow_socket=bool(bench_setting("nccl_allow_socket", profile, False)),
    )
    for key, value in (overrides or {}).items():
        if value is not None:
            setattr(opts, key, value)
    return opts


def pick_engine(opts: NcclOptions, root: str) -> tuple:
    """(engine, binary or None, skip reason or None)."""
    binary = opts.binary or which("all_reduce_perf", root)
    torch_ok = module_available("torch")
    if opts.engine == "nccl-tests":
        return ("nccl-tests", binary, None) if binary else (None, None, "all_reduce_perf (nccl-tests) is not on PATH")
    if opts.engine == "torch" or opts.backend == "gloo":
        return (
            ("torch", None, None)
            if torch_ok
            else (None, None, "PyTorch is not installed (the built-in engine needs it)")
        )
    if binary:
        return "nccl-tests", binary, None
    if torch_ok:
        return "torch", None, None
    return (
        None,
        None,
        "neither nccl-tests' all_reduce_perf is on PATH nor PyTorch installed: nothing can run all-reduce",
    )


def nccl_tests_argv(binary: str, opts: NcclOptions, gpus: int) -> list:
    # One process driving every GPU (-g): the single-node form that needs no MPI.
    return [
        binary,
        "-b",
        str(opts.min_bytes),
        "-e",
        str(opts.max_bytes),
        "-f",
        "2",
        "-g",
        str(gpus),
        "-n",
        str(opts.iters),
        "-w",
        str(opts.warmup),
        "-c",
        "1",
    ]


def torch_argv(opts: NcclOptions, gpus: int) -> list:
    return engine_argv(
        "verify.bench.torch_allreduce",
        [
            "--backend",
            opts.backend,
            "--ranks",
            gpus,
            "--min-bytes",
            opts.min_bytes,
            "--max-bytes",
            opts.max_bytes,
            "--iters",
            opts.iters,
            "--warmup",
            opts.warmup,
            "--timeout-s",
            int(max(60, opts.timeout_s)),
        ],
    )


def measure(node, engine: str, binary: Optional[str], opts: NcclOptions, gpus: int) -> tuple:
    """(Measurement or None, ERROR reason or None). A crash or hang is an ERROR with partial output."""
    env = dict(DEBUG_ENV)
    env.update(opts.extra_env)
    argv = nccl_tests_argv(binary, opts, gpus) if engine == "nccl-tests" else torch_argv(opts, gpus)
    if engine == "torch":
        env = engine_env(env)
    out = node.run(argv, timeout_s=opts.timeout_s, env=env, cwd=ENGINE_CWD)
    raw = {
        "argv": argv,
        "returncode": out.returncode,
        "duration_s": round(out.duration_s, 2),
        "stdout_tail": tail(out.stdout),
        "stderr_tail": tail(out.stderr),
    }
    if opts.save_raw:
        _save_raw(opts.save_raw, engine, out)
    if out.missing:
        return None, f"{argv[0]} could not be started: {out.stderr.strip()}", raw
    if out.timed_out:
        return None, f"{engine} hung: killed after {opts.timeout_s:.0f} s (partial output kept)", raw
    transport = parse_nccl_debug(out.stdout + "\n" + out.stderr)
    if engine == "nccl-tests":
        try:
            run = parse_nccl_tests(out.stdout)
        except NcclParseError as exc:  # output a sick node cut or garbled: this try's ERROR, not a crash
            return None, f"all_reduce_perf output is broken ({exc}): not a measurement", raw
        if not run.points:
            return None, f"all_reduce_perf exited {out.returncode} without a result row", raw
        problems = []
        if run.footers == 0 or run.out_of_bounds is None:
            return None, f"all_reduce_perf exited {out.returncode} before its summary (output truncated)", raw
        if run.footers > 1:
            problems.append(f"{run.footers} separate nccl-tests runs in one output (built without MPI=1 under mpirun?)")
        if run.out_of_bounds or run.out_of_bounds_ok is False:
            problems.append(f"{run.out_of_bounds} out-of-bounds values (data corruption)")
        wrong = [p.size_bytes for p in run.points if (p.wrong or 0) > 0 or (p.inplace_wrong or 0) > 0]
        if wrong:
            problems.append(f"#wrong is non-zero at sizes {wrong[:4]}")
        if out.returncode not in (0, None):
            problems.append(f"all_reduce_perf exited {out.returncode}")
        return Measurement(engine, run.points, run.rank_count, transport, problems, raw), None, raw
    payload = read_result(out.stdout)
    if payload is None:
        return None, f"built-in all-reduce exited {out.returncode} without a result: {last_line(out.stderr)}", raw
    payload, malformed = checked_payload(payload, torch_allreduce.PAYLOAD_SCHEMA)
    if payload is None:
        return None, payload_error(CHECK_ID, "the built-in all-reduce", malformed).reason, dict(
            raw, payload_problems=malformed)
    measurement = measurement_of(payload, transport, raw)
    measurement.payload_problems = malformed
    return measurement, None, raw


def measurement_of(payload: dict, transport: NcclTransport, raw: dict) -> Measurement:
    """The engine's all-reduce rows (verify.bench.torch_allreduce.PAYLOAD_SCHEMA, checked) -> a Measurement."""
    points = [CurvePoint(r["size_bytes"], r["count"], r["dtype"], r["redop"], r["time_us"], r["algbw_gbps"],
                         r["busbw_gbps"], r["wrong"]) for r in payload["rows"]]
    if transport.nccl_version is None:
        transport.nccl_version = payload.get("nccl_version")
    wrong = [p.size_bytes for p in points if (p.wrong or 0) > 0]
    problems = [f"wrong all-reduce results at sizes {wrong[:4]}"] if wrong else []
    raw["engine_meta"] = {k: v for k, v in payload.items() if k != "rows"}
    return Measurement("torch", points, payload["world_size"], transport, problems, raw)


def from_session(session) -> tuple:
    """(Measurement or None, ERROR reason or None, raw) from the run's one engine (verify.bench.engine_session)."""
    raw = dict(session.raw, engine="verify.bench.engine_session")
    if session.failure is not None:
        return None, session.failure.reason, raw
    payload = (session.payload or {})
    if payload.get("allreduce_error"):
        return None, f"the all-reduce failed in the GPU engine: {payload['allreduce_error'][:300]}", raw
    part = session.section("allreduce")
    if part is None:
        bad = [p for p in session.problems if p.startswith("allreduce")]
        return None, "the GPU engine returned no all-reduce" + (f": {'; '.join(bad[:3])}" if bad else ""), raw
    transport = parse_nccl_debug(session.stdout + "\n" + session.stderr)
    return measurement_of(part, transport, raw), None, raw


def _save_raw(directory: str, engine: str, out) -> None:
    from verify.safe_io import safe_mkdir, write_file_atomic  # runs as root: no symlink followed

    safe_mkdir(directory)
    base = os.path.join(directory, f"nccl_allreduce_{engine}")
    index = 1
    while os.path.lexists(f"{base}.{index}.stdout"):
        index += 1
    for stream, text in (("stdout", out.stdout), ("stderr", out.stderr)):
        write_file_atomic(f"{base}.{index}.{stream}", text)


def judge(
    measurement: Measurement,
    expected_gpus: int,
    threshold: Optional[Threshold],
    opts: NcclOptions,
    nvls_expected: Optional[bool],
    peak: Optional[peaks.Peak] = None,
    reachable: Optional[peaks.Peak] = None,
) -> CheckResult:
    """Pure: a measurement plus expectations -> the check result.

    `peak` is the links' physical bound: a busbw above it is ERROR (the measurement is broken). `reachable`
    is what the algorithm that ran can reach (ring/tree: one GPU's link bandwidth; NVLS twice that, only
    where NCCL used it): the "% of peak" a report shows, never a verdict by itself.
    """
    curve = [p.to_dict() for p in measurement.points]
    largest = max(measurement.points, key=lambda p: p.size_bytes)
    observed = largest.busbw_gbps
    if isinstance(observed, float) and math.isfinite(observed):
        observed = round(observed, 2)  # the curve in details keeps every digit the engine printed
    details = {
        "engine": measurement.engine,
        "curve": curve,
        "judged_size_bytes": largest.size_bytes,
        "ranks": measurement.ranks,
        "transport": measurement.transport.to_dict(),
    }
    if threshold is not None:
        details["threshold"] = threshold.to_dict()
    if peak is not None:
        details["physical_peak"] = peak.to_dict()
    if reachable is not None:
        details["reachable_peak"] = reachable.to_dict()
    expected = threshold.describe() + " GB/s busbw" if threshold else None
    label = f"busbw {figure_text(observed, 1)} GB/s at {human_bytes(largest.size_bytes)}" \
        if observed is not None else "no busbw"
    if measurement.problems:
        return result(
            CHECK_ID,
            Status.FAIL,
            f"{label}, but the run is not valid: {measurement.problems[0]}",
            expected,
            observed,
            REMEDIATION,
            details,
        )
    if measurement.ranks != expected_gpus:
        return result(
            CHECK_ID,
            Status.FAIL,
            f"all-reduce ran on {measurement.ranks} ranks, expected {expected_gpus} GPUs",
            expected,
            observed,
            "check that every GPU is visible (nvidia-smi) and CUDA_VISIBLE_DEVICES",
            details,
        )
    if measurement.transport.socket_fallback and not opts.allow_socket:
        return result(
            CHECK_ID,
            Status.FAIL,
            f"{label}: NCCL fell back to TCP sockets (NET/Socket), not NVLink/IB",
            expected,
            observed,
            "gpu: gpu_nccl_conf (NCCL_IB_HCA, NCCL_SOCKET_IFNAME); check nvidia_peermem and the HCAs",
            details,
        )
    if observed is None:
        return result(CHECK_ID, Status.ERROR, "no busbw at the largest size", expected, None, REMEDIATION, details)
    nvls_note = ""
    if nvls_expected and measurement.transport.nvls is False:
        nvls_note = " (NVLS was off, the profile expects it on: the floor assumes NVLS)"
    if measurement.ranks < 2:
        return result(CHECK_ID, Status.ERROR, f"{label} from {measurement.ranks} rank: an all-reduce needs 2 ranks,"
                      " a 1-rank figure is a local copy, not a measurement", expected, observed, REMEDIATION, details)
    if threshold is None:
        broken = broken_measurement(largest.busbw_gbps, peak and peak.gbps, peak.source if peak else "", 0.0,
                                    NOTHING_MOVED)
        if broken:
            return result(CHECK_ID, Status.ERROR, f"{label}: {broken}", None, observed,
                          "the benchmark's output is not a real measurement: re-run it and read its raw output",
                          details)
        return result(
            CHECK_ID,
            Status.PASS,
            f"{label}; no floor known for this hardware: recorded only{nvls_note}",
            None,
            observed,
            "",
            details,
        )
    return judged(CHECK_ID, threshold, largest.busbw_gbps, label, expected, observed, REMEDIATION, details, nvls_note,
                  peak=peak.gbps if peak else None, peak_source=peak.source if peak else "", floor=0.0,
                  floor_source=NOTHING_MOVED)


def session_gpus(session) -> tuple:
    """(the GPUs the run's one engine measured (NVML indices), a SKIP/ERROR row when fewer than 2, or None)."""
    payload = session.payload or {}
    measured = [g for g in payload.get("measured") or [] if isinstance(g, int)]
    if session.failure is not None or len(measured) >= 2:
        return measured, None
    busy = "; ".join(b.describe() for b in session.busy)
    if busy:
        return measured, result(CHECK_ID, Status.ERROR, f"all-reduce not run: {busy}; {len(measured)} GPU(s) left "
                                "idle, an all-reduce needs 2", "2 idle GPUs", len(measured),
                                verdicts.remedy(verdicts.APPLICATION, "", "the GPUs"),
                                {verdicts.ACTION_KEY: verdicts.APPLICATION,
                                 "busy": [b.describe() for b in session.busy]})
    return measured, result(CHECK_ID, Status.SKIP, f"needs 2 ranks, {len(measured)} GPU visible to this process "
                            f"(CUDA_VISIBLE_DEVICES={payload.get('visible')!r})")


def run(spec: Optional[dict], profile: Optional[dict], node, overrides: Optional[dict] = None,
        session=None) -> list:
    opts = options_from(profile, overrides)
    root = getattr(node, "root", "/")
    engine, binary, skip = pick_engine(opts, root)
    if skip:
        return [result(CHECK_ID, Status.SKIP, skip, remediation="install nccl-tests or `pip install tunefleet[torch]`")]
    shared = session is not None and session.has("allreduce")
    measured: list = []
    if shared:
        measured, early = session_gpus(session)
        if early is not None:
            return [early]
    # Run on the GPUs the node has (the run's one engine: the GPUs this process sees and no other job holds).
    gpus = len(measured) if shared else (opts.gpus or count_gpus(root) or (profile or {}).get("gpu_count"))
    if opts.backend == "gloo":
        gpus = opts.gpus or 2
    if not gpus:
        return [result(CHECK_ID, Status.SKIP, "needs 2 ranks: no GPU on this node (no /dev/nvidiaN)")]
    if gpus < 2:
        # One rank all-reduces with itself: a memcpy whose "busbw" once read 49592.7 GB/s on 1x H100.
        return [result(CHECK_ID, Status.SKIP, f"needs 2 ranks, this node has {gpus} GPU")]
    # The one engine ran on exactly the GPUs it could see and use, and says which: its rank count is that.
    # Its own engine: judged against the GPUs the profile says the node has, so a node that lost a GPU FAILs
    # on the rank count instead of erroring out of the launcher.
    expected_gpus = gpus if shared else ((profile or {}).get("gpu_count") or gpus)
    nvls_expected = (profile or {}).get("nvls_expected")
    peak = link_peak(node, nvls=nvls_expected is not False) if opts.backend == "nccl" else None
    peak = peak or peaks.unknown_links_bound()  # unknown links still bound what is possible
    threshold = resolve_threshold("nccl_allreduce_busbw_gbps", profile, spec)
    if threshold is None and opts.backend == "nccl" and node.is_live:
        from verify.facts.hardware import detect

        threshold = derive_threshold(detect(node).nvlink_per_gpu(), gpus)
    progress(
        f"NCCL all-reduce: {engine} engine, {gpus} ranks, {human_bytes(opts.min_bytes)}..{human_bytes(opts.max_bytes)},"
        f" timeout {opts.timeout_s:.0f} s"
    )

    malformed_by_try: list = []

    def attempt(index: int) -> Try:
        if shared:  # the first try is the run's one engine's; a retry runs that engine's all-reduce alone
            measurement, error, raw = from_session(session if index == 0 else session.again(node, "allreduce"))
            if measurement is not None:
                raw["gpus"] = measured
        else:
            measurement, error, raw = measure(node, engine, binary, opts, gpus)
        malformed_by_try.append(measurement.payload_problems if measurement else [])
        if measurement is None:
            return Try(
                result(
                    CHECK_ID,
                    Status.ERROR,
                    error,
                    threshold.describe() if threshold else None,
                    None,
                    REMEDIATION,
                    {"engine": engine, "partial_output": raw},
                ),
                {"engine": engine},
            )
        judged = judge(measurement, expected_gpus, threshold, opts, nvls_expected, peak,
                       reachable_peak(node, measurement.transport.nvls is True))
        judged.details["run"] = raw
        if shared:
            judged.details["gpus"] = measured
            judged.reason += f" (GPUs {', '.join(str(g) for g in measured)})"
        return Try(
            judged, {"engine": engine, "curve_busbw": {str(p.size_bytes): p.busbw_gbps for p in measurement.points}}
        )

    outcome = with_retries(attempt, opts.tries, "NCCL all-reduce")
    if malformed_by_try and malformed_by_try[-1]:  # the well-formed sizes were judged above
        return [outcome, payload_error(f"{CHECK_ID}.payload", "the built-in all-reduce", malformed_by_try[-1])]
    return [outcome]
