"""Fleet baseline (issue 19 item 5): per hardware profile, the median and spread of every figure, each node
judged against it by the operator's rules.

The fleet is built from real captures: the 2x H200 node report (tests/fixtures/node/gpu_machine_report.json)
and the GPU engine payloads of the 1x H100 and 2x H200 machines (raw captures), turned into verdict
rows by the real `verify.bench.gpu.run` through the real Node. Each host's figures carry a small seeded
jitter; one planted host is slow. The nodes are then loaded, judged and reported by the real code and CLI.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import random
import stat
from pathlib import Path

import pytest
from bench_helpers import NODE_FIXTURES, fixture, output, scripted_node

from verify import cli
from verify.bench import gpu
from verify.engine import RESULT_MARKER, read_result
from verify.facts.hardware import MEMO_KEY, GpuLinks, Hardware
from verify.fleet import baseline
from verify.fleet.baseline_rules import DEFAULT_RULES, RulesError, load_rules
from verify.fleet.model import load_fleet_dir
from verify.history.record import run_record
from verify.history.store import open_store
from verify.profiles import load_profile
from verify.report import results_of

BASE_REPORT = NODE_FIXTURES.parent / "gpu_machine_report.json"  # real report of the 2x H200 machine
FLEET_FIXTURES = NODE_FIXTURES.parent.parent / "fleet"
H200_PROFILE = "h200-x2-nvlink"
H100_KEY = "1x NVIDIA H100 80GB HBM3"  # no profile: the hardware key comes from the GPUs in the facts
SLOW = "h100-02"


@pytest.fixture(autouse=True)
def torch_present(monkeypatch):
    monkeypatch.setattr(gpu, "module_available", lambda name: True)


def engine_rows(data: dict, gpus: int, profile) -> list:
    """The real GPU verdict rows (as a node report holds them) for an engine payload."""

    def reply(argv):
        if "verify.bench.gpu_engine" in argv:
            return output(argv, stdout=RESULT_MARKER + json.dumps(data) + "\n")
        return output(argv, missing=True)

    node = scripted_node(reply)
    node.memo[MEMO_KEY] = Hardware(gpus=[GpuLinks(g["index"], g["name"], g["bus_id"], 18 if gpus > 1 else 0,
                                                  478.1 if gpus > 1 else None, pcie_gen_max=5, pcie_width_max=16)
                                         for g in data["gpus"]])
    return [r.to_dict() for r in gpu.run(None, load_profile(profile) if profile else None, node, {})]


def scaled(data: dict, rng: random.Random, hbm: float = 1.0, matmul: dict = None) -> dict:
    """The payload with every figure scaled by ~1 % noise, HBM by `hbm`, matmul of GPU i by matmul[i]."""
    data = copy.deepcopy(data)
    for row in data["per_gpu"]:
        row["hbm"]["gbps"] *= rng.gauss(1.0, 0.01) * hbm
        row["matmul"]["tflops"] *= rng.gauss(1.0, 0.01) * (matmul or {}).get(row["index"], 1.0)
    for pair in data["pairs"]:
        pair["gbps"] *= rng.gauss(1.0, 0.01)
    return data


def node_report(host: str, rows: list, h100: dict = None) -> dict:
    """The real H200 node report under another name with the engine rows; an H100 host has no profile and
    its GPUs as the H100 capture lists them."""
    report = json.loads(BASE_REPORT.read_text(encoding="utf-8"))
    report["host"] = report["facts"]["host"] = host
    # A real fleet is mostly green (as verify.fleet.synthetic): this VM's config FAILs flipped to PASS.
    for result in report["results"]:
        if result["status"] == "FAIL":
            result["status"], result["reason"] = "PASS", ""
    report["results"] += rows
    if h100 is not None:
        report["profile"] = None
        report["facts"]["gpus"]["gpus"] = [{"index": g["index"], "bus_id": g["bus_id"], "name": g["name"]}
                                           for g in h100["gpus"]]
    return report


def write_fleet(directory: Path, seed: int, slow: dict = None, spread_host: str = "") -> Path:
    """6 H200 hosts and 4 H100 hosts; slow = {host: hbm factor}; spread_host's GPU 1 matmul at 0.9."""
    rng = random.Random(seed)
    h200 = read_result(fixture("gpu_engine_h200x2.stdout"))
    h100 = read_result(fixture("gpu_engine_h100x1.stdout"))
    slow = slow or {}
    for index in range(6):
        host = f"h200-{index:02d}"
        data = scaled(h200, rng, slow.get(host, 1.0), {1: 0.9} if host == spread_host else None)
        write_report(directory, node_report(host, engine_rows(data, 2, H200_PROFILE)))
    for index in range(4):
        host = f"h100-{index:02d}"
        data = scaled(h100, rng, slow.get(host, 1.0))
        write_report(directory, node_report(host, engine_rows(data, 1, None), h100=h100))
    return directory


