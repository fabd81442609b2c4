"""`--bench burn` (opt-in, never in the quick or full set): sustained BF16 matmul on every GPU at once.

FAILs on: a clock event reason other than idle / application clocks / sync boost / SW power cap
during the run; a median SM clock under load below `clock_fraction` (0.6) of the GPU's max; a new
Xid or a new uncorrectable ECC error between the health readings taken before and after (the health
checks' own readers, through the Node); and results that differ between GPUs of one model given
identical inputs, or on one GPU over time (silent data corruption).

SW power cap policy: a sustained BF16 matmul holds every healthy 700 W GPU at its power limit, so
`sw_power_cap` is expected and never a FAIL by itself; it is shown next to the figure and judged
through the SM clock instead. On the 2x H200 machine (issue 19, 30 s burn) both GPUs sat at the cap
(702/704 W max, reasons: sw_power_cap) with SM clocks of 1290-1965 and 1215-1980 MHz (the lowest
sample 0.61 of the 1980 MHz max) at 656/652 TFLOPS. On the 1x H100 machine (30 s burn, 2026-11-23)
the healthy GPU held 700 W at a median SM clock of 1380 MHz, 0.697 of its 1980 MHz max, at 683
TFLOPS sustained: the fraction is 0.6, under what healthy Hopper GPUs run at their cap. A GPU whose
median SM clock falls below 0.6 x max (a cap set too low, a board drawing too much power for its
clock) FAILs.
HW slowdown, HW/SW thermal and HW power brake are FAIL whenever they show.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

from verify.bench import gpu_clocks
from verify.bench.common import module_available, progress, result
from verify.bench.gpu import ENGINE_ENV, engine_failure
from verify.engine import ENGINE_CWD, engine_argv, engine_env, read_result
from verify.judging import clock_reasons
from verify.payload_schema import NUMBER, ListOf, Maybe, checked_payload, schema_problems
from verify.result import CheckResult, Status

CHECK_ID = "bench.gpu_burn"
# Allowed under a burn: not throttling (BENIGN) and the power cap (judged by the clock fraction).
ALLOWED = clock_reasons.BENIGN + clock_reasons.AT_POWER_LIMIT
# Of the max SM clock, median under load: a healthy H100 at its 700 W cap ran 0.697 (module docstring).
DEFAULT_CLOCK_FRACTION = 0.60
REMEDIATION = "drain the GPU; check cooling, power feed and BMC power-brake events; RMA a GPU that repeats"

# The burn's part of the GPU engine's payload (verify.bench.gpu_engine.PAYLOAD_SCHEMA holds it as a dict),
# checked where it enters (verify.payload_schema.checked_payload) before a judge reads a field: a malformed GPU row
# is dropped and named in an ERROR row, the others are judged.
READING = {"min": NUMBER, "median": NUMBER, "max": NUMBER}
WINDOW = {"samples": int, "sm_mhz": Maybe(READING), "mem_mhz": Maybe(READING), "temp_c": Maybe(READING),
          "power_w": Maybe(READING), "reasons": Maybe(ListOf(str, may_be_empty=True))}
FACTS_SCHEMA = {"gpus": ListOf({"index": int, "name": Maybe(str), "capability": Maybe(ListOf(int, may_be_empty=True)),
                                "sm_count": Maybe(int), "nvml": Maybe({"max_sm_mhz": Maybe(NUMBER)})},
                               may_be_empty=True),
                "burn": dict}
BURN_SCHEMA = {"gpus": ListOf({"index": int, "tflops": Maybe(NUMBER), "wall_s": Maybe(NUMBER),
                               "digests": Maybe(ListOf(str, may_be_empty=True)), "nvml": Maybe(WINDOW)},
                              may_be_empty=True),
               "errors": Maybe(dict)}
# The health readings taken before and after (health_reading): a malformed one is "not read", never a crash.
HEALTH_SCHEMA = {"ecc": Maybe(dict), "xids": Maybe(dict), "ecc_reason": Maybe(str), "xid_reason": Maybe(str)}
MAX_FIGURE = 1e12  # far above any clock, TFLOPS, watt or count a GPU reports: beyond it a figure is damage


@dataclass
class BurnOptions:
    duration_s: float = 60.0
    matmul_n: int = 8192
    clock_fraction: float = DEFAULT_CLOCK_FRACTION
    check_s: float = 10.0
    sample_ms: float = 100.0
    timeout_s: float = 0.0  # 0: duration + 180 s


def options_from(overrides: Optional[dict]) -> BurnOptions:
    chosen = BurnOptions()
    for key, value in (overrides or {}).items():
        if hasattr(chosen, key) and value is not None:
            setattr(chosen, key, value)
    return chosen


def health_reading(node) -> dict:
    """Xids per bus and uncorrectable ECC per GPU now, read fresh by the health checks' readers."""
    from verify.facts import health_smi, kernel_log
    from verify.facts.pci import short_bdf

    node.memo.pop("health_smi", None)  # memoised per run: a second reading must ask again
    gpus, why = health_smi.query(node)
    node.memo.pop("health_smi", None)
    log, source = kernel_log.read_kernel_log(node, fresh=True)
    ecc = {}
    for gpu in gpus:
        try:
            ecc[short_bdf(gpu.bus_id)] = {"index": gpu.index,
                                          "uncorrected": gpu.number("ecc.errors.uncorrected.volatile.total")}
        except (ValueError, health_smi.HealthParseError):
            ecc[gpu.bus_id] = {"index": gpu.index, "uncorrected": None}
    xids = {bus: {code: count for code, (count, _) in found.items()}
            for bus, found in (kernel_log.parse_xids(log).items() if log is not None else [])}
    return {"ecc": ecc, "ecc_reason": why, "xids": xids, "xid_source": source if log is not None else None,
            "xid_reason": None if log is not None else source}


