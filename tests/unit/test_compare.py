"""`tunefleet compare A B` (issue 51) on recorded fleets: the project's synthetic fleet (the real CI node report
with the real two-node all-reduce result, verify.fleet.synthetic) and the real GPU node reports with the real
engine rows (tests/unit/test_fleet_baseline.py's fleet of 2x H200 and 1x H100 hosts), and on the history store.
Every comparison runs through the real command line; the document is checked against its schema."""
from __future__ import annotations

import copy
import datetime
import json
import random
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verify import cli
from verify.bench import gpu
from verify.fleet import compare
from verify.fleet.synthetic import derive_hosts, write_fleet
from verify.history.store import Measurement, RunRecord, open_store
from verify.history.window import parse_window

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "fleet"
SCHEMA = json.loads((ROOT / "verify" / "schema" / "fleet_compare.v1.json").read_text())
ALLREDUCE = "fleet.nccl_allreduce_multinode"


def base() -> tuple:
    report = json.loads((FIXTURES / "node_report_ci_vm.json").read_text())
    measurement = json.loads((FIXTURES / "crossnode_allreduce_gloo_2node.json").read_text())[0]
    return report, measurement


def scaled(measurement: dict, factor: float) -> dict:
    out = copy.deepcopy(measurement)
    for point in out["details"].get("curve", []):
        point["busbw_gbps"] *= factor
    out["observed"] *= factor
    out["details"]["value"] = out["observed"]
    return out


def synthetic_run(directory: Path, seed: int, factor: float = 1.0, slow: dict = None, hosts: int = 100) -> Path:
    """hosts copies of the real report, all-reduce at 1 % noise (verify.fleet.synthetic) times factor; slow:
    host index -> (factor, driver, rmem_max) planted on that host alone."""
    report, measurement = base()
    reports = derive_hosts(report, scaled(measurement, factor), hosts, seed=seed)
    for index, (factor_alone, driver, rmem_max) in (slow or {}).items():
        for result in reports[index]["results"]:
            if result["check_id"] == ALLREDUCE:
                result["observed"] *= factor_alone
                result["details"]["value"] = result["observed"]
            if result["check_id"] == "sysctl.net.core.rmem_max":
                result["observed"] = rmem_max
        reports[index]["facts"]["gpus"]["driver_version"] = driver
    write_fleet(directory, reports)
    return directory


def run_compare(tmp_path: Path, before: Path, after: Path, *extra: str) -> tuple:
    out = tmp_path / "out"
    code = cli.main(["compare", str(before), str(after), "--out", str(out), "--quiet", *extra])
    document = json.loads((out / "compare.json").read_text()) if (out / "compare.json").exists() else None
    if document is not None:
        jsonschema.validate(document, SCHEMA)
    return code, document, out


def the_figure(document: dict, name: str) -> dict:
    return next(f for f in document["figures"] if f["figure"] == name)


def test_a_planted_3_percent_drop_of_the_allreduce_on_100_hosts_is_found_with_its_interval(tmp_path):
    before = synthetic_run(tmp_path / "before", seed=1)
    after = synthetic_run(tmp_path / "after", seed=2, factor=0.97)
    code, document, out = run_compare(tmp_path, before, after)
    assert code == 1  # a significant regression: a fleet image's CI gates on it
    allreduce = the_figure(document, ALLREDUCE)
    assert allreduce["regression"] and allreduce["direction"] == "worse"
    assert allreduce["low_percent"] < -3.0 < allreduce["high_percent"] < 0
    assert allreduce["before"]["samples"] == allreduce["after"]["samples"] == 100
    assert document["verdict"] == dict(document["verdict"], regression=True, regressed_figures=1, exit_code=1)
    assert not any(n["apart_from_fleet"] for n in document["nodes"])  # the whole fleet moved, no node alone
    text = (out / "compare.md").read_text()
    assert "REGRESSION" in text and ALLREDUCE in text and "Hodges-Lehmann" in text