def write_report(directory: Path, report: dict) -> None:
    (directory / report["host"]).mkdir(parents=True, exist_ok=True)
    (directory / report["host"] / "report.json").write_text(json.dumps(report), encoding="utf-8")


def figure(directory: Path, host: str, check_id: str) -> float:
    report = json.loads((directory / host / "report.json").read_text(encoding="utf-8"))
    return next(r["observed"] for r in report["results"] if r["check_id"] == check_id)


@pytest.fixture
def good_run(tmp_path) -> Path:
    return write_fleet(tmp_path / "run-good", seed=1)


@pytest.fixture
def slow_run(tmp_path) -> Path:
    # HBM at 0.85 of the H100 fleet (~2570 GB/s): above the derived floor 0.7 x 3352 = 2347, so alone the node
    # is only in the floor's warn band (WARN), as every H100 at 0.8 of its peak would be.
    return write_fleet(tmp_path / "run-slow", seed=2, slow={SLOW: 0.85})


# ---- building -----------------------------------------------------------------------------------------

def test_baseline_is_per_profile_with_median_and_spread(good_run):
    nodes, errors = load_fleet_dir(str(good_run))
    assert not errors and {n.hardware for n in nodes} == {H200_PROFILE, H100_KEY}
    document = baseline.build(nodes)
    assert document["schema"] == baseline.SCHEMA
    h200, h100 = document["profiles"][H200_PROFILE], document["profiles"][H100_KEY]
    assert (h200["hosts"], h100["hosts"]) == (6, 4)
    assert {"bench.gpu_hbm.gpu0", "bench.gpu_hbm.gpu1", "bench.gpu_matmul.gpu1",
            "bench.gpu_copy.gpu0_to_gpu1", "bench.gpu_copy_bidir.gpu1_to_gpu0"} <= set(h200["metrics"])
    assert "bench.gpu_copy.gpu0_to_gpu1" not in h100["metrics"]  # SKIP rows (one GPU) are no figure
    values = sorted(figure(good_run, f"h100-{i:02d}", "bench.gpu_hbm.gpu0") for i in range(4))
    entry = h100["metrics"]["bench.gpu_hbm.gpu0"]
    assert entry["median"] == pytest.approx((values[1] + values[2]) / 2)
    assert entry["min"] == values[0] and entry["max"] == values[-1] and entry["hosts"] == 4
    assert entry["p10"] == pytest.approx(values[0] + 0.3 * (values[1] - values[0]))
    assert entry["mad"] > 0 and entry["unit"] == "GB/s" and entry["higher_is_better"] is True
    assert 2900 < entry["median"] < 3150  # the real H100's 3020 GB/s
    assert 4150 < h200["metrics"]["bench.gpu_hbm.gpu0"]["median"] < 4400  # the H200's 4275 GB/s


