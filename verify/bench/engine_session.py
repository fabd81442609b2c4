"""One engine per run: the GPU measurements of `verify` (HBM, matmul, pair copies, host copies, CUDA peer
access, the NCCL all-reduce) made by ONE process that imports torch, creates each GPU's context and NCCL's
communicators once (verify.bench.gpu_engine --sections), instead of a process per family.

`start` plans the sections from the families the run asks for, reads first which GPUs other processes
hold (verify.facts.gpu_processes: those are hidden from the engine, never benchmarked, and each gets an
ERROR row, action `application`, naming the process), decides whether disjoint GPU pairs may be copied
side by side (only where every GPU's NVLinks all reach every other GPU: a switched board), runs the
engine once and checks each section against its family's schema. The families (verify.bench.gpu,
hostcopy, nccl) then judge their section as they judge their own engine's payload; a family asked
without a session (tests, a retry) still runs its own engine.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

from verify.bench import gpu, gpu_engine, hostcopy, nccl, torch_allreduce, torch_hostcopy
from verify.bench.common import human_bytes, last_line, module_available, progress, result, tail
from verify.engine import CANNOT_RUN, ENGINE_CWD, engine_argv, engine_env, normal_bus, read_result
from verify.facts.gpu_processes import GpuProcesses, read_gpu_processes
from verify.facts.gpu_query import query_gpus
from verify.facts.hardware import detect
from verify.facts.peer_access import nvlink_count, read_gpu_links
from verify.judging import verdicts
from verify.payload_schema import checked_payload
from verify.result import CheckResult, Status

# torch numbers GPUs fastest-first unless told; nvidia-smi, NVML and the health checks by PCI bus.
ENGINE_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
NCCL_DEBUG_ENV = nccl.DEBUG_ENV  # what NCCL must print for its transport to be read (one home)
# The rows each family would have written for one GPU: a busy GPU gets each of them as an ERROR.
BUSY_ROWS = {"gpu": ("bench.gpu_hbm.gpu{index}", "bench.gpu_matmul.gpu{index}"),
             "hostcopy": ("bench.h2d.gpu{index}", "bench.d2h.gpu{index}")}


@dataclass
class BusyGpu:
    index: int  # nvidia-smi's (NVML's) index
    bus_id: str
    processes: list  # GpuProcess

    def describe(self) -> str:
        said = ", ".join(p.describe() for p in self.processes[:3])
        more = f" and {len(self.processes) - 3} more" if len(self.processes) > 3 else ""
        return f"GPU {self.index} ({self.bus_id}) in use by {said}{more}"


@dataclass
class Session:
    """What the one engine run gave: the checked payload per section, or why there is none."""

    sections: list
    payload: Optional[dict] = None
    problems: list = field(default_factory=list)  # malformed rows dropped at the schema check
    failure: Optional[CheckResult] = None  # the engine gave no result: hung, crashed, cannot run here
    busy: list = field(default_factory=list)  # BusyGpu
    busy_unknown: str = ""  # why the GPUs' processes could not be read
    wall_s: float = 0.0
    stdout: str = ""
    stderr: str = ""
    raw: dict = field(default_factory=dict)
    pair_schedule: dict = field(default_factory=dict)
    timeout_s: float = 600.0
    extra_env: dict = field(default_factory=dict)  # the operator's extra NCCL settings (verify_bench_options)

    def has(self, section: str) -> bool:
        return section in self.sections

    def section(self, name: str) -> Optional[dict]:
        """The payload's part for one family, or None (not asked, not produced, nothing safe to judge)."""
        if self.payload is None or name not in self.sections:
            return None
        if name == "gpu":
            return self.payload if ("per_gpu" in self.payload or "pairs" in self.payload) else None
        return self.payload.get(name) if isinstance(self.payload.get(name), dict) else None

    def busy_rows(self, family: str) -> list:
        """One ERROR per row a busy GPU would have had: not a hardware verdict, action `application`."""
        rows = []
        for held in self.busy:
            for pattern in BUSY_ROWS.get(family, ()):
                rows.append(busy_row(pattern.format(index=held.index), held))
        return rows

    def again(self, node, section: str) -> Session:
        """This run's engine, one section alone (a family's retry): same GPUs, same options."""
        return again(node, self, section)

    def phases(self) -> dict:
        found = dict((self.payload or {}).get("phases") or {})
        found["engine_wall_s"] = round(self.wall_s, 3)
        return found


MEMO_KEY = "engine_session"


def last_session(node) -> Optional[Session]:
    """The engine run this node's benchmark phase made, if any."""
    found = node.memo.get(MEMO_KEY)
    return found if isinstance(found, Session) else None


def busy_row(check_id: str, gpu: BusyGpu, what: str = "not benchmarked") -> CheckResult:
    return result(check_id, Status.ERROR, f"{gpu.describe()}: {what} (another job's figures are not this GPU's)",
                  "an idle GPU", "in use", verdicts.remedy(verdicts.APPLICATION, gpu.index, "the GPU",
                                                         gpu.describe().split(" in use by ", 1)[1]),
                  {verdicts.ACTION_KEY: verdicts.APPLICATION, "bus_id": gpu.bus_id,
                   "processes": [vars(p) for p in gpu.processes], "cause": {
                       "what": "another process computes on this GPU", "evidence": gpu.describe()}})