def test_a_planted_slow_node_among_identical_ones_is_named_with_what_differs_on_it(tmp_path):
    before = synthetic_run(tmp_path / "before", seed=1)
    after = synthetic_run(tmp_path / "after", seed=2, slow={17: (0.9, "575.57.08", "212992")})
    code, document, _ = run_compare(tmp_path, before, after)
    assert code == 0  # one node is no fleet regression
    assert not the_figure(document, ALLREDUCE)["significant"]
    slow = document["nodes"][0]
    assert slow["host"] == "gpu-00017" and slow["worse"] and slow["apart_from_fleet"]
    assert slow["figures"][0]["change_percent"] == pytest.approx(-10, abs=4)
    assert slow["figures"][0]["noise_source"] == "fleet"
    differences = {d["key"]: (d["before"], d["after"]) for d in slow["differences"]}
    assert differences["facts.gpus.driver_version"] == ("580.159.04", "575.57.08")
    assert differences["sysctl.net.core.rmem_max"] == ("4194304", "212992")  # the tuned value, from its report
    assert [n["host"] for n in document["nodes"] if n["apart_from_fleet"]] == ["gpu-00017"]
    assert {"key": "facts.gpus.driver_version", "before": "580.159.04", "after": "575.57.08", "hosts": 1,
            "examples": ["gpu-00017"]} in document["changes"]
    # --fail-on-nodes gates on the node as well
    assert run_compare(tmp_path, before, after, "--fail-on-nodes")[0] == 1


def test_two_runs_of_one_fleet_raise_no_finding(tmp_path):
    before = synthetic_run(tmp_path / "before", seed=1)
    after = synthetic_run(tmp_path / "after", seed=2)
    code, document, _ = run_compare(tmp_path, before, after)
    assert code == 0
    assert document["nodes"] == [] and document["verdict"]["significant_figures"] == 0


def test_min_shift_keeps_a_significant_but_small_drop_from_failing(tmp_path):
    before = synthetic_run(tmp_path / "before", seed=1)
    after = synthetic_run(tmp_path / "after", seed=2, factor=0.97)
    code, document, _ = run_compare(tmp_path, before, after, "--min-shift", "5")
    assert code == 0
    allreduce = the_figure(document, ALLREDUCE)
    assert allreduce["significant"] and not allreduce["regression"]


# ---- the real GPU node reports --------------------------------------------------------------------------

@pytest.fixture
def gpu_fleets(tmp_path, monkeypatch):
    from tests.unit import test_fleet_baseline as recorded

    monkeypatch.setattr(gpu, "module_available", lambda name: True)
    before = recorded.write_fleet(tmp_path / "gpu-before", seed=1)
    after = recorded.write_fleet(tmp_path / "gpu-after", seed=2, slow={"h200-03": 0.85})
    return before, after


def test_real_gpu_reports_name_the_slow_node_per_figure_and_group_by_hardware(tmp_path, gpu_fleets):
    code, document, _ = run_compare(tmp_path, *gpu_fleets)
    assert code == 0
    hardware = {f["hardware"] for f in document["figures"]}
    assert hardware == {"h200-x2-nvlink", "1x NVIDIA H100 80GB HBM3"}  # H100s never judged against H200s
    h100 = [f for f in document["figures"] if f["hardware"].startswith("1x")]
    assert all(f["p_value"] is None and "fewer than 5" in f["note"] for f in h100)  # 4 hosts: not tested
    slow = document["nodes"][0]
    assert slow["host"] == "h200-03" and slow["apart_from_fleet"]
    # 6 hosts give the fleet's noise 5 degrees of freedom: each HBM figure 15 % down, at least one called
    assert any(m["figure"].startswith("bench.gpu_hbm.") for m in slow["figures"] if m["apart_from_fleet"])
    assert all(m["direction"].startswith("worse") for m in slow["figures"])


# ---- the history store ---------------------------------------------------------------------------------

