"""Benchmarks: NCCL all-reduce, RDMA perftest, storage reads (gdsio / cuFile / O_DIRECT), host-device copies.

`run_benchmarks` is what `tunefleet verify` calls; `verify.bench.cli` is `tunefleet bench`.
Each family lives in its own module and is imported only when it runs.
"""

from __future__ import annotations

import importlib
from typing import Optional

from verify.bench.common import result
from verify.result import CheckResult, Status

# Benchmark name -> module with run(spec, profile, node, overrides). Aliases accept the names
# people type (and the ones a desired state may list).
FAMILIES = {
    "nccl": "verify.bench.nccl",
    "rdma": "verify.bench.perftest",
    "storage": "verify.bench.storage",
    "hostcopy": "verify.bench.hostcopy",
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
}


def canonical(name: str) -> Optional[str]:
    key = name.strip().lower().replace("-", "_")
    return key if key in FAMILIES else ALIASES.get(key)


def run_benchmarks(
    spec: dict, profile: Optional[dict], node, names: Optional[list] = None, overrides: Optional[dict] = None
) -> list:
    """Run the named benchmarks (default: the desired state's verify.benchmarks) on `node`.

    `node` has `.root` and `.run` (a runner like verify.runner.run_command). Unknown names give
    one ERROR result each instead of stopping the others.
    """
    if names is None:
        names = list(((spec or {}).get("verify") or {}).get("benchmarks") or [])
    results: list = []
    seen = set()
    for name in names:
        family = canonical(str(name))
        if family is None:
            results.append(
                result(
                    f"bench.{name}", Status.ERROR, f"unknown benchmark {name!r}; known: {', '.join(sorted(FAMILIES))}"
                )
            )
            continue
        if family in seen:
            continue
        seen.add(family)
        module = importlib.import_module(FAMILIES[family])
        try:
            results.extend(module.run(spec, profile, node, (overrides or {}).get(family)))
        except Exception as exc:  # one broken benchmark must not hide the others' results
            results.append(
                CheckResult(
                    check_id=f"bench.{family}",
                    role="bench",
                    status=Status.ERROR,
                    reason=f"{family} benchmark crashed: {type(exc).__name__}: {exc}",
                )
            )
    return results
