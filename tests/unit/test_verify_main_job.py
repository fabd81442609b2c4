"""verify's main job through the real path: `python3 -m verify verify --local` in a subprocess, the real
Node and runner, the default (quick) benchmark set, and rows that were really measured.

The CI machine has no GPU and no HCA, so the quick set measures storage (O_DIRECT on a file in a
temporary directory) and, where torch is installed, the all-reduce on gloo (CPU ranks); the GPU and
RDMA benchmarks must be listed as skipped with their reasons.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from verify.bench.common import module_available

REPO = Path(__file__).resolve().parents[2]


def test_verify_local_with_no_bench_argument_measures_and_lists_what_it_skipped(tmp_path):
    scratch, out = tmp_path / "scratch", tmp_path / "reports"
    scratch.mkdir(mode=0o700)
    options = {
        "storage": {"dir": str(scratch), "size_bytes": "16M", "tries": 1, "engines": ["odirect"]},
        "nccl": {"backend": "gloo", "gpus": 2, "min_bytes": "1M", "max_bytes": "4M", "iters": 2, "warmup": 1,
                 "tries": 1, "timeout_s": 120},
    }
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps({"verify_bench_options": options}))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "verify", "verify", "--local", "--vars", str(vars_file), "--out", str(out),
         "--format", "json,md"],
        cwd=REPO, capture_output=True, text=True, timeout=240,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    elapsed = time.monotonic() - started
    assert done.returncode in (0, 1, 3), done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    rows = {r["check_id"]: r for r in report["results"]}
    record = report["run"]["bench"]
    assert record["selection"] == "quick" and record["wall_s"] > 0

    odirect = rows["bench.storage.odirect"]
    assert odirect["status"] == "PASS" and odirect["observed"] > 0, odirect["reason"]
    assert odirect["details"]["runs"][0]["bytes"] == 16 << 20
    assert list(scratch.iterdir()) == []  # the scratch file is gone

    allreduce = rows["bench.nccl_allreduce"]
    if module_available("torch"):
        assert allreduce["status"] == "PASS", allreduce["reason"]
        assert allreduce["details"]["engine"] == "torch" and allreduce["details"]["ranks"] == 2
        assert [p["size_bytes"] for p in allreduce["details"]["curve"]] == [1 << 20, 2 << 20, 4 << 20]
        assert all(p["busbw_gbps"] > 0 and p["wrong"] == 0 for p in allreduce["details"]["curve"])
    else:
        assert allreduce["status"] == "SKIP" and "PyTorch" in allreduce["reason"]
    assert record["ran"] == ["nccl", "storage"]

    # No GPU and no HCA here: skipped, each with its reason, in the JSON, the rows and the Markdown.
    skipped = {item["benchmark"]: item["reason"] for item in record["skipped"]}
    assert skipped["hostcopy"].startswith("no GPU on this node")
    assert skipped["rdma"] == "no active RDMA port under /sys/class/infiniband"
    assert rows["bench.hostcopy"]["status"] == "SKIP" and rows["bench.rdma"]["status"] == "SKIP"
    markdown = (out / "report.md").read_text()
    assert "skipped rdma: no active RDMA port" in markdown and "benchmarks (quick, " in markdown
    assert "profile: derived from link peaks" in markdown
    assert "benchmarks (quick, " in done.stdout  # the terminal prints the phase and its wall time
    assert elapsed < 60, f"{elapsed:.0f} s"
