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


def hook(tmp_path: Path, name: str, tree: Path) -> Path:
    """deploy/slurm's hook under the name Slurm will call, its options as /etc/default/tunefleet gives them."""
    spec = desired_state(**{role: {"enabled": False} for role in
                            ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu")})
    spec["verify"]["thresholds"] = {"gpu_count": 1}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    args = (f"--root {tree} --spec {tmp_path / 'spec.json'} --state-dir {tmp_path / 'state'}"
            f" --textfile-dir {tmp_path / 'textfile'} --report {tmp_path / name}.json")
    wrapper = tmp_path / "bin" / name
    wrapper.parent.mkdir(exist_ok=True)
    wrapper.write_text("#!/bin/sh\n"
                       f"export SLURM_CONF={tmp_path / 'slurm' / 'slurm.conf'} TUNEFLEET_NO_DEFAULTS=1\n"
                       f"export TUNEFLEET='{sys.executable} -m verify' TUNEFLEET_CHECK_ARGS=\"{args}\"\n"
                       f"cd {REPO} && exec {HOOK} \"$@\"\n")
    wrapper.chmod(0o755)
    # Slurm runs the hook under the name it was given; the hook picks its mode from that name
    named = wrapper.parent / f"tunefleet-{name}"
    os.symlink(wrapper, named)
    return named


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
        assert 'status="FAIL",mode="health"} 1' in (tmp_path / "textfile" / "tunefleet_health.prom").read_text()
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
