"""preflight's table of sysctl ranges against the running kernel: for every key of the table that
a network namespace may set, each boundary value and its neighbour outside are written in a fresh
namespace (nothing on the host changes), and preflight must refuse exactly what the kernel refuses.
The host-wide keys of the table (vm.*, net.core.rmem_max, ...) were measured once by hand on the
CI VM: only refused values were written there, see preflight_checks.SYSCTL_RANGES."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import preflight_checks as pf  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                       reason="needs root and unshare (writes happen in a throwaway network namespace)"),
]

# Runs inside the throwaway namespace: writes each value straight to /proc/sys (procps sysctl
# exits 0 on some refusals) and prints one line per value: 1 taken, 0 refused, - the key cannot
# be set in a child namespace at all (a host-only key refuses even its own value there).
IN_NAMESPACE = """
import json, sys
for key, value in json.loads(sys.argv[1]):
    path = "/proc/sys/" + key.replace(".", "/")
    try:
        with open(path) as handle:
            current = handle.read()
        with open(path, "w") as handle:  # the kernel answers at the flush, inside the with
            handle.write(current)
    except OSError:
        print("-")
        continue
    try:
        with open(path, "w") as handle:
            handle.write(value)
        print(1)
    except OSError:
        print(0)
"""


def candidates(key: str) -> list:
    count, low, high = pf.SYSCTL_RANGES[key]
    if key == "net.ipv4.ip_local_port_range":
        return ["1024 65535", "1023 65535", "1024 65536", "0 100", "3000 2000", "2000 2000"]
    return [" ".join([str(v)] * count) for v in (low, high, low - 1, high + 1)]


def kernel_verdicts(pairs: list) -> list:
    """For each (key, value): True taken, False refused, None not settable in a namespace."""
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", IN_NAMESPACE, json.dumps(pairs)],
                          capture_output=True, text=True, check=True)
    return [None if line == "-" else line == "1" for line in done.stdout.splitlines()]


def test_preflight_refuses_exactly_what_this_kernel_refuses():
    pairs = [(key, value) for key in sorted(pf.SYSCTL_RANGES) if key.startswith("net.") for value in candidates(key)]
    verdicts = kernel_verdicts(pairs)
    judged = {key for (key, _), verdict in zip(pairs, verdicts) if verdict is not None}
    assert {"net.ipv4.ip_local_port_range", "net.ipv4.tcp_rmem", "net.core.somaxconn"} <= judged
    # The fresh namespace's floor (ip_unprivileged_port_start) is the kernel default, 1024.
    settings = {pf.PORT_FLOOR_KEY: 1024}
    disagreements = []
    for (key, value), accepted in zip(pairs, verdicts):
        if accepted is None:
            continue
        refused = pf.sysctl_range_problem("/", key, value, settings) is not None
        if refused == accepted:
            disagreements.append(f"{key}={value!r}: the kernel {'takes' if accepted else 'refuses'} it, preflight not")
    assert disagreements == []
