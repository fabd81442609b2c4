"""Driver / CUDA / NCCL alignment, read from files only (never by importing torch).

- the framework's NCCL (the nvidia-nccl-cu* wheel that torch loads) vs the system libnccl
  (what nccl-tests and MPI builds link): a mismatch means benchmarks measure another library;
- the CUDA runtime installed (toolkit version.json or the nvidia-cuda-runtime wheel) vs the
  newest CUDA the driver supports.
The same driver across the fleet is the fleet report's job.
"""
from __future__ import annotations

from typing import Optional

from verify.checks.common import result, role_disabled, skip
from verify.facts.gpu_query import query_gpus
from verify.facts.versions import WHEEL_NCCL, cuda_runtime, live_site_dirs, site_dirs, system_nccl, wheel_version
from verify.node import Node
from verify.result import Status

ROLE = "gpu"
def major_minor(version: str) -> tuple:
    return tuple(int(p) for p in version.split(".")[:2])


def judge_nccl(framework: Optional[tuple], system: Optional[tuple]):
    check_id = "gpu.nccl_version_alignment"
    if not framework and not system:
        return skip(check_id, ROLE, "no NCCL found (no nvidia-nccl wheel, no nccl.h, no libnccl.so.X.Y.Z)")
    if not framework or not system:
        only = f"framework NCCL {framework[0]} ({framework[1]})" if framework else \
            f"system NCCL {system[0]} ({system[1]})"
        return skip(check_id, ROLE, f"only the {only} is installed: nothing to align")
    details = {"framework": framework[1], "system": system[1]}
    expected = f"system NCCL = framework NCCL {framework[0]}"
    if framework[0] == system[0]:
        return result(check_id, ROLE, Status.PASS, expected, system[0], details=details)
    status = Status.FAIL if framework[0].split(".")[0] != system[0].split(".")[0] else Status.WARN
    return result(check_id, ROLE, status, expected, system[0],
                  f"framework NCCL {framework[0]} differs from system libnccl {system[0]}: benchmarks built "
                  "against the system library measure another NCCL than training uses",
                  details=details,
                  fix="no role variable fixes this: install matching nvidia-nccl-cu* and libnccl packages")


def judge_cuda(runtime: Optional[tuple], driver_cuda: Optional[str], driver_version: Optional[str]):
    check_id = "gpu.cuda_driver_alignment"
    if not runtime:
        return skip(check_id, ROLE, "no CUDA runtime found (/usr/local/cuda/version.json, nvidia-cuda-runtime wheel)")
    if not driver_cuda:
        return skip(check_id, ROLE, "the driver's supported CUDA version is unknown (needs NVML/pynvml)")
    details = {"runtime_from": runtime[1], "driver": driver_version}
    expected = f"CUDA runtime <= {driver_cuda} (driver {driver_version})"
    if major_minor(runtime[0]) <= major_minor(driver_cuda):
        return result(check_id, ROLE, Status.PASS, expected, runtime[0], details=details)
    same_major = major_minor(runtime[0])[0] == major_minor(driver_cuda)[0]
    status = Status.WARN if same_major else Status.FAIL
    why = ("runs only through CUDA minor-version compatibility (no PTX JIT of newer code)" if same_major
           else "needs a newer driver")
    return result(check_id, ROLE, status, expected, runtime[0],
                  f"CUDA runtime {runtime[0]} is newer than the driver's CUDA {driver_cuda}: {why}",
                  details=details, fix="no role variable fixes this: install a newer NVIDIA driver")


def run(spec: dict, node: Node) -> list:
    disabled = role_disabled(spec, ROLE, "gpu.versions")
    if disabled:
        return [disabled]
    if not node.exists("/proc/driver/nvidia/version"):
        reason = "no NVIDIA driver loaded (/proc/driver/nvidia/version absent)"
        return [skip("gpu.nccl_version_alignment", ROLE, reason), skip("gpu.cuda_driver_alignment", ROLE, reason)]
    # a replayed snapshot brings the recorded interpreter's site dirs in node.memo
    extra = node.memo.get("site_dirs") or (live_site_dirs() if node.is_live else ())
    dirs = site_dirs(node, tuple(extra))
    framework = wheel_version(node, dirs, WHEEL_NCCL)
    inventory = query_gpus(node)
    return [
        judge_nccl(framework, system_nccl(node)),
        judge_cuda(cuda_runtime(node, dirs), inventory.cuda_driver_version, inventory.driver_version),
    ]
