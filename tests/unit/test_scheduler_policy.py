"""The operator's policy in the hooks (issue 47): the prolog fails only for a hardware fault, a configuration
finding is reported and never drains, the policy file decides per Xid / check / class with run counts and a
recovery window, a bad file falls back to the defaults; over the real 1x H100 capture with published faults
planted (tests/helpers/drills.py) and the scheduler answered by captured scontrol exchanges."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import desired_state
from tests.unit.test_scheduler_modes import Machine, row, slurm, updates
from verify.result import CheckResult, Status
from verify.scheduler import policy as policies
from verify.scheduler import state as saved
from verify.scheduler.modes import Options, run_mode

REPO = Path(__file__).resolve().parents[2]


def untuned_spec() -> dict:
    """The tuning roles off but the GPU role's: nvidia_peermem asked by name, as an untuned node meets it."""
    spec = desired_state(**{role: {"enabled": False} for role in
                            ("sysctl", "network", "storage", "memory", "limits", "cpu")})
    spec["gpu"]["nvidia_peermem"] = True
    return spec


def with_rdma_device(machine: Machine) -> None:
    """A ConnectX HCA registered with the RDMA core (nvidia_peermem then has a NIC to serve)."""
    machine.tree.write("/sys/class/infiniband/mlx5_0/node_type", "1: CA\n")


def run(machine: Machine, mode: str, drill: str, scheduler=None, spec=None, policy=None, now=None, **options):
    node = machine.node(machine.plant(drill))
    chosen = Options(mode, state_dir=str(machine.state), use_nvml=False, use_kmsg=False, node_name="tfnode",
                     scheduler="slurm", policy=policy, **options)
    return run_mode(spec or untuned_spec(), node, chosen, scheduler or slurm(), now=now)


def plant_xid79_alone(directory: Path) -> None:
    """Only the driver's Xid 79 line (no 'fallen off the bus' record beside it)."""
    drills.append_kernel_lines(directory, [drills.on_this_gpu(m) for m in drills.public_lines(
        "kernel-log_faulty_akash209-xid79-535.161.07.txt", r"Xid .*: 79,")])


DRILL_XID79_ALONE = drills.Drill("xid79_alone", "Xid 79's line alone", plant_xid79_alone)


# ---- the file --------------------------------------------------------------------------------------------


def test_a_policy_names_its_rules_and_the_most_specific_wins():
    policy = policies.parse({"xids": {"79": "warn"}, "checks": {"health.ib": {"do": "drain", "after_runs": 3},
                                                                "health.ib.mlx5_0/1": "ignore"},
                             "actions": {"reset-gpu": "drain"}, "faults": {"config": "ignore"}}, "p.json")
    assert policy.xids[79] == policies.Rule("warn", 1, 0.0, "xids.79")
    assert policies.rule_for(policy, "health.ib.mlx5_3/1", Status.FAIL, "drain-rma", "hardware").name == \
        "checks.health.ib"
    assert policies.rule_for(policy, "health.ib.mlx5_0/1", Status.FAIL, "drain-rma", "hardware").do == "ignore"
    assert policies.rule_for(policy, "health.ibx", Status.FAIL, None, "hardware") is policies.DEFAULT_HARDWARE
    assert policies.rule_for(policy, "health.gpu.memory.0", Status.WARN, "reset-gpu", "hardware").name == \
        "actions.reset-gpu"
    assert policies.rule_for(policy, "sysctl.net.core.rmem_max", Status.FAIL, None, "config").name == "faults.config"
    assert policies.rule_for(policies.Policy(), "limits.nofile", Status.FAIL, None, "config") is \
        policies.DEFAULT_CONFIG