def record_history(path: Path, drop_from: int = 3, drop: float = 0.97, hosts: int = 12, runs: int = 6) -> None:
    """runs per host, a day apart from 2026-11-01; from run drop_from on, the all-reduce at drop and the driver
    upgraded; 1 % noise."""
    rng = random.Random(5)
    records = []
    for index in range(runs):
        for host_index in range(hosts):
            factor = drop if index >= drop_from else 1.0
            value = 100.0 * factor * rng.gauss(1, 0.01)
            driver = "580.159.04" if index >= drop_from else "575.57.08"
            records.append(RunRecord(
                host=f"node-{host_index:02d}", started_at=f"2026-11-{index + 1:02d}T06:00:00+00:00", source="fleet",
                run_key=f"run-{index}", worst="PASS", exit_code=0,
                measurements=[Measurement(ALLREDUCE, "PASS", value, "GB/s", True),
                              Measurement("bench.h2d.gpu0", "PASS", 50.0 * rng.gauss(1, 0.01), "GB/s", True)],
                config={"facts.gpus.driver_version": driver, "sysctl.vm.swappiness": "10"}))
    with open_store(str(path)) as store:
        store.record_many(records)


def test_two_windows_of_the_history_find_the_drop_and_the_driver_that_changed(tmp_path):
    history = tmp_path / "history.sqlite"
    record_history(history)
    out = tmp_path / "out"
    code = cli.main(["compare", "..2026-11-04", "2026-11-04..", "--history", str(history), "--out", str(out),
                     "--quiet"])
    document = json.loads((out / "compare.json").read_text())
    jsonschema.validate(document, SCHEMA)
    assert code == 1
    allreduce = the_figure(document, ALLREDUCE)
    assert allreduce["regression"] and allreduce["before"]["samples"] == 12  # one sample per host, not per run
    assert not the_figure(document, "bench.h2d.gpu0")["significant"]
    assert document["changes"][0] == {"key": "facts.gpus.driver_version", "before": "575.57.08",
                                      "after": "580.159.04", "hosts": 12, "examples": [
                                          "node-00", "node-01", "node-02", "node-03", "node-04"]}
    assert document["before"]["kind"] == "history window"


def test_one_hosts_runs_before_and_after_a_date_are_its_samples(tmp_path):
    history = tmp_path / "history.sqlite"
    record_history(history, drop_from=10, runs=20, hosts=2)
    out = tmp_path / "out"
    code = cli.main(["compare", "..2026-11-11", "2026-11-11..", "--history", str(history), "--host", "node-01",
                     "--out", str(out), "--quiet"])
    document = json.loads((out / "compare.json").read_text())
    assert code == 1
    allreduce = the_figure(document, ALLREDUCE)
    assert allreduce["before"]["samples"] == allreduce["after"]["samples"] == 10
    assert document["nodes"] == [] and "its runs are the samples" in document["notes"][0]


def test_two_run_directories_take_each_hosts_own_noise_from_the_history(tmp_path):
    before = synthetic_run(tmp_path / "run-a", seed=1, hosts=20)
    after = synthetic_run(tmp_path / "run-b", seed=2, hosts=20, slow={3: (0.95, "580.159.04", "4194304")})
    history = tmp_path / "history.sqlite"
    with open_store(str(history)) as store:  # gpu-00003 measured itself 10 times to within 0.3 %, run-a the last
        store.record_many([RunRecord("gpu-00003", f"2026-11-{i + 1:02d}T00:00:00+00:00", "fleet",
                                     "run-a" if i == 9 else f"old-{i}", "PASS", 0,
                                     [Measurement(ALLREDUCE, "PASS", 0.6328 * (1 + 0.001 * (i % 3 - 1)), "GB/s",
                                                  True)], {}) for i in range(10)])
    code, document, _ = run_compare(tmp_path, before, after, "--history", str(history))
    moved = {n["host"]: n for n in document["nodes"]}
    own = moved["gpu-00003"]["figures"][0]
    assert own["noise_source"] == "own" and own["beyond_noise"]
    assert own["noise_percent"] < 0.2  # its own noise, not the fleet's 1.4 %
    assert {n["host"] for n in document["nodes"]} == {"gpu-00003"}