def test_each_host_counts_once_as_the_median_of_its_report_and_its_history(good_run, tmp_path):
    history = tmp_path / "hist" / "history.sqlite"
    # Three earlier runs of every host, recorded as a fleet run records them; h100-00 then had 3100 GB/s.
    with open_store(str(history)) as store:
        for run in range(3):
            records = []
            for path in sorted(good_run.glob("*/report.json")):
                report = json.loads(path.read_text(encoding="utf-8"))
                if report["host"] == "h100-00":
                    for r in report["results"]:
                        if r["check_id"] == "bench.gpu_hbm.gpu0":
                            r["observed"] = r["details"]["value"] = 3100.0
                records.append(run_record(report, results_of(report), "fleet", f"past-{run}"))
            store.record_many(records)
    out = tmp_path / "b.json"
    assert cli.main(["baseline", str(good_run), "--history", str(history), "--out", str(out)]) == 0
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["sources"]["history"] == str(history) and document["sources"]["history_runs_per_host"] == 10
    per_host = sorted([3100.0] + [figure(good_run, f"h100-{i:02d}", "bench.gpu_hbm.gpu0") for i in (1, 2, 3)])
    assert document["profiles"][H100_KEY]["metrics"]["bench.gpu_hbm.gpu0"]["median"] == \
        pytest.approx((per_host[1] + per_host[2]) / 2)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    # A named history that is not there is an error naming it; nothing is written.
    missing = tmp_path / "nope" / "history.sqlite"
    assert cli.main(["baseline", str(good_run), "--history", str(missing), "--out", str(tmp_path / "c.json")]) == 2
    assert not (tmp_path / "c.json").exists()


# ---- judging ------------------------------------------------------------------------------------------

def test_the_planted_slow_node_is_flagged_alone_with_metric_value_and_baseline(good_run, slow_run):
    document = baseline.build(load_fleet_dir(str(good_run))[0])
    nodes, _ = load_fleet_dir(str(slow_run))
    slow_node = next(n for n in nodes if n.host == SLOW)
    (alone,) = [r for r in slow_node.results if r.check_id == "bench.gpu_hbm.gpu0"]
    assert alone.status.value == "WARN" and "passes the floor" in alone.reason  # the derived floor's warn band
    findings = baseline.judge(nodes, document)
    assert [(f.host, f.metric, f.status) for f in findings] == [(SLOW, "bench.gpu_hbm.gpu0", "FAIL")]
    (found,) = findings
    value = figure(slow_run, SLOW, "bench.gpu_hbm.gpu0")
    centre = document["profiles"][H100_KEY]["metrics"]["bench.gpu_hbm.gpu0"]["median"]
    assert found.value == value and found.baseline == centre and found.profile == H100_KEY
    assert f"bench.gpu_hbm.gpu0 {value:g} GB/s is {(centre - value) / centre * 100:.0f}% below the baseline " \
           f"median {centre:g} GB/s" in found.reason()
    assert "4 hosts" in found.reason() and "at most 10% below the baseline" in found.reason()
    # Judged from the slow run's own figures the median still holds: the same one host, alone.
    assert [(f.host, f.metric) for f in baseline.judge(nodes, baseline.build(nodes))] == \
        [(SLOW, "bench.gpu_hbm.gpu0")]


def test_the_recorded_baseline_and_the_example_rules_flag_the_planted_node_alone(slow_run):
    document = baseline.load(str(FLEET_FIXTURES / "fleet_baseline_h200x2_h100x1.json"))
    rules = load_rules(str(FLEET_FIXTURES / "baseline_rules.yml"))
    assert {r.kind for r in rules} == {"floor", "below_baseline_pct", "spread_pct"}
    findings = baseline.judge(load_fleet_dir(str(slow_run))[0], document, rules)
    assert [(f.host, f.metric, f.status, f.rule.kind) for f in findings] == \
        [(SLOW, "bench.gpu_hbm.gpu0", "FAIL", "below_baseline_pct")]
    assert f"the baseline median {document['profiles'][H100_KEY]['metrics']['bench.gpu_hbm.gpu0']['median']:g} GB/s" \
        in findings[0].reason()


def test_one_baseline_for_both_profiles_would_flag_every_h100(good_run):
    """Why per profile: the H100s' 3020 GB/s against the H200s' 4275 is 29% below."""
    nodes, _ = load_fleet_dir(str(good_run))
    assert baseline.judge(nodes, baseline.build(nodes)) == []
    for node in nodes:
        node.hardware = "one"
    flagged = {f.host for f in baseline.judge(nodes, baseline.build(nodes)) if f.metric == "bench.gpu_hbm.gpu0"}
    assert flagged == {f"h100-{i:02d}" for i in range(4)}


