"""Driver / CUDA / NCCL alignment, read from files only (never by importing torch).

- the framework's NCCL (the nvidia-nccl-cu* wheel that torch loads) vs the system libnccl
  (what nccl-tests and MPI builds link): a mismatch means benchmarks measure another library;
- the CUDA runtime installed (toolkit version.json or the nvidia-cuda-runtime wheel) vs the
  newest CUDA the driver supports.
The same driver across the fleet is the fleet report's job.
"""
from __future__ import annotations

import re
from typing import Optional

from verify.checks.common import result, role_disabled, skip
from verify.checks.gpu_query import query_gpus
from verify.node import Node
from verify.result import Status

ROLE = "gpu"
NCCL_HEADER_DIRS = ("/usr/include", "/usr/local/include", "/usr/local/cuda/include", "/opt/nccl/include")
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
            "/usr/local/lib", "/usr/local/cuda/lib64", "/opt/nccl/lib")
SITE_GLOBS = ("/usr/lib/python3*/site-packages", "/usr/lib/python3*/dist-packages",
              "/usr/local/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
              "/usr/lib64/python3*/site-packages", "/opt/*/lib/python3*/site-packages",
              "/opt/*/*/lib/python3*/site-packages")
_DEFINE = re.compile(r"#define\s+NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)")
_LIB = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")
WHEEL_NCCL = re.compile(r"nvidia_nccl_cu\d+-(\d+\.\d+\.\d+)[^/]*\.dist-info$")
WHEEL_CUDART = re.compile(r"nvidia_cuda_runtime(?:_cu\d+)?-(\d+\.\d+)[^/]*\.dist-info$")


def parse_nccl_header(text: str) -> Optional[str]:
    parts = dict(_DEFINE.findall(text))
    if not {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return None
    return f"{int(parts['MAJOR'])}.{int(parts['MINOR'])}.{int(parts['PATCH'])}"


def system_nccl(node: Node) -> Optional[tuple]:
    """(version, where) of the system NCCL: nccl.h first, else libnccl.so.X.Y.Z file names."""
    for directory in NCCL_HEADER_DIRS:
        text = node.read(f"{directory}/nccl.h")
        version = parse_nccl_header(text) if text else None
        if version:
            return version, f"{directory}/nccl.h"
    for directory in LIB_DIRS:
        for name in node.listdir(directory):
            match = _LIB.match(name)
            if match:
                return match.group(1), f"{directory}/{name}"
    return None


def site_dirs(node: Node, extra: tuple = ()) -> list:
    found = list(extra)
    for pattern in SITE_GLOBS:
        found.extend(node.glob(pattern))
    return found


def live_site_dirs() -> tuple:
    """This interpreter's own site dirs (a venv on the node), without importing any package."""
    import sys

    return tuple(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))


def wheel_version(node: Node, dirs: list, pattern: re.Pattern) -> Optional[tuple]:
    for directory in dirs:
        for name in node.listdir(directory):
            match = pattern.match(name)
            if match:
                return match.group(1), f"{directory}/{name}"
    return None


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


def cuda_runtime(node: Node, dirs: list) -> Optional[tuple]:
    text = node.read("/usr/local/cuda/version.json")
    if text:
        try:
            from verify.bounded_load import loads_json_bounded

            version = loads_json_bounded(text, "/usr/local/cuda/version.json", max_depth=8)["cuda"]["version"]
            return ".".join(version.split(".")[:2]), "/usr/local/cuda/version.json"
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # unreadable: the wheel's version (or none) is reported instead
    return wheel_version(node, dirs, WHEEL_CUDART)


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
