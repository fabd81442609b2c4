"""Only real change is drift (issue 40 item 3): history drift compares configuration values, never readings
that move by nature. Two recorded runs of the real 2x H200 node (its report, with the health rows its health
checks gave: tests/fixtures/node/health/h200x2/health_checks.json) whose only differences are readings
(T.Limit headroom, temperatures, power, link speed at idle, error counters) give no drift WARN; a changed
sysctl still drifts. And the clocks check never WARNs on a GPU at its power limit, through the health hook."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.helpers import drills
from tests.helpers.fake_node import desired_state
from verify.cli import main
from verify.history import record, regress
from verify.history.store import open_store
from verify.report import build_report
from verify.result import CheckResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GPU_REPORT = json.loads((FIXTURES / "node" / "gpu_machine_report.json").read_text())
HEALTH_ROWS = json.loads((FIXTURES / "node" / "health" / "h200x2" / "health_checks.json").read_text())[0]["results"]


def report(started_at: str, change=None) -> dict:
    """The 2x H200 machine's report with its health rows, started at `started_at`, changed by `change`."""
    rows = copy.deepcopy(GPU_REPORT["results"]) + copy.deepcopy(HEALTH_ROWS)
    if change:
        change({r["check_id"]: r for r in rows})
    run = dict(GPU_REPORT["run"], started_at=started_at)
    return build_report(GPU_REPORT["desired_state"], GPU_REPORT["facts"], [CheckResult.from_dict(r) for r in rows],
                        run)


def readings_moved(rows: dict) -> None:
    """What a second run of the same idle node reads differently: the GPUs two degrees warmer, more power,
    one link trained down at idle, a few more corrected NVLink errors."""
    for index, headroom in ((0, 48), (1, 49)):
        clocks = rows[f"health.gpu.clocks.{index}"]
        clocks["observed"] = f"no slowdown, {headroom} C of T.Limit headroom"
        clocks["details"]["readings"].update(tlimit_headroom_c=headroom, temperature_c=33, power_w=131.2)
    rows["health.pcie.gpu.0000:00:06.0"]["observed"] = "Gen1 x16"
    nvlink = rows["health.nvlink.0"]
    nvlink["observed"] = "18 links up, 3 corrected errors"


def test_two_runs_that_differ_only_in_readings_give_no_drift_and_a_changed_sysctl_does(tmp_path):
    first = report("2026-11-27T10:00:00+00:00")
    assert "health.gpu.clocks.0" in {r["check_id"] for r in first["results"]}
    with open_store(str(tmp_path / "h.sqlite")) as store:
        assert record.judge_and_record(store, first, regress.Settings()) == []
        second = record.judge_and_record(store, report("2026-11-27T11:00:00+00:00", readings_moved),
                                         regress.Settings())
        assert [r.check_id for r in second if r.check_id.startswith("history.drift")] == []

        def swappiness(rows: dict) -> None:
            readings_moved(rows)
            rows["sysctl.vm.swappiness"]["observed"] = "10"

        third = record.judge_and_record(store, report("2026-11-27T12:00:00+00:00", swappiness), regress.Settings())
        assert [(r.check_id, r.expected, r.observed) for r in third] == [
            ("history.drift.sysctl.vm.swappiness", "60", "10")]


def test_health_rows_are_no_configuration():
    config = record.config_of(report("2026-11-27T10:00:00+00:00"),
                              [CheckResult.from_dict(r) for r in GPU_REPORT["results"] + HEALTH_ROWS])
    assert not [key for key in config if key.startswith("health.")]
    assert config["sysctl.vm.swappiness"] == "60" and config["facts.gpus.driver_version"] == "580.159.04"


# ---- the health hook on a GPU at its power limit ------------------------------------------------------------------

def at_power_limit(directory: Path) -> None:
    """The real H100 capture's health query with the readings NVML gave for that GPU during a 10 s burn at its
    700 W cap (tests/fixtures/bench/gpu_burn_h100x1.stdout: reasons sw_power_cap, 722.6 W and 61 C at most)."""
    for column, value in (("clocks_event_reasons.active", "0x0000000000000004"),
                          ("clocks_event_reasons.sw_power_cap", "Active"),
                          ("power.draw [W]", "722.58 W"), ("temperature.gpu", "61")):
        drills.set_query_field(directory, column, value)


def test_the_health_hook_on_a_gpu_at_its_power_limit_gives_no_warn(tmp_path, capsys):
    burn = json.loads((FIXTURES / "bench" / "gpu_burn_h100x1.stdout").read_text().split("TUNEFLEET_RESULT ", 1)[1])
    assert burn["burn"]["gpus"][0]["nvml"]["reasons"] == ["sw_power_cap"]  # the capture says what is planted
    assert burn["burn"]["gpus"][0]["nvml"]["power_w"]["max"] == 722.578
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    inject = drills.make(next(d for d in drills.DRILLS if d.name == "healthy"), tmp_path / "inject")
    at_power_limit(inject)
    spec = desired_state(**{role: {"enabled": False} for role in
                            ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu")})
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    code = main(["check", "--mode", "health", "--root", str(tree.root), "--inject", str(inject), "--spec",
                 str(tmp_path / "spec.json"), "--state-dir", str(tmp_path / "state"), "--textfile-dir", "",
                 "--no-drain", "--report", str(tmp_path / "health.json")])
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "health.json").read_text())["results"]
    assert [(r["check_id"], r["reason"]) for r in rows if r["status"] != "PASS" and r["status"] != "SKIP"] == []
    clocks = next(r for r in rows if r["check_id"] == "health.gpu.clocks.0")
    assert "at its power limit" in clocks["observed"] and clocks["details"]["readings"]["power_w"] == 722.58
    assert code == 0 and out.startswith("tunefleet health: OK")
