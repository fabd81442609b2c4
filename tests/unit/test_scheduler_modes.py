"""`tunefleet check --mode prolog|epilog|health|npd` (verify/scheduler): each mode over the real 1x H100
capture with real published faults planted (tests/helpers/drills.py), through the real Node and the real
checks; the scheduler answered by captured scontrol exchanges (tests/fixtures/scheduler)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import desired_state
from tests.helpers.replay import ReplayRunner
from verify import inject
from verify.checks import health_fabric
from verify.checks.health_gpu import DERIVED_TEMP_MARGIN, judge_clocks, judge_memory
from verify.cli import main
from verify.facts import fabric, health_smi
from verify.node import Node
from verify.result import Status
from verify.runner import CommandOutput
from verify.scheduler import kernel_events, nvml_facts
from verify.scheduler import state as saved
from verify.scheduler.modes import Options, run_mode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"
DRILL = {d.name: d for d in drills.DRILLS}
XID_ROW = drills.XID_ROW.rsplit(".", 1)[0]  # health.gpu.xid.0000:00:06


def exchange(name: str) -> CommandOutput:
    record = json.loads((FIXTURES / f"{name}.json").read_text())
    return CommandOutput(record["argv"], record["returncode"], record["stdout"], record["stderr"], 0.0)


def slurm(show: str = "slurm_show_idle", update: str = "slurm_drain") -> Node:
    """A one-node Slurm cluster as scontrol answered it (`show nodes` is that node's own line)."""
    one = exchange(show)
    nodes = CommandOutput(["scontrol", "-o", "show", "nodes"], 0, one.stdout, "", 0.0)
    return Node(runner=ReplayRunner({tuple(one.argv): one, tuple(nodes.argv): nodes, "scontrol": exchange(update)}))


def updates(scheduler: Node) -> list:
    return [c for c in scheduler.runner.calls if c[:2] == ["scontrol", "update"]]


def spec() -> dict:
    """The test desired state with every tuning role off: only the node's health is judged."""
    return desired_state(**{role: {"enabled": False} for role in
                            ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu")})


class Machine:
    """The H100 capture as a tree (--root) and a drill directory answering its commands."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.tree = drills.rebuild_sysfs(tmp_path / "tree")
        self.tree.write("/proc/sys/kernel/random/boot_id", "0f1e2d3c-0000-4000-8000-000000000001\n")
        self.state = tmp_path / "state"
        self.runs = 0

    def plant(self, name: str) -> Path:
        self.runs += 1
        return drills.make(DRILL[name], self.tmp / f"inject{self.runs}")

    def node(self, directory: Path) -> Node:
        return Node(root=str(self.tree.root), runner=inject.load(str(directory), inject.no_command), live=True)

    def run(self, mode: str, drill: str, scheduler: Node = None, **options):
        node = self.node(self.plant(drill))
        chosen = Options(mode, state_dir=str(self.state), use_nvml=False, use_kmsg=False, node_name="tfnode",
                         scheduler="slurm", **options)
        return run_mode(spec(), node, chosen, scheduler or slurm())


def row(outcome, check_id: str):
    return next(r for r in outcome.report["results"] if r["check_id"] == check_id)


def test_prolog_fails_on_a_planted_xid79_and_drains_with_the_action_class(tmp_path):
    scheduler = slurm()
    outcome = Machine(tmp_path).run("prolog", "xid79", scheduler)
    assert outcome.code == 1 and row(outcome, drills.XID_ROW)["details"]["action"] == "reboot"
    # the public log also has the driver's "GPU has fallen off the bus" for its own bus: the worst class leads
    assert outcome.line.startswith("FAIL drain-rma: health.gpu.xid.")
    (update,) = updates(scheduler)
    assert update[:4] == ["scontrol", "update", "NodeName=tfnode", "State=DRAIN"]
    assert update[4].startswith("Reason=tunefleet: drain-rma: health.gpu.xid.")
    # the prolog set only: no config check, no NVLink / IB
    ids = {r["check_id"].split(".0")[0] for r in outcome.report["results"]}
    assert not any(i.startswith(("sysctl", "health.nvlink", "health.ib", "limits")) for i in ids)


def test_the_healthy_capture_passes_the_prolog_without_touching_the_scheduler(tmp_path):
    scheduler = slurm()
    outcome = Machine(tmp_path).run("prolog", "healthy", scheduler)
    assert outcome.code == 0 and outcome.line.startswith("OK (")
    assert scheduler.runner.calls == []


def test_an_event_is_judged_once_from_the_saved_cursor(tmp_path):
    machine = Machine(tmp_path)
    first = machine.run("prolog", "xid48_63")
    assert row(first, drills.XID_ROW)["status"] == "WARN"  # reset-gpu
    cursor = saved.load(str(machine.state))[0].kernel_uptime_s
    assert cursor is not None and cursor >= 10.0  # the planted lines' dmesg stamps
    second = machine.run("prolog", "xid48_63")  # the same log: nothing new since the last check
    assert row(second, "health.gpu.xid")["status"] == "PASS"
    assert second.report["run"]["kernel_log"]["after_uptime_s"] == cursor


def test_a_reboot_class_event_holds_the_node_until_the_boot_changes(tmp_path):
    machine = Machine(tmp_path)
    assert machine.run("health", "xid79").code == 1
    held = machine.run("health", "healthy", slurm("slurm_show_drained_by_tunefleet", "slurm_resume"))
    assert held.code == 1 and row(held, drills.XID_ROW)["status"] == "FAIL"  # the open event, not a re-read
    assert saved.load(str(machine.state))[0].open_events
    machine.tree.write("/proc/sys/kernel/random/boot_id", "0f1e2d3c-0000-4000-8000-000000000002\n")
    scheduler = slurm("slurm_show_drained_by_tunefleet", "slurm_resume")
    rebooted = machine.run("health", "healthy", scheduler)
    assert rebooted.code == 0 and saved.load(str(machine.state))[0].open_events == []
    assert updates(scheduler) == [["scontrol", "update", "NodeName=tfnode", "State=RESUME"]]


def plant_garbage_query(machine: Machine) -> Path:
    directory = machine.plant("healthy")
    (directory / "query-gpu.stdout").write_text("this is not what nvidia-smi prints\n")
    return directory


def test_a_check_that_cannot_run_never_drains_the_prolog_lets_the_job_run(tmp_path):
    machine = Machine(tmp_path)
    for mode, code in (("prolog", 0), ("health", 3), ("npd", 2)):
        scheduler = slurm("slurm_show_drained_by_tunefleet", "slurm_resume")
        node = machine.node(plant_garbage_query(machine))
        outcome = run_mode(spec(), node, Options(mode, state_dir=str(machine.state), use_nvml=False, use_kmsg=False,
                                                 node_name="tfnode", scheduler="slurm"), scheduler)
        assert any(r.status is Status.ERROR for r in outcome.results)
        assert outcome.code == code and updates(scheduler) == []  # neither drained nor resumed


def test_npd_answers_in_the_plugin_contract(tmp_path):
    machine = Machine(tmp_path)
    scheduler = slurm()
    ok = machine.run("npd", "healthy", scheduler)
    assert ok.code == 0 and ok.line.startswith("OK")
    bad = machine.run("npd", "remap_failure", scheduler)
    assert bad.code == 1 and len(bad.line) <= 80 and bad.line.startswith("FAIL drain-rma: health.gpu.memory.0")
    assert scheduler.runner.calls == []  # NPD sets the node condition; tunefleet drains nothing


def test_health_holds_a_drain_back_when_the_cap_is_reached(tmp_path):
    scheduler = slurm()
    outcome = Machine(tmp_path).run("health", "xid79", scheduler, cap="0")
    assert outcome.code == 1 and updates(scheduler) == []
    (held,) = outcome.actions
    assert held.check_id == "scheduler.drain_cap" and "drain cap reached" in held.reason
    assert held.details["not_drained"] == ["tfnode"]


def test_dry_run_lists_the_drain_and_changes_nothing(tmp_path):
    scheduler = slurm()
    outcome = Machine(tmp_path).run("health", "xid79", scheduler, dry_run=True)
    assert updates(scheduler) == []
    assert "dry run: would run scontrol update NodeName=tfnode State=DRAIN" in outcome.actions[0].reason


def test_a_corrupt_or_planted_state_is_a_warning_never_fatal(tmp_path):
    machine = Machine(tmp_path)
    machine.state.mkdir(mode=0o700)
    (machine.state / saved.FILE_NAME).write_text('{"schema": "tunefleet.scheduler_state/v1", "open_events": 7}')
    outcome = machine.run("prolog", "healthy")
    warn = row(outcome, "scheduler.state")
    assert warn["status"] == "WARN" and "corrupt" in warn["reason"] and outcome.code == 0
    assert saved.load(str(machine.state)) [1] == ""  # rewritten whole
    assert (machine.state.stat().st_mode & 0o777) == 0o700
    (machine.state / saved.FILE_NAME).unlink()
    target = tmp_path / "elsewhere.json"
    target.write_text("keep")
    os.symlink(target, machine.state / saved.FILE_NAME)
    again = machine.run("prolog", "healthy")
    assert "symlink" in row(again, "scheduler.state")["reason"] and target.read_text() == "keep"


def test_the_state_directory_is_made_root_only(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    assert saved.save(str(loose), saved.State(boot_id="b")) == ""
    assert (loose.stat().st_mode & 0o777) == 0o700
    assert saved.load(str(loose))[0].boot_id == "b"
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    state, warning = saved.load(str(shared))
    assert state == saved.State() and "cannot be used" in warning


# ---- NVML readings, as the H100 machine answered them (docs: tests/fixtures/device_runs) ----------

H100 = {"index": 0, "bus_id": "00000000:00:06.0", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "ecc_mode": True,
        "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0, "retired_pending": None,
        "remapped_rows": (0, 0, False, False), "clock_reasons": 0x1, "temperature_c": 39, "tlimit_margin_c": 48,
        "power_mw": 127000, "power_limit_mw": 700000, "persistence": True}


def gpu(**changes) -> health_smi.GpuHealth:
    raw = dict(H100, **changes)
    return health_smi.GpuHealth(0, raw["bus_id"], raw["name"], nvml_facts.health_fields(raw))


def test_nvml_readings_are_judged_by_the_same_judges_as_nvidia_smi():
    assert judge_memory(gpu()).status is Status.PASS and judge_clocks(gpu(), DERIVED_TEMP_MARGIN).status is Status.PASS
    pending = judge_memory(gpu(remapped_rows=(0, 2, True, False)))
    assert pending.status is Status.WARN and pending.details["action"] == "reset-gpu"
    assert judge_memory(gpu(remapped_rows=(0, 2, False, True))).details["action"] == "drain-rma"
    slow = judge_clocks(gpu(clock_reasons=0x8 | 0x1), DERIVED_TEMP_MARGIN)
    assert slow.status is Status.FAIL and "HW slowdown active" in slow.reason
    assert judge_memory(gpu(ecc_mode=None, ecc_uncorrected_volatile=None, ecc_uncorrected_aggregate=None,
                            remapped_rows=None)).status is Status.SKIP


def test_the_fabric_state_is_judged_where_nvml_reports_one():
    assert health_fabric.judge_fabric(0, "b", fabric.FABRIC_NOT_SUPPORTED, 0) is None
    assert health_fabric.judge_fabric(0, "b", fabric.FABRIC_COMPLETED, 0).status is Status.PASS
    assert health_fabric.judge_fabric(0, "b", fabric.FABRIC_IN_PROGRESS, 0).status is Status.WARN
    failed = health_fabric.judge_fabric(3, "b", fabric.FABRIC_COMPLETED, 999)
    assert failed.status is Status.FAIL and failed.details["action"] == "reboot"


# ---- the kernel log from /dev/kmsg ----------------------------------------------------------------

def test_kmsg_records_parse_and_only_the_kernels_count():
    assert kernel_events.parse_kmsg_record(b"4,1234,8213402117,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen "
                                           b"off the bus.\n SUBSYSTEM=pci\n") == \
        (0, 8213.402117, "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    assert kernel_events.parse_kmsg_record(b"12,99,5,-;NVRM: Xid (PCI:0000:3b:00): 79, forged\n")[0] == 1  # user
    assert kernel_events.parse_kmsg_record(b"garbage") is None


def test_the_live_kernel_log_is_read_from_the_cursor_on():
    try:
        whole = kernel_events.read_kmsg(None)
    except OSError as exc:
        pytest.skip(f"/dev/kmsg not readable here: {exc}")
    assert whole.records > 0 and whole.last_uptime_s is not None
    after = kernel_events.read_kmsg(whole.last_uptime_s)
    assert after.records < whole.records and (after.last_uptime_s or 0) >= whole.last_uptime_s


# ---- the command line ----------------------------------------------------------------------------

def cli(tmp_path, machine: Machine, mode: str, drill: str, *extra) -> int:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec()))
    return main(["check", "--mode", mode, "--root", str(machine.tree.root), "--inject", str(machine.plant(drill)),
                 "--spec", str(spec_file), "--state-dir", str(machine.state), "--no-drain", *extra])


def test_the_cli_answers_npd_on_stdout_and_writes_the_textfile(tmp_path, capsys):
    machine = Machine(tmp_path)
    textfile = tmp_path / "textfile"
    code = cli(tmp_path, machine, "npd", "remap_failure", "--textfile-dir", str(textfile))
    out = capsys.readouterr().out
    assert code == 1 and out.count("\n") == 1 and out.startswith("FAIL drain-rma: health.gpu.memory.0")
    prom = (textfile / "tunefleet_npd.prom").read_text()
    assert (textfile / "tunefleet_npd.prom").stat().st_mode & 0o777 == 0o644
    assert 'tunefleet_check_status{check="health.gpu.memory.0",role="health",status="FAIL",mode="npd"} 1' in prom
    assert 'tunefleet_gpu_temperature_celsius{check="health.gpu.clocks.0",gpu="0",pci_bus_id="0000:00:06.0",' \
           'mode="npd"} 39' in prom
    if shutil.which("promtool"):
        checked = subprocess.run(["promtool", "check", "metrics"], input=prom, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_cli_prolog_says_a_failure_on_stderr_only(tmp_path, capsys):
    code = cli(tmp_path, Machine(tmp_path), "prolog", "xid79", "--textfile-dir", "")
    said = capsys.readouterr()
    assert code == 1 and said.out == ""
    assert said.err.startswith("tunefleet prolog: FAIL drain-rma: health.gpu.xid.") and said.err.count("\n") == 1


@pytest.mark.parametrize("mode, code", [("prolog", 0), ("epilog", 0), ("health", 2), ("npd", 2)])
def test_bad_input_is_a_clear_message_and_the_documented_code(tmp_path, capsys, mode, code):
    assert main(["check", "--mode", mode, "--spec", str(tmp_path / "absent.json"), "--state-dir", "",
                 "--textfile-dir", ""]) == code
    said = capsys.readouterr()
    assert "absent.json" in (said.out + said.err) and "Traceback" not in said.err


def test_an_unknown_mode_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["check", "--mode", "bogus"])
    assert stop.value.code == 2 and "invalid choice: 'bogus'" in capsys.readouterr().err


@pytest.mark.parametrize("name, rc, want", [
    ("tunefleet-prolog", 1, 1), ("tunefleet-prolog", 2, 0), ("tunefleet-prolog", 127, 0), ("tunefleet-prolog", 0, 0),
    ("tunefleet-epilog", 2, 0), ("tunefleet-healthcheck", 2, 2), ("tunefleet-healthcheck", 1, 1),
])
def test_the_slurm_hook_drains_only_on_a_fail_never_on_bad_options(tmp_path, name, rc, want):
    """The real deploy/slurm/tunefleet-slurm-hook under its installed names, with TUNEFLEET pointing at a
    command that exits `rc` as tunefleet would: a prolog/epilog exits non-zero (Slurm drains) only on 1."""
    hook = tmp_path / name
    hook.write_bytes((Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "tunefleet-slurm-hook").read_bytes())
    hook.chmod(0o755)
    command = tmp_path / "tunefleet"
    mode = name.rsplit("-", 1)[1].replace("healthcheck", "health")
    verdict = f"echo 'tunefleet {mode}: FAIL reboot: health.gpu.xid.x: Xid 79' >&2\n" if rc == 1 else ""
    command.write_text(f"#!/bin/sh\n{verdict}exit {rc}\n")  # tunefleet's exit 1 comes with its verdict line
    command.chmod(0o755)
    done = subprocess.run([str(hook)], env={"TUNEFLEET_NO_DEFAULTS": "1", "TUNEFLEET": str(command),
                                            "SLURMD_NODENAME": "node1"}, capture_output=True, text=True, timeout=30)
    assert done.returncode == want
    if want == 0 and rc not in (0, 1):
        assert "not draining" in done.stderr


def test_health_judges_ib_counters_per_minute_of_the_interval_since_the_saved_reading(tmp_path):
    machine = Machine(tmp_path)
    # The real all-active ConnectX-7 node's ports (leptonai/gpud testdata) on the H100 capture's tree.
    drills.ibstat_to_sysfs((drills.PUBLIC / "ibstat_healthy_gpud-h100-roce-cx7-all-active.txt").read_text(),
                           machine.tree)
    counters = "/sys/class/infiniband/mlx5_0/ports/1/counters"

    def health(now: float, symbol_errors: int, flaps: int, scheduler: Node):
        machine.tree.write(f"{counters}/symbol_error", f"{symbol_errors}\n")
        machine.tree.write(f"{counters}/link_downed", f"{flaps}\n")
        node = machine.node(machine.plant("healthy"))
        options = Options("health", state_dir=str(machine.state), use_nvml=False, use_kmsg=False,
                          node_name="tfnode", scheduler="slurm")
        return run_mode(spec(), node, options, scheduler, now=now)

    start = 1_790_000_000.0
    first = health(start, 130, 2, slurm())  # counts since driver load only: 130 errors and 2 flaps FAIL
    assert row(first, "health.ib.mlx5_0/1")["status"] == "FAIL"
    kept = saved.load(str(machine.state))[0]
    assert kept.counters["health.ib.mlx5_0/1"] == {"symbol_error": 130, "link_downed": 2}
    assert kept.counters_at == start

    # An hour later, 12 new symbol errors (0.2 a minute, under IBTA's 2) and no flap: a WARN, not a drain.
    scheduler = slurm("slurm_show_drained_by_tunefleet", "slurm_resume")
    quiet = health(start + 3600, 142, 2, scheduler)
    port = row(quiet, "health.ib.mlx5_0/1")
    assert port["status"] == "WARN" and quiet.report["run"]["counters_interval_s"] == 3600
    assert "symbol_error 12 in 60.0 min = 0.2/min (142 since driver load)" in port["reason"]
    assert "link_downed" not in port["reason"] and port["details"]["counters_per_min"]["link_downed"] == 0
    assert updates(scheduler) == [["scontrol", "update", "NodeName=tfnode", "State=RESUME"]]

    # Three minutes after that: the same 12 errors are 4 a minute, and a flap: the node is drained for the cable.
    scheduler = slurm()
    bad = health(start + 3780, 154, 3, scheduler)
    port = row(bad, "health.ib.mlx5_0/1")
    assert port["status"] == "FAIL" and port["details"]["action"] == "drain-rma"
    assert "symbol_error 12 in 3.0 min = 4.0/min (154 since driver load)" in port["reason"]
    assert "link_downed 1 in 3.0 min = 0.3/min (3 since driver load)" in port["reason"]
    (update,) = updates(scheduler)
    assert update[4].startswith("Reason=tunefleet: drain-rma: health.ib.mlx5_0/1")
    assert saved.load(str(machine.state))[0].counters_at == start + 3780