@pytest.mark.parametrize("document, named", [
    ([], "the top level is list"),
    ({"xid": {}}, "'xid': unknown section"),
    ({"xids": []}, "xids = []"),
    ({"xids": {"79a": "warn"}}, "xids.'79a'"),
    ({"xids": {"0": "warn"}}, "xids.'0'"),
    ({"xids": {"79": "drian"}}, "xids.79.do = 'drian': must be one of ignore, warn, drain"),
    ({"xids": {"79": 3}}, "xids.79 = 3"),
    ({"checks": {"health.ib": {"do": "drain", "after_runs": 0}}}, "checks.health.ib.after_runs = 0"),
    ({"checks": {"health.ib": {"do": "drain", "after_runs": True}}}, "checks.health.ib.after_runs = True"),
    ({"checks": {"health.ib": {"do": "drain", "after_runs": 2.5}}}, "checks.health.ib.after_runs = 2.5"),
    ({"checks": {"health.ib": {"do": "warn", "recovery_s": -1}}}, "checks.health.ib.recovery_s = -1"),
    ({"checks": {"health.ib": {"do": "warn", "recovery_s": 1e308}}}, "checks.health.ib.recovery_s = 1e+308"),
    ({"checks": {"health.ib": {"do": "warn", "window": 5}}}, "checks.health.ib.window = 5: unknown key"),
    ({"checks": {"Health IB": "warn"}}, "checks.'Health IB'"),
    ({"actions": {"reboot-now": "warn"}}, "actions.'reboot-now': unknown action class"),
    ({"faults": {"software": "warn"}}, "faults.'software': unknown fault class"),
])
def test_a_bad_policy_is_refused_naming_the_key_and_the_value(document, named):
    with pytest.raises(policies.PolicyError) as refused:
        policies.parse(document, "/etc/tunefleet/policy.json")
    assert named in str(refused.value) and "/etc/tunefleet/policy.json" in str(refused.value)


@pytest.mark.parametrize("text, named", [("{", "policy p.json"), ('{"xids": {"79": NaN}}', "NaN"),
                                         ("[" * 50 + "]" * 50, "nest")])
def test_unreadable_policy_text_is_a_policy_error(text, named):
    with pytest.raises(policies.PolicyError) as refused:
        policies.loads(text, "p.json")
    assert named in str(refused.value)


# ---- the hooks ------------------------------------------------------------------------------------------


def test_peermem_on_the_real_h100_without_an_rdma_device_skips_and_the_prolog_passes(tmp_path):
    """The run that filed issue 47: this capture's node has no RDMA device; its prolog exited 1."""
    machine = Machine(tmp_path)
    scheduler = slurm()
    outcome = run(machine, "prolog", "healthy", scheduler)
    peermem = row(outcome, "gpu.nvidia_peermem")
    assert peermem["status"] == "SKIP" and "no RDMA device" in peermem["reason"]
    assert outcome.code == 0 and scheduler.runner.calls == []


@pytest.mark.parametrize("mode", ["prolog", "epilog", "health"])
def test_a_configuration_finding_is_reported_with_fix_config_and_never_drains(tmp_path, mode):
    machine = Machine(tmp_path)
    with_rdma_device(machine)  # now nvidia_peermem is judged: not loaded, asked by name -> FAIL
    scheduler = slurm()
    outcome = run(machine, mode, "healthy", scheduler)
    peermem = row(outcome, "gpu.nvidia_peermem")
    assert peermem["status"] == "FAIL" and peermem["details"]["action"] == "fix-config"
    assert peermem["details"]["policy"] == {"do": "warn", "rule": "default.config", "fault": "config", "runs": 1}
    assert outcome.code == 0 and updates(scheduler) == []
    assert "not draining: policy default.config" in outcome.line
    assert "gpu.nvidia_peermem" in outcome.report["run"]["policy"]["reported"]


def test_a_policy_cannot_make_a_configuration_finding_keep_a_job_off_the_node(tmp_path):
    machine = Machine(tmp_path)
    with_rdma_device(machine)
    strict = policies.parse({"faults": {"config": "drain"}}, "strict.json")
    prolog = run(machine, "prolog", "healthy", policy=strict)
    assert prolog.code == 0
    assert row(prolog, "gpu.nvidia_peermem")["details"]["policy"]["note"] == \
        "a configuration finding never keeps a job off the node"
    scheduler = slurm()
    health = run(machine, "health", "healthy", scheduler, policy=strict)  # the operator's choice, between jobs
    assert health.code == 1 and updates(scheduler)[0][4].startswith("Reason=tunefleet: fix-config: gpu.")
    assert updates(scheduler)[0][4].endswith("(policy faults.config)")


def test_a_lost_gpu_fails_the_prolog_and_drains_naming_the_check_and_the_rule(tmp_path):
    machine = Machine(tmp_path)
    scheduler = slurm()
    outcome = run(machine, "prolog", "xid79", scheduler)
    assert outcome.code == 1
    (update,) = updates(scheduler)
    reason = update[4]
    assert reason.startswith("Reason=tunefleet: drain-rma: health.gpu.xid.") and reason.endswith(
        "(policy default.hardware)") and len(reason) <= len("Reason=") + 200


