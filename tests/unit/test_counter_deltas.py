"""Issue 26 item 3, counters: NVLink and IB error counters are judged as their increase since the node's last
recorded run, with the count since driver load beside it; the first run (or one after a driver reload, or
without a history) judges the count since driver load. Through the whole `tunefleet verify --local --root TREE
--inject DIR` (tests/helpers/drills.py: the real H100 capture), twice, with the real 2x H200 machine's
`nvidia-smi nvlink -s` / `-e` for GPU 0 and its CRC / replay counts raised between the runs, as the drills
plant a fault into a real output."""
from __future__ import annotations

import json
import re
import sqlite3

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import FakeTree
from verify.checks import health_ib
from verify.cli import main
from verify.history.record import counters_of, previous_counters
from verify.history.store import RunRecord, open_store
from verify.node import Node
from verify.result import CheckResult, Status

H200 = drills.HEALTH / "h200x2" / "cmd"
NVLINK_ROW = "health.nvlink.0"


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


def test_the_second_run_judges_the_increase_and_shows_the_count_since_driver_load(tmp_path):
    history = ["--history", str(tmp_path / "h.sqlite")]
    # First run: no earlier reading, so the counts since driver load are judged (any error WARNs, >100 FAILs).
    _, first, row, _ = verify_run(tmp_path, "first", {(0, "CRC Errors"): 40, (1, "Replay Errors"): 7}, history)
    assert row["status"] == "WARN", row["reason"]
    assert "link 0 CRC Errors 40" in row["reason"] and "link 1 Replay Errors 7" in row["reason"]
    assert "since the last run" not in row["reason"] and "errors_since_last_run" not in row["details"]

    # Second run: CRC 40 -> 130 is 90 new errors (a WARN; 130 since driver load would FAIL); replay unchanged.
    _, second, row, markdown = verify_run(tmp_path, "second", {(0, "CRC Errors"): 130, (1, "Replay Errors"): 7},
                                          history)
    assert row["status"] == "WARN", row["reason"]
    assert "link 0 CRC Errors 90 since the last run (130 since driver load)" in row["reason"]
    assert "link 1" not in row["reason"]  # 7 then 7: nothing new
    assert row["details"]["errors_since_last_run"]["0"]["CRC Errors"] == 90
    assert row["details"]["errors"]["0"]["CRC Errors"] == 130
    assert "90 since the last run (130 since driver load)" in markdown
    assert not [r for r in second["results"] if r["check_id"].startswith("history.")]  # nothing damaged

    # Third run: the counts went down (the driver was reloaded): judged whole again, since driver load.
    _, _, row, _ = verify_run(tmp_path, "third", {(0, "CRC Errors"): 5}, history)
    assert row["status"] == "WARN" and "link 0 CRC Errors 5" in row["reason"]
    assert "since the last run" not in row["reason"]


def test_the_increase_past_the_ceiling_fails_and_no_history_judges_since_driver_load(tmp_path):
    history = ["--history", str(tmp_path / "h.sqlite")]
    verify_run(tmp_path, "first", {(2, "CRC Errors"): 3}, history)
    code, _, row, _ = verify_run(tmp_path, "second", {(2, "CRC Errors"): 250}, history)
    assert code == 1 and row["status"] == "FAIL" and row["details"]["action"] == "reboot"
    assert "link 2 CRC Errors 247 since the last run (250 since driver load)" in row["reason"]
    # --no-history: no earlier reading is known, whatever the history holds.
    _, _, row, _ = verify_run(tmp_path, "unrecorded", {(2, "CRC Errors"): 251}, ["--no-history"])
    assert row["status"] == "FAIL" and "link 2 CRC Errors 251" in row["reason"]
    assert "since the last run" not in row["reason"]


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


def ib_tree(tmp_path, symbol_errors: int) -> Node:
    """The ConnectX-7 ports of the real H100 RoCE ibstat (leptonai/gpud testdata) with one port's symbol
    error counter as the kernel exposes it (drivers/infiniband/core/sysfs.c, one number per file)."""
    tree = drills.ibstat_to_sysfs((drills.PUBLIC / "ibstat_healthy_gpud-h100-roce-cx7-all-active.txt").read_text(),
                                  FakeTree(tmp_path / f"ib{symbol_errors}"))
    tree.write("/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error", f"{symbol_errors}\n")
    tree.write("/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", "0\n")
    return Node(root=str(tree.root))


def test_ib_counters_are_kept_from_the_check_and_judged_as_the_increase_by_the_next_run(tmp_path):
    node = ib_tree(tmp_path, 4)
    first = {r.check_id: r for r in health_ib.run({}, node)}["health.ib.mlx5_0/1"]
    assert first.status is Status.WARN and "symbol_error 4" in first.reason
    kept = counters_of(first)
    assert kept == {"symbol_error": 4, "link_downed": 0}

    with open_store(str(tmp_path / "h.sqlite")) as store:
        store.record(RunRecord("gpu-07", "2026-11-22T00:00:00+00:00", "local", "r1", "WARN", 0, [], {},
                               counters={first.check_id: kept}))
        previous = previous_counters(store, "gpu-07")
        assert store.warnings == []
    assert previous == {"health.ib.mlx5_0/1": {"symbol_error": 4, "link_downed": 0}}

    node = ib_tree(tmp_path, 9)
    node.memo["previous_counters"] = previous
    second = {r.check_id: r for r in health_ib.run({}, node)}["health.ib.mlx5_0/1"]
    assert second.status is Status.WARN and "symbol_error 5 since the last run (9 since driver load)" in second.reason
    assert second.details["counters_since_driver_load"] == {"symbol_error": 9, "link_downed": 0}


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