def busy_gpus(node, inventory) -> tuple:
    """([BusyGpu], why unknown) from nvidia-smi's compute processes, named by the inventory's index."""
    found: GpuProcesses = read_gpu_processes(node)
    index_of = {normal_bus(g.bus_id): g.index for g in inventory.gpus}
    busy = [BusyGpu(index_of.get(bus, -1), bus, procs) for bus, procs in sorted(found.by_bus.items()) if procs]
    return sorted(busy, key=lambda b: b.index), found.unknown_reason


def pair_schedule(node, measured: int) -> tuple:
    """("concurrent" | "serial", why): disjoint pairs side by side only where every GPU's active NVLinks all
    reach every other GPU (each pair reads NV<n> in `nvidia-smi topo -m` with n = the GPU's own link count:
    an NVSwitch board, each GPU's links its own); direct NVLink between some pairs or PCIe stays serial."""
    if measured < 4:
        return "serial", f"{measured} GPU(s): no two disjoint pairs to copy side by side"
    links, why = read_gpu_links(node)
    if why:
        return "serial", f"the GPUs' links are unknown ({why})"
    hardware = detect(node)
    per_gpu = {g.index: g.nvlink_links for g in hardware.gpus}
    for (a, b), level in sorted(links.items()):
        count = nvlink_count(level)
        if not count:
            return "serial", f"GPU {a} and GPU {b} are joined by {level} (PCIe), not NVLink: pairs may share a bridge"
        if count != per_gpu.get(a) or count != per_gpu.get(b):
            return "serial", (f"GPU {a} and GPU {b} share {level} of {per_gpu.get(a)} links: direct NVLink, not a "
                              "switch, so concurrent pairs could contend")
    return "concurrent", "every pair is joined by all of each GPU's NVLinks (a switched fabric): disjoint pairs " \
                         "are independent"


def plan_sections(families: list, nccl_engine: Optional[str], backend: str) -> list:
    sections = []
    if "gpu" in families:
        sections += ["gpu", "pairs", "peer"]
    if "hostcopy" in families:
        sections.append("hostcopy")
    if "nccl" in families and nccl_engine == "torch" and backend == "nccl":
        sections.append("allreduce")
    return sections


def engine_args(sections: list, gpu_options, hostcopy: dict, nccl_options, schedule: tuple, busy: list) -> list:
    args = ["--mode", "quick", "--sections", ",".join(sections),
            "--exclude-bus-ids", ",".join(b.bus_id for b in busy),
            "--pair-schedule", schedule[0], "--pair-schedule-why", schedule[1]]
    if gpu_options is not None:
        args += ["--hbm-bytes", gpu_options.hbm_bytes, "--matmul-n", gpu_options.matmul_n,
                 "--matmul-iters", gpu_options.matmul_iters, "--seconds", gpu_options.seconds,
                 "--pair-bytes", gpu_options.pair_bytes, "--pair-seconds", gpu_options.pair_seconds,
                 "--pairs", "on" if gpu_options.pairs else "off", "--sample-ms", gpu_options.sample_ms,
                 *(["--serial"] if gpu_options.serial else [])]
    if "hostcopy" in sections:
        args += ["--hostcopy-bytes", hostcopy["size_bytes"], "--hostcopy-iters", hostcopy["iters"]]
    if nccl_options is not None and "allreduce" in sections:
        args += ["--allreduce-min-bytes", nccl_options.min_bytes, "--allreduce-max-bytes", nccl_options.max_bytes,
                 "--allreduce-iters", nccl_options.iters, "--allreduce-warmup", nccl_options.warmup]
    return args


