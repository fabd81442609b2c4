"""The history through the real CLI: every `verify --local` recorded (or not, with --no-history), drift
shown on the second run, a bad --history refused before anything runs, `tunefleet history` as a table,
CSV, JSON and HTML, and the fleet run's regressions listed in the fleet report beside the outliers."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from verify.cli import main
from verify.fleet.recording import record_fleet
from verify.history import regress
from verify.history.cli import RunHistory
from verify.history.store import Measurement, RunRecord, open_store

FLEET_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "fleet" / "node_report_ci_vm.json"


def spec_file(tmp_path) -> str:
    off = {"enabled": False}
    path = tmp_path / "desired.json"
    path.write_text(json.dumps(desired_state(network=off, storage=off, gpu=off, memory=off, limits=off, cpu=off)))
    return str(path)


def tree(tmp_path, swappiness="0") -> FakeTree:
    t = FakeTree(tmp_path / "root")
    t.write("/etc/hostname", "gpu-07\n")
    t.write("/proc/sys/net/core/rmem_max", "536870912\n").write("/proc/sys/vm/swappiness", f"{swappiness}\n")
    return t.write("/proc/sys/net/ipv4/tcp_rmem", "4096\t87380\t268435456\n")


def verify_local(tmp_path, *extra, swappiness="0") -> tuple:
    out = tmp_path / "out"
    code = main(["verify", "--local", "--spec", spec_file(tmp_path), "--root", str(tree(tmp_path, swappiness).root),
                 "--out", str(out), "--no-bench", "--format", "json", "--quiet", *extra])
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    return code, report


def test_every_local_run_is_recorded_and_a_changed_value_is_drift_on_the_next(tmp_path):
    history = Path(os.environ["TUNEFLEET_HISTORY"])  # the default path, private to this test (tests/conftest.py)
    code, first = verify_local(tmp_path)
    assert code == 0 and not [r for r in first["results"] if r["role"] == "history"]
    code, second = verify_local(tmp_path, swappiness="60")
    drift = [r for r in second["results"] if r["check_id"] == "history.drift.sysctl.vm.swappiness"]
    assert len(drift) == 1 and drift[0]["status"] == "WARN"
    assert "was '0', now '60'" in drift[0]["reason"]
    assert code == 1 and second["summary"]["counts"]["WARN"] == 1  # 60 fails the desired 0; the drift says why
    db = sqlite3.connect(history)
    assert db.execute("SELECT count(*) FROM runs r JOIN hosts h ON h.id = r.host_id WHERE h.name = 'gpu-07'"
                      ).fetchone()[0] == 2


def test_no_history_records_nothing(tmp_path):
    code, report = verify_local(tmp_path, "--no-history")
    assert code == 0 and report is not None
    assert not Path(os.environ["TUNEFLEET_HISTORY"]).exists()


def test_a_foreign_history_file_is_refused_before_anything_runs(tmp_path, capsys):
    foreign = tmp_path / "notes.sqlite"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()
    before = foreign.read_bytes()
    code, report = verify_local(tmp_path, "--history", str(foreign))
    assert code == 2 and report is None
    assert f"history {foreign} is a database of another program" in capsys.readouterr().err
    assert foreign.read_bytes() == before


@pytest.mark.parametrize("option", [["--regression-percent", "0"], ["--regression-runs", "0"]])
def test_bad_regression_options_are_refused_by_name(tmp_path, capsys, option):
    code, report = verify_local(tmp_path, *option)
    assert code == 2 and report is None and option[0] in capsys.readouterr().err


def seeded(tmp_path) -> str:
    path = str(tmp_path / "h.sqlite")
    with open_store(path) as store:
        for i, h2d in enumerate([55.4, 55.3, 55.4, 41.0]):
            store.record(RunRecord("gpu-01", f"2026-11-2{i}T00:00:00+00:00", "local", f"r{i}", "PASS", 0,
                                   [Measurement("bench.h2d.gpu0", "PASS", h2d, "GB/s"),
                                    Measurement("bench.storage.odirect", "PASS", 2.2, "GB/s")], {}))
    return path


def test_history_table_csv_json_and_html(tmp_path, capsys):
    path = seeded(tmp_path)
    assert main(["history", "--history", path, "--host", "gpu-01"]) == 0
    table = capsys.readouterr().out
    assert "bench.h2d.gpu0 (GB/s)" in table and table.count("\n") == 6  # title, header, 4 runs
    assert main(["history", "--history", path, "--host", "gpu-01", "--check", "bench.h2d.gpu0",
                 "--format", "csv", "--last", "2"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["started_at"][:10], float(r["value"])) for r in rows] == [("2026-11-22", 55.4), ("2026-11-23", 41.0)]
    assert main(["history", "--history", path, "--host", "gpu-01", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [p["value"] for p in document["checks"]["bench.h2d.gpu0"]["points"]] == [55.4, 55.3, 55.4, 41.0]
    out = tmp_path / "trend.html"
    assert main(["history", "--history", path, "--host", "gpu-01", "--format", "html", "--out", str(out)]) == 0
    page = out.read_text()
    assert page.count("<svg") == 2 and page.count('class="run"') == 8
    assert "bench.h2d.gpu0 41 GB/s, was 55.4 GB/s over the last 3 runs" in page


def test_history_refuses_an_unknown_host_or_a_missing_file(tmp_path, capsys):
    path = seeded(tmp_path)
    assert main(["history", "--history", path, "--host", "nope"]) == 2
    assert "--host nope: no run recorded" in capsys.readouterr().err
    assert main(["history", "--history", str(tmp_path / "none.sqlite")]) == 2
    assert not (tmp_path / "none.sqlite").exists()


def test_history_regressions_pass(tmp_path, capsys):
    assert main(["history", "--history", seeded(tmp_path), "--regressions"]) == 0
    out = capsys.readouterr().out
    assert "1 regressions" in out and "WARN gpu-01: bench.h2d.gpu0 41 GB/s, was 55.4 GB/s" in out


def fleet_run_dir(tmp_path, name: str, busbw: dict) -> Path:
    """A fleet run directory as playbooks/verify.yml leaves it: <run>/<host>/report.json per host."""
    base = json.loads(FLEET_FIXTURE.read_text())
    run = tmp_path / "reports" / name
    for host, value in busbw.items():
        report = dict(base, results=base["results"] + [
            {"check_id": "bench.nccl_allreduce", "role": "bench", "status": "PASS", "observed": value,
             "expected": ">= 300", "reason": f"busbw {value} GB/s", "remediation": "", "details": {}}])
        (run / host).mkdir(parents=True)
        (run / host / "report.json").write_text(json.dumps(report))
    return run


def test_a_fleet_run_is_recorded_once_and_its_report_lists_regressions(tmp_path, capsys):
    prepared = RunHistory(open_store(str(tmp_path / "h.sqlite")), regress.Settings(), None)
    for i in range(3):
        record_fleet(prepared, str(fleet_run_dir(tmp_path, f"run{i}", {"a": 340.0, "b": 341.0, "c": 339.0})))
    last = fleet_run_dir(tmp_path, "run3", {"a": 340.0, "b": 290.0, "c": 339.0})
    document = record_fleet(prepared, str(last))
    record_fleet(prepared, str(last))  # recorded twice: kept once
    prepared.close()
    assert [(r["host"], r["value"]) for r in document["regressions"]] == [("b", 290.0)]
    assert sqlite3.connect(tmp_path / "h.sqlite").execute("SELECT count(*) FROM runs").fetchone()[0] == 12
    assert main(["report", str(last), "--format", "json,md,html"]) == 1  # the captured CI VM fails its limits
    summary = capsys.readouterr().out
    assert "1 regression(s) against the hosts' own history" in summary
    fleet = json.loads((last / "fleet_report.json").read_text())
    assert [r["host"] for r in fleet["regressions"]] == ["b"] and fleet["load_errors"] == []
    assert sorted(h["host"] for h in fleet["hosts"]) == ["a", "b", "c"]  # the regressions file is no node report
    assert "b**: bench.nccl_allreduce 290 GB/s, was 341 GB/s" in (last / "fleet_report.md").read_text()
    assert 'class="regression"' in (last / "fleet_report.html").read_text()
    shutil.rmtree(tmp_path / "reports")


def test_a_fleet_run_drains_its_failing_hosts_by_inventory_name(tmp_path):
    from tests.helpers.replay import ReplayRunner
    from verify.cli import build_parser
    from verify.fleet.recording import finish_fleet
    from verify.history.cli import prepare
    from verify.node import Node
    from verify.runner import CommandOutput

    scheduler = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"
    record = json.loads((scheduler / "slurm_show_idle.json").read_text())
    node = Node(runner=ReplayRunner({"scontrol": CommandOutput(record["argv"], 0, record["stdout"], "", 0.0)}))
    run = fleet_run_dir(tmp_path, "run0", {"a": 340.0, "b": 341.0})
    assert main(["report", str(run), "--format", "json"]) == 1
    args = build_parser().parse_args(["verify", "-i", "inventory.ini", "--history", str(tmp_path / "h.sqlite"),
                                      "--on-fail", "drain", "--scheduler", "slurm", "--dry-run", "--drain-cap", "100%"])
    lines: list = []
    finish_fleet(prepare(args), str(run), lines.append, node)
    drains = [line for line in lines if "scheduler.drain " in line]
    assert len(drains) == 2 and "scheduler.drain a: dry run: would run scontrol update NodeName=a State=DRAIN " \
        "'Reason=tunefleet: limits.login.memlock" in drains[0]
    assert [c[:2] for c in node.runner.calls] == [["scontrol", "-o"]] * 2  # read only: a dry run
    assert sqlite3.connect(tmp_path / "h.sqlite").execute("SELECT count(*) FROM runs").fetchone()[0] == 2


def test_a_fleet_run_drains_no_more_than_the_cap_and_names_the_hosts_it_held_back(tmp_path):
    from tests.helpers.replay import ReplayRunner
    from verify.cli import build_parser
    from verify.fleet.recording import finish_fleet
    from verify.history.cli import prepare
    from verify.node import Node
    from verify.runner import CommandOutput

    scheduler = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"
    record = json.loads((scheduler / "slurm_show_idle.json").read_text())
    node = Node(runner=ReplayRunner({"scontrol": CommandOutput(record["argv"], 0, record["stdout"], "", 0.0)}))
    run = fleet_run_dir(tmp_path, "run0", {"a": 340.0, "b": 341.0})
    main(["report", str(run), "--format", "json"])
    # the default cap, 10% of 2 hosts: one drained, the other named, never drained
    args = build_parser().parse_args(["verify", "-i", "inventory.ini", "--history", str(tmp_path / "h.sqlite"),
                                      "--on-fail", "drain", "--scheduler", "slurm", "--dry-run"])
    lines: list = []
    finish_fleet(prepare(args), str(run), lines.append, node)
    assert len([line for line in lines if "scheduler.drain " in line]) == 1
    held = [line for line in lines if "scheduler.drain_cap" in line]
    assert len(held) == 1 and "drain cap reached" in held[0] and "not drained: b" in held[0]
