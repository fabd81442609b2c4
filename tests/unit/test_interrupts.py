"""Ctrl-C and SIGTERM mid-benchmark, for real: the CLI in a subprocess, a real engine running.

What must hold (issue 12): no traceback; the interrupted benchmark is ERROR "interrupted" and the
ones not started SKIP; the JSON / reports hold what finished; the scratch files are removed; the
engine's process group is killed; the exit status is 128 + the signal.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verify import interrupt
from verify.bench import interrupted_rows, run_benchmarks
from verify.desired import render_spec
from verify.node import Node
from verify.result import Status
from verify.runner import CommandOutput, run_command

REPO = Path(__file__).resolve().parent.parent.parent
ENGINE = "verify.bench.odirect_read"


def engines_reading(directory: Path) -> list:
    """Processes still running an engine on a file under `directory`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = (Path("/proc") / entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in argv]
        if ENGINE in text and any(str(directory) in a for a in text):
            found.append(int(entry))
    return found


def wait_for(predicate, timeout_s: float, what: str, proc=None, log=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {what}: {log.read_text()[-2000:] if log else ''}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def interrupt_when_reading(argv: list, scratch_parent: Path, tmp_path: Path, signum: int, reading: bool):
    """Start argv, wait until an engine works on a file under scratch_parent (reading it, or still
    writing it), send signum to the CLI only (as `kill` would), and return (returncode, stderr)."""
    stdout, stderr = (tmp_path / "stdout").open("w"), (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(argv, cwd=REPO, stdout=stdout, stderr=stderr)
    try:
        def engine_busy():
            pids = engines_reading(scratch_parent)
            if not pids:
                return False
            scratch = [p for p in scratch_parent.glob("tunefleet-storage-*/read.bin")]
            return scratch if (not reading or "O_DIRECT read" in (tmp_path / "stderr").read_text()) else False

        scratch = wait_for(engine_busy, 120, "the storage engine to start", proc, tmp_path / "stderr")
        time.sleep(0.2)
        proc.send_signal(signum)
        returncode = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        stdout.close()
        stderr.close()
    return returncode, (tmp_path / "stderr").read_text(), scratch


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_bench_storage_interrupted_mid_read_writes_its_json_and_leaves_nothing(tmp_path, signum):
    shared = tmp_path / "shared"
    shared.mkdir()
    spec = tmp_path / "spec.json"
    # A floor no disk reaches: every try FAILs, so the 50 tries keep the engine busy until the signal.
    spec.write_text(json.dumps(render_spec({"verify_thresholds": {"storage_odirect_gbps": 1e6}})))
    out = tmp_path / "bench.json"
    argv = [sys.executable, "-m", "verify", "bench", "storage", "--dir", str(shared), "--size-bytes", "64M",
            "--engines", "odirect", "--tries", "50", "--spec", str(spec), "--json", str(out)]
    returncode, stderr, scratch = interrupt_when_reading(argv, shared, tmp_path, signum, reading=True)
    assert "Traceback" not in stderr, stderr[-3000:]
    assert returncode == 128 + signum
    assert f"interrupted ({signal.Signals(signum).name})" in stderr
    rows = json.loads(out.read_text())
    assert [(r["check_id"], r["status"]) for r in rows] == [("bench.storage", "ERROR")]
    assert rows[0]["reason"].startswith(f"interrupted ({signal.Signals(signum).name})")
    assert all(not path.exists() for path in scratch) and os.listdir(shared) == []
    assert engines_reading(shared) == []


@pytest.mark.slow
def test_verify_local_interrupted_mid_benchmark_keeps_its_reports(tmp_path):
    """The real `tunefleet verify --local`, SIGINT while the storage engine reads; rdma comes after
    storage, so it never starts."""
    shared, reports = tmp_path / "shared", tmp_path / "reports"
    shared.mkdir(mode=0o700)
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps({
        "verify_bench_options": {"storage": {"dir": str(shared), "size_bytes": "64M", "tries": 50,
                                             "engines": ["odirect"]}},
        "verify_thresholds": {"storage_odirect_gbps": 1e6},  # every try FAILs: the engine stays busy
    }))
    argv = [sys.executable, "-m", "verify", "verify", "--local", "--vars", str(vars_file), "--bench", "storage,rdma",
            "--out", str(reports), "--format", "json,md", "--quiet"]
    returncode, stderr, scratch = interrupt_when_reading(argv, shared, tmp_path, signal.SIGINT, reading=True)
    assert "Traceback" not in stderr, stderr[-3000:]
    assert returncode == 130
    report = json.loads((reports / "report.json").read_text())
    bench = {r["check_id"]: r for r in report["results"] if r["check_id"].startswith("bench.")}
    assert bench["bench.storage"]["status"] == "ERROR"
    assert bench["bench.storage"]["reason"].startswith("interrupted (SIGINT)")
    assert bench["bench.rdma"]["status"] == "SKIP"
    assert bench["bench.rdma"]["reason"] == "not run: interrupted (SIGINT)"
    assert any(r["role"] != "bench" for r in report["results"])  # the config checks that finished are kept
    assert (reports / "report.md").exists()
    assert all(not path.exists() for path in scratch) and os.listdir(shared) == []
    assert engines_reading(shared) == []


def test_run_command_kills_the_child_group_when_interrupted(tmp_path):
    """An interrupt while a command runs kills it and what it started, then propagates."""
    pidfile = tmp_path / "child.pid"
    previous = signal.signal(signal.SIGALRM, lambda s, f: (_ for _ in ()).throw(interrupt.Interrupted(signal.SIGTERM)))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(interrupt.Interrupted):
            run_command(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout_s=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    child = int(pidfile.read_text())

    def gone():
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, 5, "the interrupted command's child to die")


def test_an_interrupted_benchmark_is_error_and_the_rest_are_skipped_not_lost():
    """run_benchmarks keeps what finished, marks the running one ERROR and the others SKIP."""
    calls = []

    def runner(argv, timeout_s=60.0, env=None, cwd=None) -> CommandOutput:
        calls.append(list(argv))
        raise interrupt.Interrupted(signal.SIGINT)

    node = Node(root="/", runner=runner)
    overrides = {"storage": {"file": __file__, "engines": ("odirect",), "tries": 3}}
    results = run_benchmarks({"verify": {"thresholds": {}}}, None, node, ["storage"], overrides)
    assert [(r.check_id, r.status) for r in results] == [("bench.storage", Status.ERROR)]
    assert results[0].reason.startswith("interrupted (SIGINT)")
    assert len(calls) == 1  # the interrupt stopped the tries, not just one of them
    assert interrupt.received() is None  # no handler installed here: nothing recorded globally


def test_the_benchmarks_not_started_are_each_one_skip_row():
    exc = interrupt.Interrupted(signal.SIGTERM)
    rows = interrupted_rows("storage", exc, ["rdma", "perftest", "nccl", "storage", "nonsense"], {"nccl"})
    assert [(r.check_id, r.status.value) for r in rows] == [
        ("bench.storage", "ERROR"), ("bench.rdma", "SKIP"), ("bench.nonsense", "SKIP")]
    assert rows[1].reason == "not run: interrupted (SIGTERM)"


def test_a_signal_during_a_cleanup_is_acted_on_after_it():
    done = []
    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with pytest.raises(KeyboardInterrupt), interrupt.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append("cleanup finished")
        assert done == ["cleanup finished"]
    finally:
        signal.signal(signal.SIGINT, previous)