def test_an_xid_set_to_warn_never_drains_and_a_check_drains_after_three_runs(tmp_path):
    machine = Machine(tmp_path)
    policy = policies.parse({"xids": {"79": "warn"}, "checks": {"health.gpu.memory": {"do": "drain",
                                                                                      "after_runs": 3}}}, "p.json")
    node = machine.node(drills.make(DRILL_XID79_ALONE, tmp_path / "xid79_alone"))
    scheduler = slurm()
    outcome = run_mode(untuned_spec(), node, Options("prolog", state_dir=str(machine.state), use_nvml=False,
                                                     use_kmsg=False, node_name="tfnode", scheduler="slurm",
                                                     policy=policy), scheduler)
    xid = row(outcome, drills.XID_ROW)
    assert xid["status"] == "FAIL" and xid["details"]["policy"]["rule"] == "xids.79"
    assert outcome.code == 0 and updates(scheduler) == []
    codes = []
    for _ in range(3):
        scheduler = slurm()
        outcome = run(machine, "prolog", "remap_failure", scheduler, policy=policy)
        codes.append((outcome.code, len(updates(scheduler)), row(outcome, "health.gpu.memory.0")["details"]["policy"]))
    assert [c[:2] for c in codes] == [(0, 0), (0, 0), (1, 1)]
    assert codes[0][2]["note"] == "failing run 1 of 3 before it drains" and codes[2][2]["do"] == "drain"
    assert saved.load(str(machine.state))[0].policy_runs["prolog"]["health.gpu.memory.0"][0] == 3
    # a clean run forgets the count: the next failure starts from one again
    run(machine, "prolog", "healthy", policy=policy)
    assert "health.gpu.memory.0" not in saved.load(str(machine.state))[0].policy_runs["prolog"]


def test_a_recovery_window_keeps_a_flapping_check_counted_and_the_drain_in_place(tmp_path):
    machine = Machine(tmp_path)
    policy = policies.parse({"checks": {"health.gpu.memory": {"do": "drain", "after_runs": 2,
                                                              "recovery_s": 600}}}, "p.json")
    first = run(machine, "health", "remap_failure", policy=policy, now=1_000_000.0)
    assert first.code == 0
    resumed = slurm("slurm_show_drained_by_tunefleet", "slurm_resume")
    clean = run(machine, "health", "healthy", resumed, policy=policy, now=1_000_300.0)  # inside the window
    assert updates(resumed) == [] and clean.report["run"]["policy"]["recovering"] == ["health.gpu.memory.0"]
    again = run(machine, "health", "remap_failure", policy=policy, now=1_000_400.0)
    assert again.code == 1  # the second failing run: the flap did not reset the count
    later = slurm("slurm_show_drained_by_tunefleet", "slurm_resume")
    run(machine, "health", "healthy", later, policy=policy, now=1_001_100.0)  # the window has passed
    assert updates(later) == [["scontrol", "update", "NodeName=tfnode", "State=RESUME"]]


def test_npd_sets_its_condition_only_for_what_drains_and_events_for_what_is_reported(tmp_path):
    machine = Machine(tmp_path)
    with_rdma_device(machine)
    condition = run(machine, "npd", "healthy")
    assert condition.code == 0  # a configuration finding: no permanent condition
    event = run(machine, "npd", "healthy", npd_events=True)
    assert event.code == 1 and event.line.startswith("FAIL gpu.") and "not draining" in event.line
    drains = run(machine, "npd", "remap_failure")
    assert drains.code == 1 and drains.line.startswith("FAIL drain-rma: health.gpu.memory.0")


# ---- through the command -------------------------------------------------------------------------------


def hook_args(tmp_path: Path, machine: Machine, drill: str, *extra: str) -> list:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(untuned_spec()))
    return ["check", "--root", str(machine.tree.root), "--inject", str(machine.plant(drill)), "--spec", str(spec),
            "--state-dir", str(machine.state), "--textfile-dir", str(tmp_path / "textfile"), "--scheduler", "slurm",
            "--node-name", "tfnode", "--report", str(tmp_path / "report.json"), *extra]


