"""Issue 26 item 3 and issue 29 item 2, counters as rates: NVLink and IB error counters are judged as their
increase per minute since the node's last recorded run (the history keeps the run's start, which stands for
when its counters were read), with the count since driver load beside it; the first run (or one after a driver
reload, or without a history) judges the count since driver load. Through the whole `tunefleet verify --local
--root TREE --inject DIR` (tests/helpers/drills.py: the real H100 capture), at known times, with the real 2x
H200 machine's `nvidia-smi nvlink -s` / `-e` for GPU 0 and its CRC / replay counts raised between the runs, as
the drills plant a fault into a real output."""
from __future__ import annotations

import json
import re
import sqlite3

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import FakeTree
from verify import local_run
from verify.checks import health_ib
from verify.checks.health_common import remember_previous
from verify.cli import main
from verify.history.record import counters_of, previous_counters, previous_reading
from verify.history.store import RunRecord, open_store
from verify.node import Node
from verify.result import CheckResult, Status

H200 = drills.HEALTH / "h200x2" / "cmd"
NVLINK_ROW = "health.nvlink.0"
T0 = "2026-11-22T08:00:00+00:00"  # the first run's start; the later runs start minutes after it


def at(monkeypatch, stamp: str) -> None:
    """The run starts at stamp (the clock verify.local_run stamps its report and history row with)."""
    monkeypatch.setattr(local_run, "utc_now", lambda: stamp)


def gpu0(name: str) -> str:
    """GPU 0's block of the 2x H200 machine's output (its GPU 1 is not on the H100 capture's node)."""
    return (H200 / name).read_text().split("GPU 1:")[0]


def with_counts(text: str, counts: dict) -> str:
    """The real `nvlink -e` block with some counters set: {(link, "CRC Errors"): n}."""
    for (link, counter), count in counts.items():
        text, found = re.subn(rf"(Link {link}: {counter}:) \d+", rf"\g<1> {count}", text)
        assert found == 1, (link, counter)
    return text


def verify_run(tmp_path, name: str, counts: dict, history: list) -> tuple:
    """(exit code, report, its NVLink row for GPU 0) of one run with GPU 0's counters at `counts`."""
    tree = drills.rebuild_sysfs(tmp_path / name / "tree")
    directory = drills.make(drills.DRILLS[0], tmp_path / name / "inject")
    (directory / "nvlink-s.stdout").write_text(gpu0("nvlink-s.stdout"))
    (directory / "nvlink-e.stdout").write_text(with_counts(gpu0("nvlink-e.stdout"), counts))
    out = tmp_path / name / "out"
    code = main(["verify", "--local", "--root", str(tree.root), "--inject", str(directory), "--no-bench",
                 "--format", "json,md", "--quiet", "--out", str(out), *history])
    report = json.loads((out / "report.json").read_text())
    rows = {r["check_id"]: r for r in report["results"]}
    return code, report, rows[NVLINK_ROW], (out / "report.md").read_text()


def test_the_second_run_judges_the_increase_per_minute_and_shows_the_count_since_driver_load(tmp_path,
                                                                                            monkeypatch):
    history = ["--history", str(tmp_path / "h.sqlite")]
    # First run: no earlier reading, so the counts since driver load are judged (any error WARNs, >100 FAILs).
    at(monkeypatch, T0)
    _, first, row, _ = verify_run(tmp_path, "first", {(0, "CRC Errors"): 40, (1, "Replay Errors"): 7}, history)
    assert row["status"] == "WARN", row["reason"]
    assert "link 0 CRC Errors 40 since driver load" in row["reason"]
    assert "link 1 Replay Errors 7 since driver load" in row["reason"]
    assert "errors_since_last_run" not in row["details"] and "errors_per_min" not in row["details"]

    # Three minutes later: CRC 40 -> 130 is 90 new errors, 30 a minute: a WARN under DCGM's 100 a second (130
    # since driver load alone would FAIL); the replay count is unchanged, so nothing is said of link 1.
    at(monkeypatch, "2026-11-22T08:03:00+00:00")
    _, second, row, markdown = verify_run(tmp_path, "second", {(0, "CRC Errors"): 130, (1, "Replay Errors"): 7},
                                          history)
    assert row["status"] == "WARN", row["reason"]
    assert "link 0 CRC Errors 90 in 3.0 min = 30.0/min (130 since driver load)" in row["reason"]
    assert "link 1" not in row["reason"]
    assert row["details"]["errors_since_last_run"]["0"]["CRC Errors"] == 90
    assert row["details"]["errors_per_min"]["0"]["CRC Errors"] == 30.0
    assert row["details"]["errors_interval_min"] == 3.0 and row["details"]["errors"]["0"]["CRC Errors"] == 130
    assert "90 in 3.0 min = 30.0/min (130 since driver load)" in markdown
    assert not [r for r in second["results"] if r["check_id"].startswith("history.")]  # nothing damaged

    # The counts went down (the driver was reloaded): judged whole again, since driver load.
    at(monkeypatch, "2026-11-22T08:10:00+00:00")
    _, _, row, _ = verify_run(tmp_path, "third", {(0, "CRC Errors"): 5}, history)
    assert row["status"] == "WARN" and "link 0 CRC Errors 5 since driver load" in row["reason"]
    assert " in " not in row["reason"].split("errors: ", 1)[1]