def _unbounded(value: Any, where: str) -> list:
    """Every number in value that is not finite or beyond MAX_FIGURE, by field (a NaN clock must not PASS)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [] if -MAX_FIGURE <= value <= MAX_FIGURE else [f"{where}: {str(value)[:20]}... is out of range"]
    if isinstance(value, float):
        return [] if math.isfinite(value) and abs(value) <= MAX_FIGURE else [f"{where}: {value!r} is out of range"]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [p for key, inner in items for p in _unbounded(inner, f"{where}.{key}" if where else str(key))]


def _health(reading: Any, label: str) -> tuple:
    """(reading fit to compare, why not): a reading whose shape or numbers are wrong counts as not read."""
    problems = schema_problems(reading, HEALTH_SCHEMA, label)
    if not problems:
        problems = _unbounded(reading, label)
        for bus, ecc in (reading.get("ecc") or {}).items():
            problems += schema_problems(ecc, {"index": int, "uncorrected": Maybe(NUMBER)}, f"{label}.ecc.{bus}")
        for bus, codes in (reading.get("xids") or {}).items():
            if not isinstance(codes, dict) or not all(isinstance(n, int) and not isinstance(n, bool)
                                                      for n in codes.values()):
                problems.append(f"{label}.xids.{bus}: expected counts per Xid code")
    if problems:
        return {}, f"the {label} reading is malformed ({'; '.join(problems[:3])})"
    return reading, ""


def judge_errors(before: Any, after: Any) -> CheckResult:
    """New Xids or uncorrectable ECC errors during the burn -> FAIL naming the GPU."""
    found = []
    was_read, before_problem = _health(before, "before")
    now_read, after_problem = _health(after, "after")
    names = {bus: f"GPU {v['index']} ({bus})" for bus, v in (now_read.get("ecc") or {}).items()}
    for bus, codes in (now_read.get("xids") or {}).items():
        for code, count in codes.items():
            new = count - ((was_read.get("xids") or {}).get(bus) or {}).get(code, 0)
            if new > 0:
                found.append(f"{names.get(bus, bus)}: Xid {code} x{new}")
    for bus, now in (now_read.get("ecc") or {}).items():
        was = ((was_read.get("ecc") or {}).get(bus) or {}).get("uncorrected")
        if now.get("uncorrected") is not None and was is not None and now["uncorrected"] > was:
            found.append(f"{names[bus]}: {now['uncorrected'] - was:.0f} new uncorrectable ECC error(s)")
    details = {"before": before, "after": after}
    unread = [r for r in (now_read.get("xid_reason"), now_read.get("ecc_reason"), before_problem, after_problem) if r]
    if found:
        return result(f"{CHECK_ID}.errors", Status.FAIL, "during the burn: " + "; ".join(found), "none new",
                      "; ".join(found), REMEDIATION, details)
    if unread:
        return result(f"{CHECK_ID}.errors", Status.WARN, "no new Xid or ECC error seen, but not every reading "
                      f"was possible: {'; '.join(unread)}", "none new", "unknown", "", details)
    return result(f"{CHECK_ID}.errors", Status.PASS, "no new Xid, no new uncorrectable ECC error during the burn",
                  "none new", "none", "", details)


def judge_gpu(row: dict, facts: dict, fraction: float) -> CheckResult:
    index = row["index"]
    window = row.get("nvml") or {}
    max_sm = (facts.get("nvml") or {}).get("max_sm_mhz")
    text = gpu_clocks.describe(window)
    tflops = row.get("tflops")
    head = f"GPU {index}: {tflops:.0f} TFLOPS sustained over {row.get('wall_s') or 0:.0f} s; {text}" \
        if isinstance(tflops, (int, float)) else f"GPU {index}: no throughput; {text}"
    details = {"nvml": window, "max_sm_mhz": max_sm, "clock_fraction": fraction,
               "raw": {k: v for k, v in row.items() if k != "nvml"}}
    problems = []
    bad = [r for r in window.get("reasons") or [] if r not in ALLOWED]
    if bad:
        problems.append(f"GPU {index}: {', '.join(bad)} under load")
    sm = (window.get("sm_mhz") or {}).get("median")
    if sm is not None and max_sm and sm < fraction * max_sm:
        problems.append(f"GPU {index}: SM clock {sm:.0f} MHz under load, below {fraction:g} x max {max_sm:.0f} MHz")
    if problems:
        return result(f"{CHECK_ID}.gpu{index}", Status.FAIL, "; ".join(problems) + f" [{head}]",
                      f">= {fraction:g} x max SM clock, no throttling", text, REMEDIATION, details)
    if not window.get("samples"):
        return result(f"{CHECK_ID}.gpu{index}", Status.WARN, f"{head}: no NVML samples, clocks not judged",
                      None, None, "install nvidia-ml-py (pynvml) where verify runs", details)
    return result(f"{CHECK_ID}.gpu{index}", Status.PASS, head, f">= {fraction:g} x max SM clock, no throttling",
                  text, "", details)


def judge_sdc(rows: list, facts: dict) -> CheckResult:
    """Same inputs, same model -> the same bits on every GPU and at every checkpoint."""
    groups: dict = {}
    for row in rows:
        gpu = facts.get(row["index"], {})
        groups.setdefault((gpu.get("name"), tuple(gpu.get("capability") or ()), gpu.get("sm_count")), []).append(row)
    problems, compared = [], 0
    for (name, _, _), members in groups.items():
        for row in members:
            if len(set(row.get("digests") or [])) > 1:
                problems.append(f"GPU {row['index']}: the same matmul gave {len(set(row['digests']))} different "
                                "results over the run")
        firsts = {row["index"]: (row.get("digests") or [None])[0] for row in members}
        counted = Counter(d for d in firsts.values() if d)
        compared += len(firsts)
        if len(counted) > 1:
            majority, votes = counted.most_common(1)[0]
            odd = [i for i, d in firsts.items() if d != majority]
            tie = " (no majority)" if votes * 2 <= len(firsts) else ""
            problems.append(f"{name}: GPU {', GPU '.join(map(str, odd))} differ{'s' if len(odd) == 1 else ''} from "
                            f"the other GPUs' result for identical inputs{tie}")
        problems += [f"GPU {i}: no result digest" for i, d in firsts.items() if not d]
    details = {"digests": {str(r["index"]): r.get("digests") for r in rows}}
    if problems:
        return result(f"{CHECK_ID}.sdc", Status.FAIL, "silent data corruption: " + "; ".join(problems),
                      "identical results", "differ", REMEDIATION, details)
    return result(f"{CHECK_ID}.sdc", Status.PASS, f"identical matmul results on {compared} GPU(s) at every checkpoint",
                  "identical results", "identical", "", details)


def judge_payload(payload: Any, before: Any, after: Any, fraction: float) -> list:
    """The engine's burn payload -> one row per GPU, the SDC row and the errors row. Total: a payload that is
    not what the engine writes is an ERROR row naming the fields (a malformed GPU row is dropped, the others
    judged); a clock_fraction that is not a share in (0, 1] is a ValueError naming it (a bad option)."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"clock_fraction {fraction!r}: give the share of the max SM clock, in (0, 1]")
    top, problems = checked_payload(payload, FACTS_SCHEMA)
    burn, more = checked_payload(top["burn"], BURN_SCHEMA) if top is not None else (None, [])
    problems += [f"burn.{p}" for p in more]
    if top is None or burn is None:
        return [result(f"{CHECK_ID}.payload", Status.ERROR, "the GPU engine's burn result is malformed: "
                       + "; ".join(problems[:5]), remediation="report this as a bug with the engine's output"),
                judge_errors(before, after)]
    kept = []
    for index, row in enumerate(burn["gpus"]):
        wrong = _unbounded(row, f"burn.gpus[{index}]")
        problems += wrong
        if not wrong:
            kept.append(row)
    gpu_facts = [g for i, g in enumerate(top["gpus"]) if not _unbounded(g, f"gpus[{i}]")]
    facts = {g["index"]: g for g in gpu_facts}
    rows = [judge_gpu(row, facts.get(row["index"], {}), fraction) for row in kept]
    rows += [result(f"{CHECK_ID}.gpu{str(i)[:20]}", Status.ERROR, f"GPU {str(i)[:20]}: the burn failed: {str(e)[:300]}")
             for i, e in (burn.get("errors") or {}).items()]
    rows.append(judge_sdc(kept, facts))
    rows.append(judge_errors(before, after))
    if problems:
        rows.append(result(f"{CHECK_ID}.payload", Status.ERROR, "the GPU engine's burn result is malformed, "
                           "those parts not judged: " + "; ".join(problems[:5]),
                           remediation="report this as a bug with the engine's output"))
    return rows