def tunefleet(args: list) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verify", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_a_bad_policy_file_is_a_warning_and_the_defaults_apply(tmp_path):
    machine = Machine(tmp_path)
    bad = tmp_path / "policy.json"
    bad.write_text('{"xids": {"79": "drian"}}')
    bad.chmod(0o600)
    done = tunefleet(hook_args(tmp_path, machine, "healthy", "--mode", "health", "--no-drain", "--policy", str(bad)))
    report = json.loads((tmp_path / "report.json").read_text())
    warn = next(r for r in report["results"] if r["check_id"] == "scheduler.policy")
    assert warn["status"] == "WARN" and "xids.79.do = 'drian'" in warn["reason"] and "defaults apply" in warn["reason"]
    assert done.returncode == 0, done.stderr
    assert report["run"]["policy"]["source"] == "defaults"
    planted = tunefleet(hook_args(tmp_path, machine, "xid79", "--mode", "prolog", "--dry-run", "--policy", str(bad)))
    assert planted.returncode == 1  # the defaults: a lost GPU still drains
    assert "policy: health.gpu.xid." in planted.stdout and "-> drain (default.hardware)" in planted.stdout


def test_the_untuned_node_writes_its_findings_into_the_metrics(tmp_path):
    machine = Machine(tmp_path)
    with_rdma_device(machine)
    done = tunefleet(hook_args(tmp_path, machine, "healthy", "--mode", "prolog", "--no-drain"))
    assert done.returncode == 0 and "reported, job allowed: FAIL gpu.nvidia_peermem" in done.stderr
    metrics = (tmp_path / "textfile" / "tunefleet_prolog.prom").read_text()
    assert 'check="gpu.nvidia_peermem"' in metrics and 'status="FAIL"' in metrics


def test_policy_parsing_stays_in_the_standard_library():
    source = (REPO / "verify" / "scheduler" / "policy.py").read_text()
    imports = {line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "re", "dataclasses", "typing", "verify.bounded_load", "verify.judging",
                       "verify.result"}


def test_every_decision_is_a_check_result_status_the_report_knows():
    decision = policies.apply(policies.Policy(), [CheckResult("health.gpu.presence", "health", Status.FAIL)], {},
                              1.0, True).decisions[0]
    assert decision.do == "drain" and decision.to_dict()["rule"] == "default.hardware"


def test_an_operator_can_make_a_pending_reset_drain_the_prolog(tmp_path):
    """Xid 48 / 63 (reset-gpu: WARN, the vendor lets new work start) drain only where the policy says so."""
    machine = Machine(tmp_path)
    default = run(machine, "prolog", "xid48_63")
    assert default.code == 0 and row(default, drills.XID_ROW)["details"]["policy"]["rule"] == "default.warn"
    strict = policies.parse({"actions": {"reset-gpu": "drain"}}, "strict.json")
    scheduler = slurm()
    drained = run(Machine(tmp_path / "strict"), "prolog", "xid48_63", scheduler, policy=strict)
    assert drained.code == 1 and updates(scheduler)[0][4].startswith("Reason=tunefleet: reset-gpu: health.gpu.xid.")
    assert updates(scheduler)[0][4].endswith("(policy actions.reset-gpu)")


def test_the_live_node_logs_each_drained_or_reported_finding_to_syslog(tmp_path, monkeypatch):
    import syslog

    from verify.scheduler import hook

    said = []
    monkeypatch.setattr(syslog, "openlog", lambda *a: said.append(("open",) + a))
    monkeypatch.setattr(syslog, "syslog", lambda level, line: said.append((level, line)))
    monkeypatch.setattr(syslog, "closelog", lambda: said.append(("close",)))
    machine = Machine(tmp_path)
    with_rdma_device(machine)
    outcome = run(machine, "prolog", "xid79")
    hook._to_syslog("prolog", outcome)
    lines = [entry for entry in said if isinstance(entry[0], int)]
    assert said[0] == ("open", "tunefleet", syslog.LOG_PID, syslog.LOG_DAEMON) and said[-1] == ("close",)
    assert any(level == syslog.LOG_ERR and line.startswith("check --mode prolog: health.gpu.xid.") and
               line.endswith("-> drain (default.hardware)") for level, line in lines)
    assert any(level == syslog.LOG_WARNING and line.startswith("check --mode prolog: gpu.nvidia_peermem FAIL -> warn")
               for level, line in lines)