def test_a_replay_error_in_the_interval_fails_and_no_history_judges_since_driver_load(tmp_path, monkeypatch):
    history = ["--history", str(tmp_path / "h.sqlite")]
    at(monkeypatch, T0)
    verify_run(tmp_path, "first", {(2, "CRC Errors"): 3, (2, "Replay Errors"): 0}, history)
    # Ten minutes later: 2 replay errors (critical in DCGM's NVLink health watch at any rate) and 12,000 CRC
    # errors (1,200 a minute, well under DCGM's 100 a second: a WARN beside the FAIL).
    at(monkeypatch, "2026-11-22T08:10:00+00:00")
    code, _, row, _ = verify_run(tmp_path, "second", {(2, "CRC Errors"): 12_003, (2, "Replay Errors"): 2}, history)
    assert code == 1 and row["status"] == "FAIL" and row["details"]["action"] == "reboot"
    assert "link 2 Replay Errors 2 in 10.0 min = 0.2/min (2 since driver load)" in row["reason"]
    assert "link 2 CRC Errors 12000 in 10.0 min = 1200.0/min (12003 since driver load)" in row["reason"]
    assert row["details"]["thresholds"]["crc_errors_per_min"]["limit"] == 6000.0
    # CRC errors past 100 a second FAIL alone.
    at(monkeypatch, "2026-11-22T08:11:00+00:00")
    _, _, row, _ = verify_run(tmp_path, "third", {(2, "CRC Errors"): 20_003, (2, "Replay Errors"): 2}, history)
    assert row["status"] == "FAIL" and "CRC Errors 8000 in 1.0 min = 8000.0/min" in row["reason"]
    # --no-history: no earlier reading is known, whatever the history holds: the ceiling since driver load.
    _, _, row, _ = verify_run(tmp_path, "unrecorded", {(2, "CRC Errors"): 251}, ["--no-history"])
    assert row["status"] == "FAIL" and "link 2 CRC Errors 251 since driver load" in row["reason"]
    assert "/min" not in row["reason"]


def test_a_run_start_that_is_not_a_time_judges_the_increase_as_a_count(tmp_path, monkeypatch):
    path = tmp_path / "h.sqlite"
    at(monkeypatch, T0)
    verify_run(tmp_path, "first", {(0, "CRC Errors"): 40}, ["--history", str(path)])
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE runs SET started_at = 'yesterday'")
    db.close()
    _, report, row, _ = verify_run(tmp_path, "second", {(0, "CRC Errors"): 43}, ["--history", str(path)])
    assert row["status"] == "WARN" and "link 0 CRC Errors 3 since the last run (43 since driver load)" in row["reason"]
    (damaged,) = [r for r in report["results"] if r["check_id"] == "history.damaged"]
    assert "'yesterday' is not an ISO time" in damaged["reason"]


@pytest.mark.parametrize("body", ["not json", '{"0": 5}', '{"0": {"CRC Errors": -1}}', '[1, 2]',
                                  '{"0": {"CRC Errors": "9"}}'])
def test_a_damaged_counters_row_is_skipped_with_a_warning_and_the_run_goes_on(tmp_path, body):
    path = tmp_path / "h.sqlite"
    history = ["--history", str(path)]
    verify_run(tmp_path, "first", {(0, "CRC Errors"): 40}, history)
    db = sqlite3.connect(path)
    with db:
        assert db.execute("UPDATE counters SET body = ? WHERE check_id = ?", (body, NVLINK_ROW)).rowcount == 1
    db.close()
    _, report, row, _ = verify_run(tmp_path, "second", {(0, "CRC Errors"): 41}, history)
    assert row["status"] == "WARN" and "link 0 CRC Errors 41" in row["reason"]  # since driver load
    assert "since the last run" not in row["reason"]
    damaged = [r for r in report["results"] if r["check_id"] == "history.damaged"]
    assert len(damaged) == 1 and "counters.body" in damaged[0]["reason"]
    assert f"check {NVLINK_ROW}" in damaged[0]["reason"]


def test_a_history_whose_counters_cannot_be_read_costs_the_history_only(tmp_path):
    path = tmp_path / "h.sqlite"
    history = ["--history", str(path)]
    verify_run(tmp_path, "first", {(0, "CRC Errors"): 40}, history)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE counters")
    db.close()
    code, report, row, _ = verify_run(tmp_path, "second", {(0, "CRC Errors"): 41}, history)
    assert row["status"] == "WARN" and "link 0 CRC Errors 41" in row["reason"]
    assert "since the last run" not in row["reason"]
    recorded = [r for r in report["results"] if r["check_id"] == "history.record"]
    assert len(recorded) == 1 and "no such table: counters" in recorded[0]["reason"]