def test_rules_floor_percentage_and_spread(good_run, tmp_path):
    run = write_fleet(tmp_path / "run-spread", seed=2, spread_host="h200-04")
    nodes, _ = load_fleet_dir(str(run))
    document = baseline.build(load_fleet_dir(str(good_run))[0])
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(
        "rules:\n"
        "  - match: 'bench.gpu_matmul.*'\n    spread_pct: 8\n"
        "  - match: 'bench.gpu_hbm.*'\n    floor: 4000\n    severity: warn\n"
        "  - match: 'bench.gpu_copy.*'\n    below_baseline_pct: 50\n", encoding="utf-8")
    rules = load_rules(str(rules_file))
    findings = baseline.judge(nodes, document, rules)
    by_host = {(f.host, f.metric): f for f in findings}
    spread = by_host.pop(("h200-04", "bench.gpu_matmul.gpu1"))
    assert spread.status == "FAIL" and "on gpu0 of the same node" in spread.reason()
    assert spread.reference == figure(run, "h200-04", "bench.gpu_matmul.gpu0")
    # Every H100 is under the absolute HBM floor of 4000 (a WARN by the rule); no H200 is.
    assert set(by_host) == {(f"h100-{i:02d}", "bench.gpu_hbm.gpu0") for i in range(4)}
    assert all(f.status == "WARN" and "is below the floor 4000 GB/s" in f.reason() for f in by_host.values())


def test_most_severe_finding_per_host_and_metric_is_kept(good_run, slow_run):
    document = baseline.build(load_fleet_dir(str(good_run))[0])
    nodes, _ = load_fleet_dir(str(slow_run))
    assert DEFAULT_RULES[1].severity == "WARN"  # the 5 % WARN also matches the 20 % gap: FAIL wins
    assert [f.status for f in baseline.judge(nodes, document, DEFAULT_RULES[::-1])] == ["FAIL"]


# ---- the report and the CLI ---------------------------------------------------------------------------

def test_report_lists_the_slow_node_beside_outliers_and_fails(good_run, slow_run, tmp_path, capsys):
    saved = tmp_path / "fleet_baseline.json"
    assert cli.main(["baseline", str(good_run), "--no-history", "--out", str(saved)]) == 0
    out = tmp_path / "out"
    code = cli.main(["report", str(slow_run), "--baseline", str(saved), "--out", str(out), "--format", "json,md"])
    assert code == 1
    data = json.loads((out / "fleet_report.json").read_text(encoding="utf-8"))
    assert [(b["host"], b["metric"], b["status"]) for b in data["baseline"]] == [(SLOW, "bench.gpu_hbm.gpu0", "FAIL")]
    assert data["bad_hosts"] == [SLOW]
    # Outliers too compare hosts of one profile only: no H100 is an outlier against the H200s.
    assert {o["host"] for o in data["outliers"]} <= {SLOW}
    row = next(h for h in data["hosts"] if h["host"] == SLOW)
    assert row["statuses"]["fleet.baseline.bench.gpu_hbm.gpu0"] == "FAIL"
    markdown = (out / "fleet_report.md").read_text(encoding="utf-8")
    assert "## Below the fleet baseline" in markdown and f"**{SLOW}** FAIL: bench.gpu_hbm.gpu0" in markdown
    assert "figure(s) below the fleet baseline on 1 host(s)" in capsys.readouterr().out
    # Without --baseline the same run has no baseline section and the slow node passes its own checks.
    assert cli.main(["report", str(slow_run), "--out", str(tmp_path / "plain"), "--format", "json"]) != 1
    assert json.loads((tmp_path / "plain" / "fleet_report.json").read_text())["baseline"] == []


