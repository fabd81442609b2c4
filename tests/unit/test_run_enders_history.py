"""Issue 27's run-enders through the real CLI (`verify.cli.main` on a fake root): a damaged history, a
history in a read-only directory, a renderer that fails on the report and a hardware detection that
raises each cost only their own part. The reports are written, each failure is reported once, and no
traceback ends the run; `tunefleet history` shows what it can of damaged rows with a WARN naming them."""
from __future__ import annotations

import json
import sqlite3

import verify.report.markdown
from tests.helpers.fake_node import sysctl_node
from tests.helpers.replay import ReplayRunner
from verify.cli import main
from verify.history.store import Measurement, RunRecord, open_store
from verify.local_run import run_benchmarks
from verify.node import Node

HOST = "gpu-07"


def verify_local(tmp_path, *extra, formats="json,md") -> tuple:
    spec, tree = sysctl_node(tmp_path, HOST)
    out = tmp_path / "out"
    code = main(["verify", "--local", "--spec", str(spec), "--root", str(tree.root), "--out", str(out),
                 "--no-bench", "--format", formats, "--quiet", *extra])
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    return code, report, out


def history_rows(report: dict) -> dict:
    return {r["check_id"]: r for r in report["results"] if r["role"] == "history"}


def damaged_history(tmp_path) -> str:
    """Four runs of gpu-07 with figures, then damaged by hand: a figure that is text, a config that is not JSON."""
    path = str(tmp_path / "h.sqlite")
    with open_store(path) as store:
        for i in range(4):
            store.record(RunRecord(HOST, f"2026-11-2{i}T00:00:00+00:00", "local", f"r{i}", "PASS", 0,
                                   [Measurement("bench.h2d.gpu0", "PASS", 55.0 + i, "GB/s")],
                                   {"sysctl.vm.swappiness": "0"}))
    db = sqlite3.connect(path)
    db.execute("UPDATE measurements SET value = 'fast' WHERE run_id = 2")
    db.execute("UPDATE config_sets SET body = '{\"truncated'")
    db.commit()
    db.close()
    return path


def test_damaged_history_rows_cost_one_warn_and_the_reports_are_written(tmp_path, capsys):
    path = damaged_history(tmp_path)
    code, report, out = verify_local(tmp_path, "--history", path)
    assert code == 0 and (out / "report.md").exists()  # the WARN does not change the node's verdict
    rows = history_rows(report)
    assert list(rows) == ["history.damaged"]
    reason = rows["history.damaged"]["reason"]
    assert f"history {path}: run 2, check bench.h2d.gpu0: field measurements.value is 'fast'" in reason
    assert "field config_sets.body is '{\"truncated'" in reason
    assert "Traceback" not in capsys.readouterr().err
    runs = sqlite3.connect(path).execute("SELECT count(*) FROM runs").fetchone()[0]
    assert runs == 5  # the run itself is recorded


def test_a_history_whose_tables_are_broken_is_one_warn_and_the_reports_are_written(tmp_path):
    path = damaged_history(tmp_path)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE acks")  # the lookback cannot be read: the run judges since boot, unrecorded
    db.commit()
    db.close()
    code, report, out = verify_local(tmp_path, "--history", path)
    assert code == 0 and (out / "report.md").exists()
    rows = history_rows(report)
    assert list(rows) == ["history.record"] and rows["history.record"]["status"] == "WARN"
    assert "no such table: acks" in rows["history.record"]["reason"]
    assert report["run"]["lookback"]["source"] == "boot"


def test_a_history_in_a_read_only_directory_is_one_message_and_the_reports_are_written(tmp_path, capsys):
    # /sys refuses new files to everyone, root included: a real read-only directory that needs no cleanup.
    path = "/sys/tunefleet-test-history.sqlite"
    code, report, out = verify_local(tmp_path, "--history", path)
    assert code == 0 and (out / "report.md").exists()  # exit code as without history
    rows = history_rows(report)
    assert list(rows) == ["history.record"] and rows["history.record"]["status"] == "WARN"
    assert rows["history.record"]["reason"].startswith(f"history {path}: cannot create it in /sys: ")
    assert "Traceback" not in capsys.readouterr().err


def test_tunefleet_history_shows_damaged_rows_with_a_warn_naming_file_and_field(tmp_path, capsys):
    path = damaged_history(tmp_path)
    for fmt in ("table", "csv", "json", "html"):
        assert main(["history", "--history", path, "--host", HOST, "--format", fmt]) == 0
        captured = capsys.readouterr()
        assert f"WARN history {path}: run 2, check bench.h2d.gpu0: field measurements.value is 'fast'" \
            in captured.err, fmt
    assert main(["history", "--history", path, "--regressions"]) == 0
    assert "field config_sets.body" in capsys.readouterr().err


def test_a_renderer_that_fails_costs_its_own_format_only(tmp_path, capsys, monkeypatch):
    def broken(report):
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setattr(verify.report.markdown, "render", broken)
    code, report, out = verify_local(tmp_path, "--no-history", formats="md,json,prom")
    assert code == 0 and report is not None and (out / "tunefleet.prom").exists()
    assert not (out / "report.md").exists()
    err = capsys.readouterr().err
    assert err.count("md: not written, its renderer failed on this report: TypeError") == 1


def test_a_hardware_detection_error_is_the_benchmark_phases_error_with_a_named_profile(monkeypatch):
    # detect() turns what it reads into reasons (an unreadable nvlink speed: test_bench_registry.py); a bug
    # in it (here a KeyError planted in the real detect's first read) must still end as one ERROR row.
    from verify.facts import hardware

    def broken_query(node):
        raise KeyError("gpus")

    monkeypatch.setattr(hardware, "query_gpus", broken_query)
    node = Node(runner=ReplayRunner({}))
    record: dict = {}
    rows = run_benchmarks({"verify": {"profile": "h100-sxm-8x"}}, node, {}, ["hostcopy"], record)
    assert [(r.check_id, r.status.value) for r in rows] == [("bench", "ERROR")]
    assert rows[0].reason.startswith("hardware detection failed: KeyError")
    assert record["reason"] == rows[0].reason