# ---- InfiniBand: the real check's details, kept and given back ------------------------------------


def ib_tree(tmp_path, symbol_errors: int, flaps: int = 0) -> Node:
    """The ConnectX-7 ports of the real H100 RoCE ibstat (leptonai/gpud testdata) with one port's symbol
    error and link_downed counters as the kernel exposes them (drivers/infiniband/core/sysfs.c, one number per
    file)."""
    tree = drills.ibstat_to_sysfs((drills.PUBLIC / "ibstat_healthy_gpud-h100-roce-cx7-all-active.txt").read_text(),
                                  FakeTree(tmp_path / f"ib{symbol_errors}-{flaps}"))
    tree.write("/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error", f"{symbol_errors}\n")
    tree.write("/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", f"{flaps}\n")
    return Node(root=str(tree.root))


def test_ib_counters_are_kept_from_the_check_and_judged_per_minute_by_the_next_run(tmp_path):
    node = ib_tree(tmp_path, 4)
    first = {r.check_id: r for r in health_ib.run({}, node)}["health.ib.mlx5_0/1"]
    assert first.status is Status.WARN and "symbol_error 4 since driver load" in first.reason
    kept = counters_of(first)
    assert kept == {"symbol_error": 4, "link_downed": 0}

    with open_store(str(tmp_path / "h.sqlite")) as store:
        store.record(RunRecord("gpu-07", T0, "local", "r1", "WARN", 0, [], {}, counters={first.check_id: kept}))
        previous, read_at = previous_reading(store, "gpu-07")
        assert previous_counters(store, "gpu-07") == previous and store.warnings == []
    assert previous == {"health.ib.mlx5_0/1": {"symbol_error": 4, "link_downed": 0}}
    assert read_at == 1_795_334_400.0  # 2026-11-22T08:00:00Z

    # 12 more symbol errors and one flap, read 3 minutes after the kept reading: 4 a minute is past IBTA's 2,
    # and a flap in less than 6 hours FAILs; the action is the cable's.
    node = ib_tree(tmp_path, 16, flaps=1)
    remember_previous(node, previous, read_at, read_at + 180)
    second = {r.check_id: r for r in health_ib.run({}, node)}["health.ib.mlx5_0/1"]
    assert second.status is Status.FAIL and second.details["action"] == "drain-rma"
    assert "symbol_error 12 in 3.0 min = 4.0/min (16 since driver load)" in second.reason
    assert "link_downed 1 in 3.0 min = 0.3/min (1 since driver load)" in second.reason
    assert second.details["counters_since_driver_load"] == {"symbol_error": 16, "link_downed": 1}
    assert second.details["counters_per_min"] == {"symbol_error": 4.0, "link_downed": 0.3333}
    assert second.expected.endswith("errors <= 2/min, flaps <= 0.00278/min")

    # The same 12 errors spread over an hour are 0.2 a minute: a WARN to watch, not a drain.
    node = ib_tree(tmp_path, 16)
    remember_previous(node, previous, read_at, read_at + 3600)
    later = {r.check_id: r for r in health_ib.run({}, node)}["health.ib.mlx5_0/1"]
    assert later.status is Status.WARN and later.details["action"] == "watch"
    assert "symbol_error 12 in 60.0 min = 0.2/min (16 since driver load)" in later.reason


def test_counters_of_keeps_only_whole_counts_of_checks_that_carry_them():
    nvlink = CheckResult(NVLINK_ROW, "health", Status.PASS, details={
        "errors": {"0": {"CRC Errors": 3, "Replay Errors": True, "Odd": -2}, "1": {"Note": "n/a"}},
        "links_gbps": {"0": 26.562}})
    assert counters_of(nvlink) == {"0": {"CRC Errors": 3}}
    memory = CheckResult("health.gpu.memory.0", "health", Status.PASS, details={"readings": {
        "ecc.mode.current": "Enabled", "ecc.errors.uncorrected.volatile.total": "0",
        "ecc.errors.uncorrected.aggregate.total": "12", "remapped_rows.pending": "No",
        "remapped_rows.uncorrectable": "[N/A]"}})
    assert counters_of(memory) == {"ecc.errors.uncorrected.volatile.total": 0,
                                   "ecc.errors.uncorrected.aggregate.total": 12}
    assert counters_of(CheckResult("health.nvlink", "health", Status.SKIP, details={"errors": {"0": {"a": 1}}})) \
        is None
    assert counters_of(CheckResult("sysctl.vm.swappiness", "sysctl", Status.PASS, details={"counters": {"a": 1}})) \
        is None
