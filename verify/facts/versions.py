"""Which NCCL and CUDA runtime a node has, read from files only (never by importing torch): the system
libnccl (nccl.h, libnccl.so.X.Y.Z), the framework's wheels in site dirs, the CUDA toolkit's version.json.
"""
from __future__ import annotations

import re
import sys
from typing import Optional

from verify.bounded_load import loads_json_bounded
from verify.node import Node

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
    return tuple(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))


def wheel_version(node: Node, dirs: list, pattern: re.Pattern) -> Optional[tuple]:
    for directory in dirs:
        for name in node.listdir(directory):
            match = pattern.match(name)
            if match:
                return match.group(1), f"{directory}/{name}"
    return None


def cuda_runtime(node: Node, dirs: list) -> Optional[tuple]:
    text = node.read("/usr/local/cuda/version.json")
    if text:
        try:
            version = loads_json_bounded(text, "/usr/local/cuda/version.json", max_depth=8)["cuda"]["version"]
            return ".".join(version.split(".")[:2]), "/usr/local/cuda/version.json"
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # unreadable: the wheel's version (or none) is reported instead
    return wheel_version(node, dirs, WHEEL_CUDART)
