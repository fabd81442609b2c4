"""A node judged against its own past: the regression rule, drift, and a real benchmark run (the 2x H200
host-copy capture through the real Node) judged against recorded runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import fixture, output, scripted_node

from verify.bench import hostcopy
from verify.history import record, regress
from verify.history.store import Measurement, PastRun, RunRecord, open_store
from verify.report import build_report
from verify.result import CheckResult, Status

GPU_REPORT = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "gpu_machine_report.json"


def past(*values, check="bench.nccl_allreduce", config=None) -> list:
    """Past runs newest first, as the store returns them."""
    return [PastRun(i, f"2026-11-{20 - i:02d}T00:00:00+00:00", {check: v}, config) for i, v in enumerate(values)]


def test_a_figure_more_than_10_percent_below_its_median_is_a_warn_naming_both():
    found = regress.find_regressions("gpu-01", {"bench.nccl_allreduce": 300.0}, past(340, 338, 345, 341, 336),
                                     regress.Settings(), {"bench.nccl_allreduce": ("GB/s", True)})
    assert len(found) == 1
    row = found[0].to_result()
    assert row.status == Status.WARN and row.check_id == "history.regression.bench.nccl_allreduce"
    assert row.reason == ("bench.nccl_allreduce 300 GB/s, was 340 GB/s over the last 5 runs "
                          "(12% lower; more than 10% is a regression)")
    assert row.observed == 300.0 and "340" in row.expected


def test_the_limit_and_the_window_are_the_settings():
    history = past(340, 338, 345, 341, 336, 100, 100)  # two old bad runs beyond the window of 5
    within = regress.find_regressions("h", {"bench.nccl_allreduce": 320.0}, history, regress.Settings(), {})
    assert within == []  # 5.9 % below: inside the default 10 %
    tight = regress.find_regressions("h", {"bench.nccl_allreduce": 320.0}, history, regress.Settings(percent=5), {})
    assert [r.baseline for r in tight] == [340.0]
    wide = regress.find_regressions("h", {"bench.nccl_allreduce": 320.0}, history, regress.Settings(runs=7), {})
    assert [r.baseline for r in wide] == []  # median of 7 runs including the bad ones is 338: 5.3 % off


def test_fewer_than_three_past_runs_make_no_baseline():
    assert regress.find_regressions("h", {"bench.nccl_allreduce": 100.0}, past(340, 340), regress.Settings(), {}) == []
    assert regress.find_regressions("h", {"bench.nccl_allreduce": 100.0}, past(340, 340, 340),
                                    regress.Settings(), {})


def test_lower_is_better_figures_regress_upwards():
    lat = {"bench.rdma.mlx5_0.ib_write_lat": ("usec", False)}
    history = past(2.0, 2.1, 1.9, check="bench.rdma.mlx5_0.ib_write_lat")
    slower = regress.find_regressions("h", {"bench.rdma.mlx5_0.ib_write_lat": 2.5}, history, regress.Settings(), lat)
    faster = regress.find_regressions("h", {"bench.rdma.mlx5_0.ib_write_lat": 1.0}, history, regress.Settings(), lat)
    assert [r.reason().split(" (")[1] for r in slower] == ["25% higher; more than 10% is a regression)"]
    assert faster == []


def test_a_changed_config_value_is_drift_with_both_values():
    before = past(1, config={"sysctl.vm.swappiness": "0", "facts.kernel": "6.1.0-26"})[0]
    found = regress.find_drift("h", {"sysctl.vm.swappiness": "60", "facts.kernel": "6.1.0-26", "new.check": "x"},
                               before)
    assert [d.to_result().reason for d in found] == [
        "sysctl.vm.swappiness changed since the last run (2026-11-20T00:00:00+00:00): was '0', now '60'"]


@pytest.mark.parametrize("percent, runs", [(0, 5), (100, 5), (float("nan"), 5), (10, 0)])
def test_bad_settings_are_refused_naming_the_option(percent, runs):
    with pytest.raises(ValueError, match="--regression-"):
        regress.Settings(percent, runs).validate()


def test_a_broken_measurement_is_not_recorded_as_a_figure():
    broken = CheckResult("bench.h2d.gpu0", "bench", Status.ERROR, observed=9999.0, reason="measurement broken")
    fine = CheckResult("bench.h2d.gpu1", "bench", Status.PASS, observed=55.2)
    kept = {m.check_id: m.value for m in record.measurements_of([broken, fine])}
    assert kept == {"bench.h2d.gpu0": None, "bench.h2d.gpu1": 55.2}


def _real_hostcopy_report(monkeypatch, host="gpu-01") -> dict:
    """The 2x H200 capture (H2D 55.4 GB/s) through the real benchmark module and the real Node."""
    monkeypatch.setattr(hostcopy, "module_available", lambda name: True)
    node = scripted_node(lambda argv: output(argv, stdout=fixture("h200x2_hostcopy.stdout")))
    results = hostcopy.run(None, None, node, {"tries": 1})
    captured = json.loads(GPU_REPORT.read_text())  # the same machine's facts and desired state
    run = dict(captured["run"], started_at="2026-11-22T10:00:00+00:00")
    return build_report(captured["desired_state"], dict(captured["facts"], host=host), results, run)


def test_a_real_run_below_its_recorded_past_gets_the_warn_and_is_recorded(tmp_path, monkeypatch):
    report = _real_hostcopy_report(monkeypatch)
    assert all(r["status"] in ("PASS", "SKIP") for r in report["results"])  # clears the PCIe floor
    with open_store(str(tmp_path / "h.sqlite")) as store:
        for day in range(3):  # three earlier runs at 64 GB/s on GPU 0
            store.record(RunRecord("gpu-01", f"2026-11-1{day}T00:00:00+00:00", "local", f"old{day}", "PASS", 0,
                                   [Measurement("bench.h2d.gpu0", "PASS", 64.0, "GB/s"),
                                    Measurement("bench.h2d.gpu1", "PASS", 55.3, "GB/s")], {}))
        rows = record.judge_and_record(store, report, regress.Settings())
        assert [r.check_id for r in rows] == ["history.regression.bench.h2d.gpu0"]
        assert rows[0].reason.startswith("bench.h2d.gpu0 55.44 GB/s, was 64 GB/s over the last 3 runs (13% lower")
        newest = store.past_runs("gpu-01", 1)[0]
        assert newest.values["bench.h2d.gpu0"] == pytest.approx(55.44)
    record.add_results(report, rows)
    assert report["summary"]["counts"]["WARN"] == 1 and report["summary"]["exit_code"] == 0


def test_the_fleet_pass_judges_every_hosts_latest_run(tmp_path):
    with open_store(str(tmp_path / "h.sqlite")) as store:
        runs = []
        for n, host in enumerate(["a", "b", "c"]):
            for i in range(6):
                value = 340.0 if not (host == "b" and i == 5) else 300.0
                runs.append(RunRecord(host, f"2026-11-1{i}T00:00:0{n}+00:00", "fleet", f"run{i}", "PASS", 0,
                                      [Measurement("bench.nccl_allreduce", "PASS", value, "GB/s")],
                                      {"facts.kernel": "6.1" if (host, i) != ("c", 5) else "6.2"}))
        store.record_many(runs)
        regressions, drift = record.fleet_pass(store, regress.Settings())
        assert [(r.host, r.value, r.baseline) for r in regressions] == [("b", 300.0, 340.0)]
        assert [(d.host, d.before, d.after) for d in drift] == [("c", "6.1", "6.2")]
        # Judged at an earlier fleet run, nothing had regressed yet.
        assert record.fleet_pass(store, regress.Settings(), run_key="run4") == ([], [])


def test_the_node_report_carries_its_trend_and_its_html_draws_it(tmp_path, monkeypatch):
    from verify.cli import build_parser
    from verify.history.cli import finish_local, prepare
    from verify.node import Node
    from verify.report import render

    path = str(tmp_path / "h.sqlite")
    with open_store(path) as store:
        for day in range(3):
            store.record(RunRecord("gpu-01", f"2026-11-1{day}T00:00:00+00:00", "local", f"old{day}", "PASS", 0,
                                   [Measurement("bench.h2d.gpu0", "PASS", 64.0, "GB/s")], {}))
    report = _real_hostcopy_report(monkeypatch)
    finish_local(prepare(build_parser().parse_args(["verify", "--local", "--history", path])), report, Node())
    points = report["history"]["trend"]["bench.h2d.gpu0"]["points"]
    assert [p[2] for p in points] == [64.0, 64.0, 64.0, pytest.approx(55.44)] and report["history"]["runs"] == 4
    assert "history.regression.bench.h2d.gpu0" in {r["check_id"] for r in report["results"]}
    page = render(report, "html")
    section = page[page.index('<section id="history">'):]
    # a trend is drawn only for a figure with 3 runs or more (issue 32): GPU 0's H2D, 4 runs
    assert section.count('<svg class="plot"') == 1
    assert section.count('class="run"') == 4
