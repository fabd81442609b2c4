"""preflight's sysctl ranges against whatever kernel runs this test: for every per-namespace key of
sysctl_ranges.MODEL, each boundary value and its neighbour outside are written by this test in a
fresh network namespace of its own (nothing on the host changes), and preflight must refuse
exactly what the kernel refuses, where it asks the kernel; where it cannot ask, its model for
this kernel's version must refuse at least that. Each failure names the kernel it compared.
The rules the model picks per version are unit-tested on fake trees in test_preflight.py."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import preflight_checks as pf  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils import sysctl_ranges  # noqa: E402

KERNEL = platform.release()

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
    """Each row's bounds of every version the model knows, and their outside neighbours."""
    if key == "net.ipv4.ip_local_port_range":
        return ["1024 65535", "1023 65535", "1024 65536", "0 100", "3000 2000", "2000 2000"]
    values = set()
    for row in sysctl_ranges.MODEL[key]:
        values |= {" ".join([str(v)] * row.count) for v in (row.low, row.high, row.low - 1, row.high + 1)}
    return sorted(values)


def kernel_verdicts(pairs: list) -> list:
    """For each (key, value): True taken, False refused, None not settable in a namespace."""
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", IN_NAMESPACE, json.dumps(pairs)],
                          capture_output=True, text=True, check=True)
    return [None if line == "-" else line == "1" for line in done.stdout.splitlines()]


def judged_pairs() -> tuple:
    pairs = [(key, value) for key in sorted(sysctl_ranges.MODEL) if key.startswith("net.")
             for value in candidates(key)]
    verdicts = kernel_verdicts(pairs)
    judged = [(pair, verdict) for pair, verdict in zip(pairs, verdicts) if verdict is not None]
    assert {"net.ipv4.ip_local_port_range", "net.ipv4.tcp_rmem", "net.core.somaxconn"} <= {k for (k, _), _ in judged}
    return judged


# The fresh namespace's floor (ip_unprivileged_port_start) is the kernel default, 1024.
SETTINGS = {pf.PORT_FLOOR_KEY: 1024}


def test_preflight_refuses_exactly_what_this_kernel_refuses():
    judged = judged_pairs()
    kernel = sysctl_ranges.KernelRanges("/", [pair for pair, _ in judged])
    assert kernel.answers, f"preflight could not ask kernel {KERNEL} in a network namespace"
    disagreements = []
    for (key, value), accepted in judged:
        refused = pf.sysctl_range_problem("/", key, value, SETTINGS, kernel) is not None
        if refused == accepted:
            disagreements.append(f"{key}={value!r}: the kernel {'takes' if accepted else 'refuses'} it, preflight not")
    assert disagreements == [], f"compared against kernel {KERNEL}"


def test_a_value_the_kernel_refuses_names_the_kernel_and_its_answer():
    judged = judged_pairs()
    (key, value), _ = next(item for item in judged if item[1] is False)
    reason = pf.sysctl_range_problem("/", key, value, SETTINGS)
    assert reason and KERNEL in reason, f"compared against kernel {KERNEL}: {reason!r}"


def test_where_the_kernel_cannot_be_asked_the_model_never_takes_what_it_refuses():
    """The model for this kernel's version may be stricter than this build (builds of one version
    differ), never laxer."""
    judged = judged_pairs()
    model = sysctl_ranges.KernelRanges("/", [pair for pair, _ in judged], ask_kernel=False)
    assert model.answers == {}
    laxer = [f"{key}={value!r}: the kernel refuses it, the model for {model.release} takes it"
             for (key, value), accepted in judged
             if not accepted and pf.sysctl_range_problem("/", key, value, SETTINGS, model) is None]
    assert laxer == [], f"compared against kernel {KERNEL}"