def start(node, families: list, options: dict, profile: Optional[dict]) -> Optional[Session]:
    """Run the one engine for the families that can share it; None where none can (no torch, nothing
    asked, a node read through --root)."""
    if not node.is_live or not module_available("torch"):
        return None
    nccl_options = nccl.options_from(profile, options.get("nccl")) if "nccl" in families else None
    nccl_engine = nccl.pick_engine(nccl_options, node.root)[0] if nccl_options else None
    sections = plan_sections(families, nccl_engine, nccl_options.backend if nccl_options else "nccl")
    if not sections:
        return None
    try:
        inventory = query_gpus(node)
    except ValueError:
        inventory = None
    session = Session(sections)
    node.memo[MEMO_KEY] = session  # the run's later steps (health.p2p on CUDA's answer) read what it measured
    if inventory is not None:
        session.busy, session.busy_unknown = busy_gpus(node, inventory)
    else:
        session.busy_unknown = "the GPU inventory could not be read"
    listed = len(inventory.gpus) if inventory is not None else 0
    if listed and len(session.busy) >= listed:  # nothing left to measure: no engine beside their jobs
        progress("GPU engine not started: every GPU is in use by another process")
        return session
    gpu_options = gpu.options_from(options.get("gpu")) if "gpu" in families else None
    copy = hostcopy.copy_options(profile, options.get("hostcopy") or {}) if "hostcopy" in families else {}
    schedule = pair_schedule(node, listed - len(session.busy)) if "pairs" in sections else ("serial", "")
    session.pair_schedule = {"mode": schedule[0], "why": schedule[1]}
    timeout = sum(t for t in ((gpu_options.timeout_s if gpu_options else 0), copy.get("timeout_s", 0),
                              (nccl_options.timeout_s if nccl_options and "allreduce" in sections else 0)))
    argv = engine_argv("verify.bench.gpu_engine",
                       engine_args(sections, gpu_options, copy, nccl_options, schedule, session.busy))
    env = dict(ENGINE_ENV)
    if "allreduce" in sections:
        env.update(NCCL_DEBUG_ENV)
        env.update(nccl_options.extra_env)
    said = ", ".join(sections)
    progress(f"GPU engine (one process for {said}): {len(session.busy)} GPU(s) in use by other processes left out"
             + (f"; pairs {schedule[0]}" if "pairs" in sections else "")
             + (f"; host copies {human_bytes(copy['size_bytes'])}" if copy else ""))
    session.timeout_s = max(60.0, timeout)
    session.extra_env = dict(nccl_options.extra_env) if "allreduce" in sections else {}
    began = time.perf_counter()
    out = node.run(argv, timeout_s=session.timeout_s, env=engine_env(env), cwd=ENGINE_CWD)
    session.wall_s = time.perf_counter() - began
    record(session, argv, out, session.timeout_s)
    progress(f"GPU engine: {session.wall_s:.1f} s" + (f", {session.failure.reason}" if session.failure else ""))
    return session


def failure(out, timeout: float, session: Session) -> Optional[CheckResult]:
    """The one row for an engine run that gave no result (hung, cannot run here, crashed), else None. An
    out-of-memory failure names the processes that hold the GPUs' memory."""
    raw = {"returncode": out.returncode, "stderr_tail": tail(out.stderr or ""), "stdout_tail": tail(out.stdout or "")}
    if out.timed_out:
        return result("bench.gpu", Status.ERROR, f"the GPU engine hung: killed after {timeout:.0f} s",
                      details={"partial_output": raw, verdicts.ACTION_KEY: verdicts.WATCH})
    if read_result(out.stdout or "") is not None:
        return None
    if out.returncode == CANNOT_RUN:
        return result("bench.gpu", Status.SKIP, f"the GPU engine cannot run here: {last_line(out.stderr or '')}",
                      details={"partial_output": raw})
    why = last_line(out.stderr or "")
    if "out of memory" in (out.stderr or "").lower():
        why = f"out of GPU memory ({why[:160]})" + (
            "; held by " + "; ".join(b.describe() for b in session.busy) if session.busy else
            "; no other process was listed on the GPUs before it started")
    return result("bench.gpu", Status.ERROR, f"the GPU engine exited {out.returncode} without a result: {why}",
                  details={"partial_output": raw, verdicts.ACTION_KEY: verdicts.WATCH})


def again(node, session: Session, section: str) -> Session:
    """One section of the run's engine run again alone (a family's retry), on the same GPUs, same options."""
    argv = list(session.raw.get("argv") or [])
    retry = Session([section], busy=session.busy, busy_unknown=session.busy_unknown,
                    pair_schedule=session.pair_schedule)
    if "--sections" not in argv:
        retry.failure = result("bench.gpu", Status.ERROR, "the GPU engine's first run left no command to repeat")
        return retry
    argv[argv.index("--sections") + 1] = section
    env = dict(ENGINE_ENV, **(NCCL_DEBUG_ENV if section == "allreduce" else {}), **session.extra_env)
    began = time.perf_counter()
    out = node.run(argv, timeout_s=session.timeout_s, env=engine_env(env), cwd=ENGINE_CWD)
    retry.wall_s = time.perf_counter() - began
    record(retry, argv, out, session.timeout_s)
    return retry


def record(session: Session, argv: list, out, timeout: float) -> None:
    """What one engine run gave, checked (the payload, each family's section against its own schema)."""
    session.stdout, session.stderr = out.stdout or "", out.stderr or ""
    session.raw = {"argv": argv, "returncode": out.returncode, "duration_s": round(session.wall_s, 2),
                   "stderr_tail": tail(session.stderr), "stdout_tail": tail(session.stdout)}
    session.failure = failure(out, timeout, session)
    if session.failure is not None:
        return
    session.payload, session.problems = checked_payload(read_result(out.stdout), gpu_engine.PAYLOAD_SCHEMA)
    for name, schema in (("hostcopy", torch_hostcopy.PAYLOAD_SCHEMA), ("allreduce", torch_allreduce.PAYLOAD_SCHEMA)):
        part = (session.payload or {}).get(name)
        if part is not None:
            kept, problems = checked_payload(part, schema)
            session.payload[name] = kept
            session.problems += [f"{name}.{p}" for p in problems]
