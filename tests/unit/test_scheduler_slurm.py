"""The real slurmctld + slurmd (tests/helpers/slurm_live.py) run tunefleet through deploy/slurm's hook:
HealthCheckProgram drains the node with tunefleet's reason when a fault is planted in a --root tree (the
real 1x H100 capture, tests/helpers/drills.py) and resumes it once the fault is gone; Prolog= keeps a job off
a node whose GPU left the bus and drains it with tunefleet's reason, not Slurm's "Prolog error"."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import desired_state
from tests.helpers.slurm_live import NODE, local_slurm
from verify.history.drain import slurm_state

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "deploy" / "slurm" / "tunefleet-slurm-hook"
INTERVAL_S = 5

pytestmark = [pytest.mark.slow, pytest.mark.root]


def hook(tmp_path: Path, name: str, tree: Path, extra: str = "", spec: dict = None) -> Path:
    """deploy/slurm's hook under the name Slurm will call, its options as /etc/default/tunefleet gives them."""
    if spec is None:
        spec = desired_state(**{role: {"enabled": False} for role in
                                ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu")})
        spec["verify"]["thresholds"] = {"gpu_count": 1}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    args = (f"--root {tree} --spec {tmp_path / 'spec.json'} --state-dir {tmp_path / 'state'}"
            f" --textfile-dir {tmp_path / 'textfile'} --report {tmp_path / name}.json {extra}")
    # the hook picks its mode from the name it runs under ($0): installed as tunefleet-<name>, as the role does
    # (the wrapper must exec it by that name: exec'ing deploy/'s own file ran every hook as HealthCheckProgram)
    named = tmp_path / "hooks" / f"tunefleet-{name}"
    named.parent.mkdir(exist_ok=True)
    os.symlink(HOOK, named)
    wrapper = tmp_path / "bin" / f"tunefleet-{name}"
    wrapper.parent.mkdir(exist_ok=True)
    wrapper.write_text("#!/bin/sh\n"
                       f"export SLURM_CONF={tmp_path / 'slurm' / 'slurm.conf'} TUNEFLEET_NO_DEFAULTS=1\n"
                       f"export TUNEFLEET='{sys.executable} -m verify' TUNEFLEET_CHECK_ARGS=\"{args}\"\n"
                       f"cd {REPO} && exec {named} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def state_of(runner) -> tuple:
    return slurm_state(runner(["scontrol", "-o", "show", "node", NODE]).stdout)


def wait_for(runner, condition, limit_s: float) -> tuple:
    deadline = time.monotonic() + limit_s
    seen = state_of(runner)
    while time.monotonic() < deadline and not condition(*seen):
        time.sleep(0.5)
        seen = state_of(runner)
    return seen


def set_ports_active(tree: Path) -> None:
    """The repair (a new cable): each Down port Active / LinkUp at the rate of its Active siblings."""
    ports = sorted(tree.glob("sys/class/infiniband/*/ports/*"))
    model = {port: (port.parents[1] / "hca_type").read_text() for port in ports}
    rate = {model[port]: (port / "rate").read_text() for port in ports if "ACTIVE" in (port / "state").read_text()}
    for port in ports:
        if "ACTIVE" not in (port / "state").read_text():
            (port / "state").write_text("4: ACTIVE\n")
            (port / "phys_state").write_text("5: LinkUp\n")
            (port / "rate").write_text(rate[model[port]])


def test_health_check_program_drains_on_a_planted_fault_and_resumes_after_it_is_removed(tmp_path):
    tree = drills.rebuild_sysfs(tmp_path / "tree").root
    program = hook(tmp_path, "healthcheck", tree)
    with local_slurm(tmp_path, (f"HealthCheckProgram={program}", f"HealthCheckInterval={INTERVAL_S}")) as runner:
        drills.plant_ib_ports_down(tree)  # two ConnectX-7 ports Down beside their Active siblings
        flags, reason = wait_for(runner, lambda f, r: "DRAIN" in f, 2 * INTERVAL_S + 20)
        assert "DRAIN" in flags, (flags, reason, (tmp_path / "slurm" / "slurmd.log").read_text()[-1500:])
        assert reason.startswith("tunefleet: drain-rma: health.ib.mlx5_")
        # the drain is written before the run's textfile: wait for the file of the run that drained
        metrics = tmp_path / "textfile" / "tunefleet_health.prom"
        deadline = time.monotonic() + 10
        while 'status="FAIL",mode="health"} 1' not in metrics.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert 'status="FAIL",mode="health"} 1' in metrics.read_text()
        set_ports_active(tree)
        flags, reason = wait_for(runner, lambda f, r: "DRAIN" not in f, 2 * INTERVAL_S + 20)
        assert "DRAIN" not in flags and reason == "", (flags, reason)


def test_a_prolog_keeps_the_job_off_a_node_whose_gpu_left_the_bus(tmp_path):
    tree = drills.rebuild_sysfs(tmp_path / "tree").root
    program = hook(tmp_path, "prolog", tree)
    marker = tmp_path / "job-ran"
    with local_slurm(tmp_path, (f"Prolog={program}", "PrologFlags=Alloc")) as runner:
        os.unlink(tree / "sys/bus/pci/devices/0000:00:06.0")  # the H100 gone from the PCI bus
        submitted = runner(["sbatch", "--parsable", "-w", NODE, "-o", "/dev/null", "--wrap", f"touch {marker}"])
        assert submitted.ok, submitted.stderr
        flags, reason = wait_for(runner, lambda f, r: "DRAIN" in f, 30)
        assert "DRAIN" in flags and reason.startswith("tunefleet: drain-rma: health.gpu.presence: 0 of 1 expected GPUs")
        time.sleep(2)
        assert not marker.exists()
        runner(["scancel", submitted.stdout.strip().split(";")[0]])


# ---- issue 47: the prolog fails only for what breaks the job; the operator's policy decides the rest ------


def untuned_spec() -> dict:
    """An untuned node's desired state: the GPU role asks for nvidia_peermem by name."""
    spec = desired_state(**{role: {"enabled": False} for role in
                            ("sysctl", "network", "storage", "memory", "limits", "cpu")})
    spec["gpu"]["nvidia_peermem"] = True
    spec["verify"]["thresholds"] = {"gpu_count": 1}
    return spec


def job(runner, marker: Path) -> str:
    submitted = runner(["sbatch", "--parsable", "-w", NODE, "-o", "/dev/null", "--wrap", f"touch {marker}"])
    assert submitted.ok, submitted.stderr
    return submitted.stdout.strip().split(";")[0]


def wait_for_file(path: Path, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.3)
    return path.exists()


def test_an_untuned_node_whose_only_findings_are_configuration_runs_its_job(tmp_path):
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    tree.write("/sys/class/infiniband/mlx5_0/node_type", "1: CA\n")  # an HCA: nvidia_peermem is judged
    inject = drills.make(next(d for d in drills.DRILLS if d.name == "healthy"), tmp_path / "inject")
    program = hook(tmp_path, "prolog", tree.root, f"--inject {inject}", untuned_spec())
    marker = tmp_path / "job-ran"
    with local_slurm(tmp_path, (f"Prolog={program}", "PrologFlags=Alloc")) as runner:
        job(runner, marker)
        assert wait_for_file(marker, 30), (tmp_path / "slurm" / "slurmd.log").read_text()[-1500:]
        flags, reason = state_of(runner)
        assert "DRAIN" not in flags and reason == ""
    report = json.loads((tmp_path / "prolog.json").read_text())
    peermem = next(r for r in report["results"] if r["check_id"] == "gpu.nvidia_peermem")
    assert peermem["status"] == "FAIL" and peermem["details"]["action"] == "fix-config"
    assert peermem["details"]["policy"]["do"] == "warn"
    metrics = (tmp_path / "textfile" / "tunefleet_prolog.prom").read_text()
    assert 'check="gpu.nvidia_peermem"' in metrics


def test_a_policy_warns_for_one_xid_and_drains_for_a_check_after_three_runs_run_by_run(tmp_path):
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    inject = drills.make(next(d for d in drills.DRILLS if d.name == "remap_failure"), tmp_path / "inject")
    drills.append_kernel_lines(inject, [drills.on_this_gpu(m) for m in drills.public_lines(
        "kernel-log_faulty_akash209-xid79-535.161.07.txt", r"Xid .*: 79,")])  # Xid 79's line alone
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"xids": {"79": "warn"},
                                  "checks": {"health.gpu.memory": {"do": "drain", "after_runs": 3}}}))
    policy.chmod(0o600)
    program = hook(tmp_path, "prolog", tree.root, f"--inject {inject} --policy {policy}")
    with local_slurm(tmp_path, (f"Prolog={program}", "PrologFlags=Alloc")) as runner:
        for run in (1, 2):
            marker = tmp_path / f"job-{run}"
            job(runner, marker)
            assert wait_for_file(marker, 30), (run, (tmp_path / "slurm" / "slurmd.log").read_text()[-1500:])
            flags, _ = wait_for(runner, lambda f, r: "ALLOCATED" not in f and "COMPLETING" not in f, 30)
            assert "DRAIN" not in flags, run
            report = json.loads((tmp_path / "prolog.json").read_text())
            rows = {r["check_id"]: r for r in report["results"]}
            assert rows[drills.XID_ROW]["details"]["policy"]["rule"] == "xids.79"
            assert rows["health.gpu.memory.0"]["details"]["policy"]["note"] == \
                f"failing run {run} of 3 before it drains"
        third = tmp_path / "job-3"
        jobid = job(runner, third)
        flags, reason = wait_for(runner, lambda f, r: "DRAIN" in f, 30)
        assert "DRAIN" in flags and reason.startswith("tunefleet: drain-rma: health.gpu.memory.0: ")
        assert reason.endswith("(policy checks.health.gpu.memory)")
        time.sleep(2)
        assert not third.exists()
        runner(["scancel", jobid])
