"""Through `tunefleet check` (the scheduler's modes on the real 1x H100 capture, tests/unit/test_scheduler_modes.py):
a `-q` paste without its GPU line, the CSV query not answered, is "could not check" (ERROR, never OK and never
"not installed", never a drain); a GPU without a device handle is a FAIL that drains with its class (issue 46
items 4 and 7)."""
from __future__ import annotations

from pathlib import Path

from tests.unit.test_scheduler_modes import Machine, slurm, spec, updates
from verify.result import Status
from verify.scheduler.modes import Options, run_mode

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health" / "public"


def check(machine: Machine, mode: str, directory: Path, scheduler):
    chosen = Options(mode, state_dir=str(machine.state), use_nvml=False, use_kmsg=False, node_name="tfnode",
                     scheduler="slurm")
    return run_mode(spec(), machine.node(directory), chosen, scheduler)


def test_a_q_paste_without_its_gpu_line_is_could_not_check_in_every_mode(tmp_path):
    machine = Machine(tmp_path)
    for mode, code in (("prolog", 0), ("health", 3), ("npd", 2)):
        directory = machine.plant("healthy")
        for name in directory.glob("query-gpu.*"):
            name.unlink()  # the CSV query not answered: a tree's missing tool
        q = directory / "nvidia-smi-q.stdout"
        q.write_text("\n".join(line for line in q.read_text().splitlines() if not line.startswith("GPU ")))
        scheduler = slurm()
        outcome = check(machine, mode, directory, scheduler)
        presence = next(r for r in outcome.results if r.check_id == "health.gpu.presence")
        assert presence.status is Status.ERROR and presence.reason.startswith("could not read nvidia-smi -q")
        assert not any("not installed" in r.reason for r in outcome.results if r.check_id.startswith("health.gpu"))
        assert outcome.code == code and updates(scheduler) == [], (mode, outcome.code)


def test_a_gpu_without_a_device_handle_drains_with_its_class(tmp_path):
    machine = Machine(tmp_path)
    directory = machine.plant("healthy")
    handle = (PUBLIC / "nvidia-smi_faulty_ogkm387-device-handle-unknown-error-520.61.05.txt").read_text()
    (directory / "query-gpu.stdout").write_text(handle.replace("0000:0B:00.0", "0000:00:06.0"))  # the H100's bus
    (directory / "query-gpu.rc").write_text("15\n")
    scheduler = slurm()
    outcome = check(machine, "health", directory, scheduler)
    assert outcome.code == 1
    (update,) = updates(scheduler)
    assert update[4].startswith("Reason=tunefleet: reboot: health.gpu.presence:") and "0000:00:06.0" in update[4]
