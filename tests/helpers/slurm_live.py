"""A throwaway Slurm cluster of one node (munged + slurmctld + slurmd from Debian's packages), all of it in
a temporary directory: its own munge key and socket, free ports, state, spool, logs and pid files.

Started in the foreground as children of the test (so they are reaped), stopped and gone when the
context ends; nothing under /etc, /var or /run is written. Skips when the packages are absent.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from verify.runner import run_command

DAEMONS = ("munged", "slurmctld", "slurmd", "scontrol")
NODE = "tfnode"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf(base: Path, host: str, extra: tuple = ()) -> str:
    return "\n".join([*extra,
        "ClusterName=tunefleet-test",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={base}/munge.sock", "CredType=cred/munge",
        f"StateSaveLocation={base}/state", f"SlurmdSpoolDir={base}/spool",
        f"SlurmctldPidFile={base}/slurmctld.pid", f"SlurmdPidFile={base}/slurmd.pid",
        f"SlurmctldLogFile={base}/slurmctld.log", f"SlurmdLogFile={base}/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SchedulerType=sched/builtin",
        "SelectType=select/linear", "ReturnToService=2", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        f"NodeName={NODE} NodeHostName={host} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN",
        f"PartitionName=debug Nodes={NODE} Default=YES State=UP", ""])


@contextlib.contextmanager
def local_slurm(tmp_path: Path, extra: tuple = ()) -> Iterator:
    """Yields a runner (verify.runner.run_command's call) whose commands talk to this cluster; `extra` are
    more slurm.conf lines (HealthCheckProgram=, Prolog=, ...), and the runner's `conf` the slurm.conf path."""
    missing = [d for d in DAEMONS if not shutil.which(d)]
    if missing or os.geteuid() != 0:
        pytest.skip(f"needs root and Debian's slurmctld, slurmd, slurm-client and munge ({', '.join(missing)} absent)")
    base = tmp_path / "slurm"
    for sub in ("state", "spool"):
        (base / sub).mkdir(parents=True)
    key = base / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    conf = base / "slurm.conf"
    conf.write_text(_conf(base, socket.gethostname().split(".")[0], tuple(extra)))
    env = dict(os.environ, SLURM_CONF=str(conf))
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={base}/munge.sock", f"--key-file={key}",
             f"--pid-file={base}/munged.pid", f"--log-file={base}/munged.log", f"--seed-file={base}/munge.seed"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(lambda: (base / "munge.sock").exists(), "munged", base)
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen(["slurmd", "-D", "-N", NODE], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))

        def runner(argv, timeout_s: float = 60.0, env=None, cwd=None):
            return run_command(argv, timeout_s=timeout_s, env=dict(env or {}, SLURM_CONF=str(conf)), cwd=cwd)

        runner.conf = conf

        def ready() -> bool:
            out = runner(["scontrol", "-o", "show", "node", NODE], timeout_s=5)
            return out.ok and "State=IDLE" in out.stdout and "NOT_RESPONDING" not in out.stdout

        _wait(ready, "slurmctld and slurmd", base)
        yield runner
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait(condition, what: str, base: Path, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    logs = {p.name: p.read_text(errors="replace")[-800:] for p in base.glob("*.log")}
    raise AssertionError(f"{what} did not come up within {limit_s:g} s: {logs}")