# ---- health, windows, bad input ----------------------------------------------------------------------------

def test_the_health_figure_counts_each_fail_by_what_its_action_costs():
    tally = compare.HealthTally()
    for status, action in (("PASS", None),) * 90 + (("WARN", None),) * 6 + (("FAIL", "reboot"), ("FAIL", None),
                                                                           ("ERROR", None), ("SKIP", None)):
        tally.add(status, action)
    health = tally.to_dict("test")
    assert health["good"] == 96 and health["failed"] == 2 and health["fail_cost"] == 5 and health["errors"] == 1
    assert health["value"] == pytest.approx(100 * 96 / (96 + 5), abs=1e-3)


iso_days = st.dates(min_value=datetime.date(2000, 1, 1), max_value=datetime.date(2099, 12, 31))


@settings(max_examples=80, deadline=None)
@given(day=iso_days, hour=st.integers(0, 23), offset=st.sampled_from(["", "Z", "+00:00", "+02:00", "-05:30"]),
       form=st.sampled_from(["date", "datetime"]), end_open=st.booleans())
def test_a_window_is_read_in_every_iso_form_as_utc(day, hour, offset, form, end_open):
    dt = datetime
    text = day.isoformat() if form == "date" else f"{day.isoformat()}T{hour:02d}:00:00{offset}"
    window = parse_window(f"{text}.." if end_open else f"..{text}")
    stamp = window.since if end_open else window.until
    moment = dt.datetime.fromisoformat(stamp)
    assert moment.utcoffset() == dt.timedelta(0)
    expected = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if expected.tzinfo is None:
        expected = expected.replace(tzinfo=dt.timezone.utc)
    assert moment == expected
    assert parse_window("run-2026").run_key == "run-2026"


@pytest.mark.parametrize(("argv", "named"), [
    (["--alpha", "0.7"], "--alpha 0.7"),
    (["--min-shift", "-1"], "--min-shift -1"),
    (["--format", "pdf"], "--format: unknown pdf"),
    (["--host", "../x"], "--host '../x'"),
])
def test_bad_options_are_refused_naming_them_before_anything_is_written(tmp_path, capsys, argv, named):
    before = synthetic_run(tmp_path / "before", seed=1, hosts=6)
    out = tmp_path / "out"
    assert cli.main(["compare", str(before), str(before), "--out", str(out), *argv]) == 2
    assert named in capsys.readouterr().err
    assert not (out / "compare.json").exists()