def test_html_report_has_the_baseline_section(good_run, slow_run, tmp_path):
    saved = tmp_path / "b.json"
    assert cli.main(["baseline", str(good_run), "--no-history", "--out", str(saved)]) == 0
    assert cli.main(["report", str(slow_run), "--baseline", str(saved), "--out", str(tmp_path / "o"),
                     "--format", "html,junit"]) == 1
    html = (tmp_path / "o" / "fleet_report.html").read_text(encoding="utf-8")
    section = html.split('<ul id="baseline">')[1].split("</ul>")[0]
    assert section.count("<li") == 1 and f"<b>{SLOW}</b> FAIL: bench.gpu_hbm.gpu0" in section
    junit = (tmp_path / "o" / "fleet_report.junit.xml").read_text(encoding="utf-8")
    assert 'name="fleet.baseline.bench.gpu_hbm.gpu0"><failure' in junit


def test_fleet_run_refuses_bad_rules_before_any_node_and_judges_after(good_run, slow_run, tmp_path, capsys):
    from verify.fleet import run

    bad = tmp_path / "rules.yaml"
    bad.write_text("rules:\n  - match: 'bench.*'\n    floor: -1\n", encoding="utf-8")
    saved = tmp_path / "b.json"
    assert cli.main(["baseline", str(good_run), "--no-history", "--out", str(saved)]) == 0
    inventory = tmp_path / "missing-inventory"  # never read: the rules are refused first
    assert cli.main(["verify", "-i", str(inventory), "--baseline", str(saved), "--rules", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "rules[0].floor (bench.*): -1 is negative" in err and "inventory" not in err
    # After the playbook: the run's fleet report rebuilt against the baseline sets the exit code.
    assert cli.main(["report", str(slow_run), "--format", "json"]) == 0
    args = argparse.Namespace(baseline=str(saved), rules=None, world_readable=False)
    run.judge_against_baseline(args, slow_run)
    lines = []
    assert run.finish(0, "successful", slow_run, run.Progress(write=lambda _: None), write=lines.append) == 1
    assert f"  FAIL  {SLOW}: fleet.baseline.bench.gpu_hbm.gpu0: bench.gpu_hbm.gpu0" in "\n".join(lines)


def test_default_baseline_file_in_the_run_directory_is_not_read_as_a_node_report(good_run):
    assert cli.main(["baseline", str(good_run), "--no-history"]) == 0
    assert (good_run / "fleet_baseline.json").is_file()
    nodes, errors = load_fleet_dir(str(good_run))
    assert len(nodes) == 10 and errors == []


@pytest.mark.parametrize("text, named", [
    ("rules:\n  - match: 'bench.*'\n    below_baseline_pct: .nan\n", "rules[0].below_baseline_pct (bench.*): nan"),
    ("rules:\n  - match: 'bench.*'\n    floor: .inf\n", "rules[0].floor (bench.*): inf is not a finite"),
    ("rules:\n  - match: 'a'\n    floor: 1\n  - match: 'bench.*'\n    spread_pct: -3\n",
     "rules[1].spread_pct (bench.*): -3 is negative"),
    ("rules:\n  - match: 'bench.*'\n    floor: true\n", "rules[0].floor (bench.*): True is not a number"),
    ("rules:\n  - match: 'bench.*'\n    floor: '700'\n", "'700' is not a number"),
    ("rules:\n  - match: 'bench.*'\n    below_baseline_pct: 100\n", "must be below 100"),
    ("rules:\n  - match: 'bench.*'\n    floor: 1\n    spread_pct: 2\n", "name exactly one of"),
    ("rules:\n  - match: 'bench.*'\n", "got none"),
    ("rules:\n  - floor: 1\n", "rules[0].match: a glob on check_id is required"),
    ("rules:\n  - match: 'x'\n    floor: 1\n    flor: 2\n", "unknown key(s) flor"),
    ("rules:\n  - match: 'x'\n    floor: 1\n    severity: error\n", "rules[0].severity (x): 'error'"),
    ("rules: []\n", "'rules' is empty"),
    ("- match: x\n", "must be a mapping with a 'rules' list"),
    ("rules:\n  - match: x\n    floor: 1\nrule: []\n", "unknown top-level key(s) rule"),
    ("rules: [" * 100 + "]" * 100 + "\n", "nested deeper than"),
])
def test_bad_rules_are_refused_naming_the_key_before_anything_is_written(good_run, tmp_path, text, named):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(text, encoding="utf-8")
    with pytest.raises(RulesError) as caught:
        load_rules(str(rules_file))
    assert named in str(caught.value) and str(rules_file) in str(caught.value)
    saved = tmp_path / "b.json"
    assert cli.main(["baseline", str(good_run), "--no-history", "--out", str(saved)]) == 0
    out = tmp_path / "out"
    assert cli.main(["report", str(good_run), "--baseline", str(saved), "--rules", str(rules_file),
                     "--out", str(out)]) == 2
    assert not out.exists()


@pytest.mark.parametrize("mutate, named", [
    (lambda d: d.update(schema="tunefleet.fleet_report/v1"), "schema must be 'tunefleet.fleet_baseline/v1'"),
    (lambda d: d["profiles"][H100_KEY]["metrics"]["bench.gpu_hbm.gpu0"].update(median=-1.0),
     f"profiles.{H100_KEY}.metrics.bench.gpu_hbm.gpu0.median: -1.0 is not a finite"),
    (lambda d: d["profiles"][H100_KEY]["metrics"]["bench.gpu_hbm.gpu0"].update(mad="x"), ".mad: 'x'"),
    (lambda d: d.update(profiles=[]), "'profiles' must map"),
    (lambda d: d["profiles"][H200_PROFILE]["metrics"]["bench.gpu_hbm.gpu1"].update(p10="low"), "gpu1.p10: 'low'"),
    (lambda d: d["profiles"][H200_PROFILE]["metrics"]["bench.gpu_hbm.gpu1"].update(unit=3), "gpu1.unit must be text"),
])
def test_a_bad_baseline_file_is_refused_naming_the_key(good_run, tmp_path, mutate, named, capsys):
    document = baseline.build(load_fleet_dir(str(good_run))[0])
    mutate(document)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(baseline.BaselineError, match="baseline"):
        baseline.load(str(path))
    assert cli.main(["report", str(good_run), "--baseline", str(path), "--out", str(tmp_path / "o")]) == 2
    assert named in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_nan_in_a_baseline_file_and_rules_without_baseline_are_refused(good_run, tmp_path, capsys):
    path = tmp_path / "b.json"
    path.write_text('{"schema": "tunefleet.fleet_baseline/v1", "profiles": {"p": {"metrics": {"m": '
                    '{"median": NaN, "mad": 0}}}}}', encoding="utf-8")
    with pytest.raises(baseline.BaselineError, match="NaN is not a number a file may hold"):
        baseline.load(str(path))
    rules_file = tmp_path / "r.yaml"
    rules_file.write_text("rules:\n  - match: '*'\n    floor: 1\n", encoding="utf-8")
    assert cli.main(["report", str(good_run), "--rules", str(rules_file)]) == 2
    assert "--rules needs --baseline" in capsys.readouterr().err
    assert cli.main(["verify", "--local", "--baseline", str(path)]) == 2
    assert "use them with -i" in capsys.readouterr().err


def test_percentile_interpolates_and_nan_figures_never_enter():
    assert baseline.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 10) == pytest.approx(1.4)
    assert baseline.percentile([7.0], 90) == 7.0
    assert math.isfinite(baseline._stats([1.0, 2.0], True, "")["mad"])


def test_baseline_says_which_reports_it_left_out_and_refuses_a_run_without_one(good_run, tmp_path, capsys):
    from verify.fleet.model import NODE_REPORT_NAME

    broken = good_run / "broken-host" / NODE_REPORT_NAME
    broken.parent.mkdir()
    broken.write_text("{ cut short")
    assert cli.main(["baseline", str(good_run), "--no-history", "--out", str(tmp_path / "b.json")]) == 0
    err = capsys.readouterr().err
    assert f"tunefleet baseline: WARN {broken}:" in err and err.rstrip().endswith("(left out)")
    assert cli.main(["baseline", str(tmp_path / "nope"), "--no-history"]) == 2
    assert "tunefleet baseline:" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["baseline", str(tmp_path / "empty"), "--no-history"]) == 2
    assert "no readable node report under" in capsys.readouterr().err
