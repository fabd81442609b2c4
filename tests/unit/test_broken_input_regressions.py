"""Regressions for issue 20: each whole-run crash through the real CLI in a subprocess, and each
garbage figure that used to PASS, through the real benchmark code with its tool output replaced."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import fixture, output, scripted_node

from verify.bench import nccl, perftest, storage
from verify.profiles import ProfileError, validate_profile
from verify.result import Status

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SPEC = FIXTURES / "node" / "desired_state.json"
DEEP_JSON = "[" * 100000 + "]" * 100000


def tunefleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verify", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                            # each run's history in the test's directory, never the machine's
                                            "TUNEFLEET_HISTORY": str(cwd / "history.sqlite")})


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(FIXTURES / "node" / "snapshots" / "ci_vm" / "tree", root, symlinks=True)
    return root


def verify_tree(root: Path, tmp_path: Path, *extra: str) -> tuple:
    out = tmp_path / "out"
    done = tunefleet("verify", "--local", "--root", str(root), "--spec", str(SPEC), "--no-bench", "--quiet",
                     "--format", "json", "--out", str(out), *extra, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    return done, report


def test_truncated_memtotal_costs_that_fact_only(tree, tmp_path):
    (tree / "proc" / "meminfo").write_text("MemTotal:\nMemFree: 1 kB\n")
    done, report = verify_tree(tree, tmp_path)
    assert done.returncode in (0, 1, 3) and report is not None
    assert report["facts"]["memory_kib"] is None
    assert "/proc/meminfo line 1" in report["facts"]["fact_errors"]["memory_kib"]


def test_huge_cpu_list_is_refused_not_allocated(tree, tmp_path):
    online = tree / "sys" / "devices" / "system" / "cpu" / "online"
    online.parent.mkdir(parents=True, exist_ok=True)
    online.write_text("0-99999999\n")
    done, report = verify_tree(tree, tmp_path)
    assert report is not None and report["facts"]["cpu"] is None
    assert "99999999" in report["facts"]["fact_errors"]["cpu"]


def test_deeply_nested_cuda_version_file_does_not_end_the_run(tree, tmp_path):
    version = tree / "usr" / "local" / "cuda" / "version.json"
    version.parent.mkdir(parents=True)
    version.write_text(DEEP_JSON)
    done, report = verify_tree(tree, tmp_path)
    assert report is not None and done.returncode in (0, 1, 3)


@pytest.mark.parametrize("name, text", [("spec.json", DEEP_JSON), ("spec.yml", "- " * 100000 + "x\n")])
def test_deeply_nested_spec_is_refused_naming_the_file(tmp_path, name, text):
    spec = tmp_path / name
    spec.write_text(text)
    done = tunefleet("verify", "--local", "--spec", str(spec), "--no-bench", "--out", str(tmp_path / "o"),
                     cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(spec) in done.stderr and "nested deeper" in done.stderr


def test_deeply_nested_vars_is_refused_naming_the_file(tmp_path):
    bad = tmp_path / "vars.yml"
    bad.write_text("a: " + "[" * 100000 + "\n")
    done = tunefleet("spec", "--vars", str(bad), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(bad) in done.stderr and "nested deeper" in done.stderr


@pytest.mark.parametrize("value", [".nan", ".inf", "-5", "0"])
def test_impossible_verify_thresholds_are_refused_naming_the_key(tmp_path, value):
    bad = tmp_path / "vars.yml"
    bad.write_text(f"verify_thresholds:\n  nccl_allreduce_busbw_gbps: {value}\n")
    done = tunefleet("spec", "--vars", str(bad), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "nccl_allreduce_busbw_gbps" in done.stderr and "finite number above zero" in done.stderr


def test_nan_in_a_spec_file_is_refused(tmp_path):
    spec = json.loads(SPEC.read_text())
    spec["verify"]["thresholds"] = {"nccl_allreduce_busbw_gbps": math.nan}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    done = tunefleet("verify", "--local", "--spec", str(path), "--no-bench", "--out", str(tmp_path / "o"),
                     cwd=tmp_path)
    assert done.returncode == 2 and "NaN" in done.stderr and str(path) in done.stderr


def test_bare_number_in_verify_thresholds_means_the_limit(tmp_path):
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text("verify_thresholds:\n  nccl_allreduce_busbw_gbps: 300\n")
    done = tunefleet("spec", "--vars", str(vars_file), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verify"]["thresholds"] == {"nccl_allreduce_busbw_gbps": 300}


def test_profile_threshold_that_is_a_bare_number_is_a_clear_error():
    profile = json.loads((REPO / "verify" / "profiles" / "h100-sxm-8x.json").read_text())
    profile["thresholds"]["nccl_allreduce_busbw_gbps"] = 300
    with pytest.raises(ProfileError, match="'nccl_allreduce_busbw_gbps' must be a mapping"):
        validate_profile(profile, "h100-sxm-8x.json")


@pytest.mark.parametrize("bad", [math.nan, 10 ** 4000])
def test_fleet_report_survives_nan_and_huge_integers(tmp_path, bad):
    base = json.loads((FIXTURES / "fleet" / "node_report_ci_vm.json").read_text())
    for host, value in (("h1", bad), ("h2", 5.0), ("h3", 5.1)):
        report = json.loads(json.dumps(base))
        report["results"].append({"check_id": "bench.hostcopy.h2d.gpu0", "role": "bench", "status": "ERROR",
                                  "expected": None, "observed": value, "reason": "x", "remediation": "",
                                  "details": {"value": value}})
        (tmp_path / "run" / host).mkdir(parents=True)
        (tmp_path / "run" / host / "report.json").write_text(json.dumps(report))
    done = tunefleet("report", str(tmp_path / "run"), cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert (tmp_path / "run" / "fleet_report.json").exists()


# ---- garbage figures never PASS (the real benchmark code, tool output replaced) ------------------

SYSTEM = "h200x2_all_reduce_perf_system_nccl.stdout"


def _largest_busbw_replaced(value: str) -> str:
    """The captured nccl-tests run with the busbw columns of its largest row replaced."""
    lines = fixture(SYSTEM).splitlines()
    rows = [i for i, line in enumerate(lines) if line.strip().startswith("4294967296")]
    columns = lines[rows[-1]].split()
    columns[7] = columns[11] = value
    lines[rows[-1]] = "  ".join(columns)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("busbw", ["nan", "-nan", "inf", "-12.5", "99999999"])
def test_nccl_tests_impossible_busbw_is_error(busbw):
    node = scripted_node(lambda argv: output(argv, stdout=_largest_busbw_replaced(busbw)))
    spec = {"verify": {"thresholds": {"nccl_allreduce_busbw_gbps": 300}}}
    results = nccl.run(spec, None, node, {"engine": "nccl-tests", "binary": "/x/a", "gpus": 2, "tries": 1})
    assert results[0].status == Status.ERROR and "measurement broken" in results[0].reason


def test_gdsio_negative_or_nan_throughput_is_that_rows_error(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"\0" * (1 << 20))
    monkeypatch.setattr(storage, "which", lambda name, root="/": "/usr/local/cuda/gds/tools/" + name)
    good = fixture("gdsio_cpuonly_read_nvidia_docs.txt")

    def answer(argv):
        if argv[-1] == "-p":
            return output(argv, stdout=fixture("gdscheck_h200_issue75_excerpt.txt"))
        if "verify.bench.odirect_read" in argv:
            return output(argv, stdout=fixture("h200x2_odirect_qd1.stdout"))
        gpud = argv[argv.index("-x") + 1] == "0"
        return output(argv, stdout=good.replace("CPUONLY", "GPUD").replace("3.227660", "-3.2") if gpud
                      else good.replace("3.227660", "nan"))

    results = {r.check_id: r for r in storage.run(None, None, scripted_node(answer), {"file": str(path), "tries": 1})}
    for name in ("gpud", "cpu_gpu"):
        row = results[f"bench.storage.gdsio.{name}"]
        assert row.status == Status.ERROR and "measurement broken" in row.reason, (name, row.reason)


def test_one_truncated_perftest_client_is_that_hcas_error_only(tmp_path):
    for device in ("mlx5_0", "mlx5_1"):
        port = tmp_path / "sys" / "class" / "infiniband" / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
        (port / "state").write_text("4: ACTIVE\n")
        (port / "link_layer").write_text("InfiniBand\n")
    full = fixture("perftest_ib_write_bw_gbits_issue273.txt")
    cut = full[: full.rindex("\n", 0, len(full.rstrip()) - 30)] + "\n 65536      5000   "

    def answer(argv):
        client = "127.0.0.1" in argv
        return output(argv, stdout=(cut if "mlx5_0" in argv else full) if client else "")

    node = scripted_node(answer, root=str(tmp_path))
    results = {r.check_id: r for r in perftest.run(None, None, node, {"tool_dir": "/x", "tries": 1,
                                                                      "server_start_s": 0})}
    broken, healthy = results["bench.rdma.mlx5_0.write_bw"], results["bench.rdma.mlx5_1.write_bw"]
    assert broken.status == Status.ERROR and "mlx5_0" in broken.reason and "cut short" in broken.reason
    assert healthy.status in (Status.PASS, Status.FAIL, Status.WARN) and healthy.observed is not None


# ---- a corrupted ledger is refused by name, never overwritten or restored from -------------------

LEDGER = "/var/lib/tunefleet/ledger.json"


@pytest.mark.parametrize("text, words", [
    ('{"schema": "tunefleet.ledger/v1", "paths": {"/proc/sys/vm/swappiness": {"value": "6', "truncated"),
    ('{"schema": "tunefleet.ledger/v1", "paths": {"/proc/sys/vm/swappiness": {"exists": true}}}',
     "no recorded value to write back"),
    ('{"schema": "tunefleet.ledger/v1", "files": {"/etc/x.conf": {"state": "file"}}}', "lacks content"),
    ('{"schema": "tunefleet.ledger/v1", "paths": ' + "[" * 5000 + "]" * 5000 + "}", "nested deeper"),
])
def test_corrupted_ledger_is_refused_and_kept(tmp_path, text, words):
    sys.path.insert(0, str(REPO / ".cache" / "collections"))
    from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_core, ledger_restore

    where = tmp_path / LEDGER.lstrip("/")
    where.parent.mkdir(parents=True)
    where.write_text(text)
    for action in (lambda: ledger_core.record(str(tmp_path), LEDGER, [], [], [], None),
                   lambda: ledger_restore.restore(str(tmp_path), ledger_core.load_ledger(str(tmp_path), LEDGER),
                                                  lambda argv: (0, "", ""))):
        with pytest.raises(ledger_core.LedgerError, match=words) as caught:
            action()
        assert LEDGER in str(caught.value) and "nothing was changed" in str(caught.value)
    assert where.read_text() == text