def run(spec: Optional[dict], profile: Optional[dict], node, overrides: Optional[dict] = None) -> list:
    options = options_from(overrides)
    if not module_available("torch"):
        return [result(CHECK_ID, Status.SKIP, "PyTorch is not installed (the burn needs it)",
                       remediation="pip install tunefleet[torch]")]
    timeout = options.timeout_s or options.duration_s + 180
    argv = engine_argv("verify.bench.gpu_engine", [
        "--mode", "burn", "--burn-seconds", options.duration_s, "--matmul-n", options.matmul_n,
        "--burn-check-s", options.check_s, "--sample-ms", options.sample_ms])
    before = health_reading(node)
    progress(f"GPU burn: BF16 matmul {options.matmul_n}^3 on every GPU for {options.duration_s:g} s")
    start = time.perf_counter()
    out = node.run(argv, timeout_s=timeout, env=engine_env(ENGINE_ENV), cwd=ENGINE_CWD)
    wall = time.perf_counter() - start
    after = health_reading(node)
    failed = engine_failure(CHECK_ID, "GPU burn", out, timeout)
    if failed:
        return failed + [judge_errors(before, after)]
    rows = judge_payload(read_result(out.stdout), before, after, options.clock_fraction)
    progress(f"GPU burn done in {wall:.1f} s")
    return rows
