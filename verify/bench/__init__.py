"""Benchmarks: NCCL all-reduce, RDMA perftest, storage reads (gdsio / cuFile / O_DIRECT), host-device copies.

`run_benchmarks` is what `tunefleet verify` calls; `verify.bench.cli` is `tunefleet bench`.
Each family lives in its own module and is imported only when it runs.

What runs: the names asked for, or a set chosen from the node's hardware. "quick" (the default
of `tunefleet verify`) is that set with short sweeps, "full" the same set with the profile's
long sweeps; a family the hardware cannot run is one SKIP row saying why.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field, fields
from typing import Optional

from verify import interrupt
from verify.bench.common import result
from verify.result import CheckResult, Status

# Benchmark name -> module with run(spec, profile, node, overrides). Aliases accept the names
# people type (and the ones a desired state may list).
FAMILIES = {
    "nccl": "verify.bench.nccl",
    "rdma": "verify.bench.perftest",
    "storage": "verify.bench.storage",
    "hostcopy": "verify.bench.hostcopy",
    "dcgm": "verify.bench.dcgm",  # only when named: never in the quick/full set (hardware_set)
    "gpu": "verify.bench.gpu",  # per-GPU HBM + BF16 matmul, per-pair copies (quick set)
    "burn": "verify.bench.gpu_burn",  # only when named: sustained matmul on every GPU (minutes)
}
ALIASES = {
    "nccl_allreduce": "nccl",
    "allreduce": "nccl",
    "all_reduce": "nccl",
    "perftest": "rdma",
    "ib": "rdma",
    "ib_write_bw": "rdma",
    "gds": "storage",
    "gdsio": "storage",
    "cufile": "storage",
    "odirect": "storage",
    "h2d": "hostcopy",
    "d2h": "hostcopy",
    "pcie": "hostcopy",
    "hbm": "gpu",
    "matmul": "gpu",
    "gemm": "gpu",
    "p2p": "gpu",
    "gpu_copy": "gpu",
    "gpu_burn": "burn",
}


# The families that get the run's engine session (verify.bench.engine_session): the GPU measurements it
# made, and the GPUs other processes hold (storage's cuFile read keeps off those).
SHARED_ENGINE_FAMILIES = ("gpu", "hostcopy", "nccl", "storage")
SETS = ("quick", "full")


def names_text() -> str:
    """The one list of benchmark names that `--help`, the README and the errors give."""
    return f"{' or '.join(SETS)}, or a comma list of {', '.join(FAMILIES)}"


ORDER = ("gpu", "nccl", "hostcopy", "storage", "rdma", "burn")
CHECK_IDS = {"nccl": "bench.nccl_allreduce", "hostcopy": "bench.hostcopy", "storage": "bench.storage",
             "rdma": "bench.rdma", "gpu": "bench.gpu", "burn": "bench.gpu_burn"}
# The quick set's options: under a minute on 2x H200 (all-reduce to 1 GiB, 256 MiB copies per GPU, a 1 GiB
# storage read, 2 s per perftest run). "full" keeps the profile's sizes (4 GiB sweeps).
QUICK = {
    "nccl": {"max_bytes": 1 << 30},
    "hostcopy": {"size_bytes": 256 << 20},
    "storage": {"size_bytes": 1 << 30},
    "rdma": {"duration_s": 2},
    "gpu": {"seconds": 1.0, "pair_seconds": 0.25},  # every GPU at once; pairs in turn (56 on 8 GPUs: ~15 s)
}
HOSTCOPY_OPTIONS = {"size_bytes": "int", "iters": "int", "tries": "int", "timeout_s": "float"}


@dataclass
class Plan:
    """What a run will do: families in order, the selection they came from, and SKIPs with reasons."""

    selection: str  # "quick", "full" or "named"
    families: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (family, reason)
    unknown: list = field(default_factory=list)


def hardware_set(node, options: dict) -> tuple:
    """(families the hardware can run, [(family, why not)]) for the quick and full sets."""
    from verify.bench.nccl import count_gpus
    from verify.facts.hardware import detect

    found = detect(node)
    gpus = len(found.gpus) or count_gpus(node.root)
    run, skipped = [], []
    if (options.get("nccl") or {}).get("backend") == "gloo" or gpus >= 2:
        run.append("nccl")
    else:
        skipped.append(("nccl", f"needs 2 ranks, this node has {gpus} GPU" + ("" if gpus == 1 else "s")))
    if gpus:
        run.append("gpu")
    else:
        skipped.append(("gpu", "no GPU on this node" + (f": {found.gpu_reason}" if found.gpu_reason else "")))
    if gpus:
        run.append("hostcopy")
    else:
        skipped.append(("hostcopy", "no GPU on this node" + (f": {found.gpu_reason}" if found.gpu_reason else "")))
    run.append("storage")
    if not found.active_hcas:
        skipped.append(("rdma", "no active RDMA port under /sys/class/infiniband"))
    elif not found.perftest:
        skipped.append(("rdma", f"perftest (ib_write_bw) is not installed: {len(found.active_hcas)} active HCA "
                                "port(s) not measured"))
    else:
        run.append("rdma")
    return run, skipped


def plan(names: list, node, options: Optional[dict] = None) -> Plan:
    """Turn asked names ("quick", "full", family names, aliases) into the families to run."""
    asked = [str(n).strip().lower() for n in names if str(n).strip()]
    chosen = next((s for s in SETS if s in asked), None)
    found = Plan(chosen or "named")
    wanted: list = []
    if chosen:
        wanted, found.skipped = hardware_set(node, options or {})
    for name in asked:
        if name in SETS:
            continue
        family = canonical(name)
        if family is None:
            found.unknown.append(name)
        elif family not in wanted:
            wanted.append(family)
            found.skipped = [s for s in found.skipped if s[0] != family]  # asked by name: it runs
    found.families = sorted(wanted, key=lambda f: ORDER.index(f) if f in ORDER else len(ORDER))
    return found


def option_types(family: str) -> dict:
    """Option name -> type name for one family (the fields of its options dataclass)."""
    if family == "hostcopy":
        return dict(HOSTCOPY_OPTIONS)
    module = importlib.import_module(FAMILIES[family])
    options_class = {"nccl": "NcclOptions", "storage": "StorageOptions", "rdma": "PerftestOptions",
                     "dcgm": "DcgmOptions", "gpu": "GpuOptions", "burn": "BurnOptions"}[family]
    return {f.name: str(f.type) for f in fields(getattr(module, options_class))}


def _option(key: str, kind: str, value):
    """One option value checked against its type (sizes accept "1G"); ValueError says what is wrong."""
    from verify.bench.common import parse_size

    if key.endswith("_bytes"):
        return parse_size(value)
    if kind.startswith(("tuple", "list")) or "list" in kind:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError("must be a list of names")
        return tuple(value) if kind.startswith("tuple") else list(value)
    if "bool" in kind:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
    elif "float" in kind:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
            raise ValueError("must be a number >= 0")
        return float(value)
    elif "int" in kind:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError("must be a whole number >= 0")
    elif "str" in kind and not isinstance(value, str):
        raise ValueError("must be text")
    elif "dict" in kind and not isinstance(value, dict):
        raise ValueError("must be a mapping")
    return value


def check_options(options, origin: str = "verify_bench_options") -> dict:
    """verify_bench_options ({benchmark: {option: value}}) checked and normalised, or ValueError naming it."""
    if options in (None, ""):
        return {}
    if not isinstance(options, dict):
        raise ValueError(f"{origin} must be a mapping of benchmark -> options, got {options!r:.60}")
    checked: dict = {}
    for name, values in options.items():
        family = canonical(str(name))
        if family is None:
            raise ValueError(f"{origin}: unknown benchmark {name!r}; known: {', '.join(sorted(FAMILIES))}")
        if not isinstance(values, dict):
            raise ValueError(f"{origin}.{name} must be a mapping of options, got {values!r:.60}")
        known = option_types(family)
        for key, value in values.items():
            if key not in known:
                raise ValueError(f"{origin}.{name}.{key}: not an option of {family}; known: {', '.join(sorted(known))}")
            try:
                checked.setdefault(family, {})[key] = _option(key, known[key], value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{origin}.{name}.{key}: {value!r:.60} {exc}") from None
    return checked


def family_options(selection: str, family: str, spec: Optional[dict], overrides: Optional[dict],
                   profile: Optional[dict] = None) -> dict:
    """Quick-set sizes < the desired state's verify_bench_options < the caller's (tunefleet bench) options."""
    merged = dict(QUICK.get(family, {})) if selection == "quick" else {}
    if family == "nccl" and floor_measured_at_size(profile):
        merged.pop("max_bytes", None)
    merged.update(check_options(((spec or {}).get("verify") or {}).get("bench_options")).get(family, {}))
    merged.update((overrides or {}).get(family) or {})
    return merged


def floor_measured_at_size(profile: Optional[dict]) -> bool:
    """The profile's all-reduce busbw floor is a figure at the profile's own largest size (h200-x2-nvlink: 342
    GB/s at 4 GiB; the 8-GPU profiles: Azure's health-check floors beside results at 8 GiB): the quick set then
    sweeps to that size too. Judged at 1 GiB against it, healthy 2x H200 gave 323.8 GB/s, under the warn band
    325, then a 4.4 s retry (2026-11-28). A floor derived from the NVLink count holds at any size: 1 GiB."""
    profile = profile or {}
    return bool((profile.get("thresholds") or {}).get("nccl_allreduce_busbw_gbps")
                and (profile.get("bench") or {}).get("nccl_max_bytes"))


def canonical(name: str) -> Optional[str]:
    key = name.strip().lower().replace("-", "_")
    return key if key in FAMILIES else ALIASES.get(key)


def run_benchmarks(
    spec: dict,
    profile: Optional[dict],
    node,
    names: Optional[list] = None,
    overrides: Optional[dict] = None,
    record: Optional[dict] = None,
) -> list:
    """Run the asked benchmarks (default: the desired state's verify.benchmarks) on `node`, a verify.node.Node.

    Unknown names give one ERROR result each instead of stopping the others; a family the
    hardware cannot run (quick/full sets) one SKIP. `record` receives the selection, what runs
    and what was skipped with the reason, for the report.
    """
    if names is None:
        names = list(((spec or {}).get("verify") or {}).get("benchmarks") or [])
    results: list = []
    try:
        chosen = plan(names, node, check_options(((spec or {}).get("verify") or {}).get("bench_options")))
    except ValueError as exc:
        return [result("bench", Status.ERROR, f"benchmark options: {exc}")]
    results.extend(result(f"bench.{name}", Status.ERROR,
                          f"unknown benchmark {name!r}; known: {', '.join(sorted(FAMILIES))}, {', '.join(SETS)}")
                   for name in chosen.unknown)
    results.extend(result(CHECK_IDS[family], Status.SKIP, why) for family, why in chosen.skipped)
    if record is not None:
        record.update(selection=chosen.selection, ran=list(chosen.families),
                      skipped=[{"benchmark": f, "reason": why} for f, why in chosen.skipped])
    overrides = {f: family_options(chosen.selection, f, spec, overrides, profile) for f in chosen.families}
    names = list(chosen.families)  # the loop below runs (and an interrupt names) the planned families
    session = None
    try:  # one engine process for every GPU measurement of the run (verify.bench.engine_session)
        from verify.bench import engine_session

        began = time.perf_counter()
        session = engine_session.start(node, names, overrides, profile)
        if record is not None and session is not None:
            record["engine"] = {"sections": session.sections, "wall_s": round(time.perf_counter() - began, 3),
                                "phases": session.phases(), "busy": [b.describe() for b in session.busy],
                                "busy_unknown": session.busy_unknown, "pair_schedule": session.pair_schedule}
    except KeyboardInterrupt as exc:
        return results + interrupted_rows("gpu", exc, names, set())
    except Exception as exc:  # the families then run their own engines, and the report says why
        results.append(result("bench.engine", Status.ERROR, f"the shared GPU engine crashed: {type(exc).__name__}: "
                              f"{exc}; each benchmark ran its own engine"))
    seen = set()
    for name in names:
        family = canonical(str(name))
        if family in seen:
            continue
        seen.add(family)
        module = importlib.import_module(FAMILIES[family])
        began = time.perf_counter()
        try:
            if family in SHARED_ENGINE_FAMILIES:
                results.extend(module.run(spec, profile, node, (overrides or {}).get(family), session=session))
            else:
                results.extend(module.run(spec, profile, node, (overrides or {}).get(family)))
        except KeyboardInterrupt as exc:  # Ctrl-C/SIGTERM (verify.interrupt): keep what finished, then stop
            results.extend(interrupted_rows(family, exc, names[names.index(name) + 1 :], seen))
            return results
        except Exception as exc:  # one broken benchmark must not hide the others' results
            results.append(
                CheckResult(
                    check_id=f"bench.{family}",
                    role="bench",
                    status=Status.ERROR,
                    reason=f"{family} benchmark crashed: {type(exc).__name__}: {exc}",
                )
            )
        finally:
            if record is not None:
                record.setdefault("family_s", {})[family] = round(time.perf_counter() - began, 3)
    return torch_rows_unchecked(results, ((spec or {}).get("verify") or {}).get("python"))


# What the GPU families say when the verify process cannot import torch (gpu, hostcopy, gpu_burn; nccl when
# nccl-tests is missing too).
TORCH_MISSING = ("PyTorch is not installed", "nor PyTorch installed")


def torch_rows_unchecked(results: list, search: Optional[dict]) -> list:
    """On a node with GPUs where no interpreter imports torch (the fleet's interpreter search,
    verify.fleet.node_python, in the desired state's verify.python), a GPU row SKIPped for want of torch
    could not be checked: ERROR naming every interpreter tried, never "not applicable"."""
    if not isinstance(search, dict) or search.get("used") or not search.get("gpus"):
        return results
    tried = "; ".join(f"{t.get('python')} ({t.get('outcome')}: {t.get('detail')})" for t in search.get("tried") or [])
    return [CheckResult(r.check_id, r.role, Status.ERROR, r.expected, r.observed,
                        f"could not be checked: this node has {search['gpus']} GPU(s) but no interpreter imports "
                        f"torch; tried {tried or 'none'}",
                        "install PyTorch for root's python3, or set verify_node_python to an interpreter that "
                        "imports it (a root-owned venv's bin/python3)",
                        dict(r.details, python_tried=search.get("tried") or []))
            if r.status == Status.SKIP and any(said in r.reason for said in TORCH_MISSING) else r for r in results]


def interrupted_rows(family: str, exc: BaseException, rest: list, seen: set) -> list:
    """Result rows for an interrupted benchmark run: `family` ERROR, each of the names in `rest`
    not run yet SKIP "not run: interrupted" (one row per benchmark, as they would have run)."""
    ids = CHECK_IDS  # each family's own row id, so the rows line up across runs

    not_run = []
    for name in rest:
        other = canonical(str(name)) or str(name)
        if other not in seen and other != family and other not in not_run:
            not_run.append(other)

    why = f"interrupted ({interrupt.signal_name(interrupt.signum_of(exc))})"
    rows = [CheckResult(check_id=ids.get(family, f"bench.{family}"), role="bench", status=Status.ERROR,
                        reason=f"{why} while the {family} benchmark ran: its partial result is discarded, "
                               "its processes killed and its scratch files removed")]
    for name in not_run:
        rows.append(CheckResult(check_id=ids.get(name, f"bench.{name}"), role="bench", status=Status.SKIP,
                                reason=f"not run: {why}"))
    return rows