def test_a_directory_and_a_window_or_a_missing_history_are_refused(tmp_path, capsys):
    before = synthetic_run(tmp_path / "before", seed=1, hosts=6)
    assert cli.main(["compare", str(before), "2026-01-01.."]) == 2
    assert "not one of each" in capsys.readouterr().err
    assert cli.main(["compare", "..2026-01-01", "2026-01-01..", "--history", str(tmp_path / "none.sqlite")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.main(["compare", "2026-02-01..2026-01-01", "2026-01-01..", "--history", str(tmp_path)]) == 2
    assert "is not before its end" in capsys.readouterr().err


def test_an_unreadable_node_report_is_said_and_the_exit_says_could_not_check(tmp_path):
    before = synthetic_run(tmp_path / "before", seed=1, hosts=20)
    after = synthetic_run(tmp_path / "after", seed=2, hosts=20)
    (after / "gpu-00004" / "report.json").write_text("{not json")
    code, document, _ = run_compare(tmp_path, before, after)
    assert code == 3
    assert document["hosts"]["only_before"] == ["gpu-00004"]
    assert any("gpu-00004" in note for note in document["notes"])


def test_the_page_is_self_contained_and_draws_each_figure(tmp_path):
    before = synthetic_run(tmp_path / "before", seed=1)
    after = synthetic_run(tmp_path / "after", seed=2, factor=0.97, slow={17: (0.9, "575.57.08", "212992")})
    _, document, out = run_compare(tmp_path, before, after)
    html = (out / "compare.html").read_text()
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert html.count("<svg") == len(document["figures"])
    assert "gpu-00017" in html and "575.57.08" in html and "fleet health before" in html


def test_a_large_fleets_figures_computed_in_parallel_equal_the_serial_ones(monkeypatch):
    rng = random.Random(9)
    pairs = [([rng.gauss(100, 1) for _ in range(60)], [rng.gauss(99, 1) for _ in range(70)]) for _ in range(3)]
    serial = compare._shifts(pairs, 0.01, workers=1)
    monkeypatch.setattr(compare, "PARALLEL_SAMPLES", 10)
    assert compare._shifts(pairs, 0.01, workers=2) == serial


def test_a_history_without_the_before_run_says_so_and_is_no_reason_for_exit_3(tmp_path):
    before = synthetic_run(tmp_path / "run-a", seed=1, hosts=20)
    after = synthetic_run(tmp_path / "run-b", seed=2, hosts=20)
    history = tmp_path / "history.sqlite"
    record_history(history, hosts=2, runs=3)  # runs of other keys only
    code, document, _ = run_compare(tmp_path, before, after, "--history", str(history))
    assert code == 0
    assert any("holds no run of key 'run-a'" in note for note in document["notes"])


def test_an_infinite_figure_in_the_history_is_no_sample(tmp_path):
    history = tmp_path / "history.sqlite"
    record_history(history)
    with open_store(str(history)) as store:
        store.record(RunRecord("node-00", "2026-11-05T07:00:00+00:00", "fleet", "odd", "PASS", 0,
                               [Measurement(ALLREDUCE, "PASS", float("inf"), "GB/s", True)], {}))
    out = tmp_path / "out"
    assert cli.main(["compare", "..2026-11-04", "2026-11-04..", "--history", str(history), "--out", str(out),
                     "--quiet"]) == 1
    assert the_figure(json.loads((out / "compare.json").read_text()), ALLREDUCE)["after"]["samples"] == 12


figure_values = st.one_of(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
                          st.sampled_from([0.0, 1.0, 1.0, 2.0]))


@st.composite
def sides(draw) -> tuple:
    """Two sides of any shape: 1 to 12 hosts each, overlapping or not, figures present or absent, values tied,
    zero or negative, hosts on one or two profiles."""
    out = []
    for label in ("before", "after"):
        hosts = {}
        for index in draw(st.sets(st.integers(0, 14), min_size=1, max_size=12)):  # a side has a host (else exit 2)
            values = draw(st.dictionaries(st.sampled_from(["bench.a", "bench.b", "lat.c"]), figure_values))
            hosts[f"h{index}"] = compare.HostSide(f"h{index}", draw(st.sampled_from(["p1", "p2"])), values,
                                                  {k: draw(st.lists(figure_values, max_size=4)) for k in values},
                                                  {"kernel": draw(st.sampled_from(["6.1", "6.8"]))})
        meta = {"bench.a": (True, "GB/s"), "bench.b": (True, ""), "lat.c": (False, "us")}
        out.append(compare.Side(label, "run directory", hosts, meta, compare.HealthTally().to_dict("t")))
    return tuple(out)


@settings(max_examples=50, deadline=None)
@given(pair=sides(), alpha=st.sampled_from([0.001, 0.01, 0.2]))
def test_the_comparison_is_total_over_any_two_sides(pair, alpha):
    """Whatever two sides hold, the comparison completes, meets its schema, and every format renders it."""
    from verify.report.compare_html import page
    from verify.report.compare_text import markdown, terminal

    document = compare.compare(*pair, compare.Settings(alpha=alpha))
    jsonschema.validate(json.loads(json.dumps(document)), SCHEMA)
    assert terminal(document) and markdown(document) and page(document)
    assert document["verdict"]["exit_code"] in (0, 1, 3)
