"""Every reader of tunefleet's own files on the fleet side is total (issue 27, items 3 and 7): a node report
or side file the fleet run wrote, damaged, costs the damaged record only, with a WARN naming the file and
the field; `tunefleet report` always completes and writes the fleet report.

The property tests run hypothesis with the same profiles as test_parsers_fuzz ("ci": fixed seed in
`make test`; "fuzz": random seed, TUNEFLEET_HYPOTHESIS_PROFILE=fuzz). Their names hold "total" so
`make fuzz`'s `-k total` selects them once its file list includes this file.
"""
from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verify.cli import main as cli_main
from verify.fleet import model
from verify.fleet.report import read_addresses, read_regressions, write_reports
from verify.fleet.summary import build_summary

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GPU_REPORT = json.loads((FIXTURES / "node" / "gpu_machine_report.json").read_text())
CONTAINER_REPORT = json.loads((FIXTURES / "node" / "systemd_container_report.json").read_text())



def fleet_dir(root: Path, first: str, others: int = 2) -> Path:
    """h1 holds `first` (report.json text), h2.. a copy of the real GPU machine's report."""
    for index in range(1, others + 2):
        host = root / f"h{index}"
        host.mkdir()
        (host / "report.json").write_text(first if index == 1 else json.dumps(GPU_REPORT))
    return root


def run_report(directory: Path, capsys) -> tuple:
    code = cli_main(["report", str(directory)])
    return code, capsys.readouterr()


def with_result(change) -> str:
    report = copy.deepcopy(GPU_REPORT)
    change(report["results"])
    return json.dumps(report)


# ---- each damaged input through the CLI: completes, reports written, a WARN naming file and field ---------------

def test_a_figure_beyond_float_range_is_no_figure_and_the_report_is_written(tmp_path, capsys):
    def damage(results):
        results.append({"check_id": "bench.nccl.all_reduce", "role": "bench", "status": "PASS", "observed": 10 ** 400,
                        "details": {"value": 10 ** 400, "curve": [{"size_bytes": 10 ** 400, "busbw_gbps": 10 ** 400},
                                                                 {"size_bytes": 1024, "busbw_gbps": 5.0}]}})

    directory = fleet_dir(tmp_path, with_result(damage))
    code, _ = run_report(directory, capsys)
    assert code in (0, 1, 2)
    data = json.loads((directory / "fleet_report.json").read_text())
    assert [h["host"] for h in data["hosts"] if h["host"] == "h1"] == ["h1"]  # the host is still reported
    assert (directory / "fleet_report.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("field, value", [
    ("status", {"a": 1}),
    ("status", "MAYBE"),
    ("check_id", ["x"]),
    ("role", {"bench": 1}),
    ("details", "not an object"),
    ("reason", 7),
])
def test_a_damaged_result_is_skipped_with_a_warn_naming_file_and_field(tmp_path, capsys, field, value):
    directory = fleet_dir(tmp_path, with_result(lambda results: results[3].update({field: value})))
    code, out = run_report(directory, capsys)
    report_path = str(directory / "h1" / "report.json")
    warn = next(line for line in out.err.splitlines() if "WARN" in line)
    assert report_path in warn and f"results[3].{field}" in warn
    data = json.loads((directory / "fleet_report.json").read_text())
    h1 = next(h for h in data["hosts"] if h["host"] == "h1")
    # Every other result of h1 is still there; the damaged one is not.
    assert len(h1["statuses"]) == len({r["check_id"] for r in GPU_REPORT["results"]}) - 1
    assert {"path": report_path, "field": f"results[3].{field}"}.items() <= data["load_errors"][0].items()
    assert code == 3 or code == 1  # something could not be read (or a check failed on the real report)
    assert f"results[3].{field}" in (directory / "fleet_report.md").read_text()


def test_a_deeply_nested_addresses_file_is_a_warn_and_the_report_is_written(tmp_path, capsys):
    directory = fleet_dir(tmp_path, json.dumps(GPU_REPORT))
    (directory / model.ADDRESSES_NAME).write_text("[" * 100_000 + "]" * 100_000)
    code, out = run_report(directory, capsys)
    assert code in (1, 2)
    assert f"WARN {directory / model.ADDRESSES_NAME}" in out.err and "nested deeper" in out.err
    data = json.loads((directory / "fleet_report.json").read_text())
    assert [e["path"] for e in data["load_errors"]] == [str(directory / model.ADDRESSES_NAME)]


def test_an_addresses_entry_of_the_wrong_shape_is_skipped_and_the_others_are_used(tmp_path, capsys):
    directory = fleet_dir(tmp_path, json.dumps(GPU_REPORT))
    (directory / model.ADDRESSES_NAME).write_text(json.dumps({"h1": ["10.0.0.1"], "h2": {"a": 1}, "h3": [[1]]}))
    errors: list = []
    assert read_addresses(directory, errors) == {"h1": ["10.0.0.1"]}
    assert [e.field for e in errors] == ["h2", "h3[0]"]  # the schema names the item that is no address
    code, out = run_report(directory, capsys)
    assert f"WARN {directory / model.ADDRESSES_NAME}: h2:" in out.err
    assert f"WARN {directory / model.ADDRESSES_NAME}: h3[0]:" in out.err
    assert (directory / "fleet_report.json").is_file()


def test_a_regressions_file_of_the_right_outer_shape_but_wrong_entries(tmp_path, capsys):
    directory = fleet_dir(tmp_path, json.dumps(GPU_REPORT))
    good = {"host": "h2", "check_id": "bench.x", "reason": "bench.x is 20% below its median"}
    (directory / model.REGRESSIONS_NAME).write_text(json.dumps({
        "schema": "tunefleet.fleet_regressions/v1", "percent": {"x": 1}, "runs": 5,
        "regressions": [1, "x", {"host": 3, "reason": "r"}, good], "drift": [None, {"host": "h1"}]}))
    code, out = run_report(directory, capsys)
    path = directory / model.REGRESSIONS_NAME
    for field in ("regressions[0]", "regressions[1]", "regressions[2].host", "drift[0]", "drift[1].reason",
                  "percent"):
        assert f"WARN {path}: {field}:" in out.err
    data = json.loads((directory / "fleet_report.json").read_text())
    assert data["regressions"] == [good] and data["config_drift"] == []
    html = (directory / "fleet_report.html").read_text()
    assert "bench.x is 20% below its median" in html
    assert "bench.x is 20% below its median" in (directory / "fleet_report.md").read_text()


def test_a_report_with_no_readable_result_is_one_load_error_not_a_clean_host(tmp_path, capsys):
    directory = fleet_dir(tmp_path, json.dumps({"host": "h1", "results": [{"check_id": "a", "status": {}}]}))
    code, out = run_report(directory, capsys)
    assert code in (1, 2)
    data = json.loads((directory / "fleet_report.json").read_text())
    assert "h1" not in [h["host"] for h in data["hosts"]]
    assert data["load_errors"][0]["path"] == str(directory / "h1" / "report.json")
    assert "field" not in data["load_errors"][0]


def test_a_baseline_figure_beyond_float_range_is_refused_by_name_not_a_traceback():
    from verify.fleet import baseline

    document = json.loads((FIXTURES / "fleet" / "fleet_baseline_h200x2_h100x1.json").read_text())
    profile = next(iter(document["profiles"].values()))
    next(iter(profile["metrics"].values()))["median"] = 10 ** 400
    with pytest.raises(baseline.BaselineError, match=r"\.median: 1000.* is not a finite"):
        baseline.validate(document, "baseline b.json")


# ---- property tests: damaged JSON never raises -------------------------------------------------------------------

GARBAGE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10 ** 400), max_value=10 ** 400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                 lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner,
                                                                                       max_size=3)), max_leaves=8),
    st.integers(min_value=70, max_value=900).map(lambda depth: json.loads("[" * depth + "]" * depth)),
)


def _paths(data, prefix=()):
    """Every (container, key) in data, so one can be replaced."""
    out = []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    for key, value in items:
        out.append((data, key))
        if len(prefix) < 6:
            out.extend(_paths(value, prefix + (key,)))
    return out


@st.composite
def damaged(draw, documents: list):
    """A real document with one to four values replaced by garbage (a dict where a string was, a huge
    integer, a deep list, a status that is an object), or dropped."""
    data = copy.deepcopy(draw(st.sampled_from(documents)))
    for _ in range(draw(st.integers(1, 4))):
        spots = _paths(data)
        if not spots:
            break
        container, key = spots[draw(st.integers(0, len(spots) - 1))]
        if draw(st.booleans()) and isinstance(container, dict):
            del container[key]
        else:
            container[key] = draw(GARBAGE)
    return data


def _dumps(data) -> bytes:
    try:
        return json.dumps(data).encode()
    except (ValueError, RecursionError):  # a value json cannot write: the file holds its str
        return str(data).encode()


@given(damaged([GPU_REPORT, CONTAINER_REPORT]))
def test_the_node_report_parser_is_total(document):
    try:
        node = model.parse_node_report(model.json_loads(_dumps(document)), "fuzzed.json", "h1")
    except ValueError:
        return  # the file is refused whole, by name
    for error in node.damaged:
        assert error.path == "fuzzed.json" and error.field


@given(damaged([GPU_REPORT, CONTAINER_REPORT]), st.sampled_from(["json", "md", "junit", "html"]))
def test_the_fleet_report_from_damaged_node_reports_is_total(document, fmt):
    with tempfile.TemporaryDirectory(prefix="tf-total-") as root:
        fleet_dir(Path(root), _dumps(document).decode("utf-8", errors="replace"), others=1)
        nodes, errors = model.load_fleet_dir(root)
        assert nodes  # the undamaged host is always reported
        write_reports(build_summary(nodes, errors), Path(root) / "out", (fmt,))


REGRESSIONS = {"schema": "tunefleet.fleet_regressions/v1", "run": "r1", "percent": 10.0, "runs": 5,
               "regressions": [{"host": "h1", "check_id": "bench.x", "value": 1.0, "baseline_median": 2.0, "runs": 5,
                                "change_percent": 50.0, "limit_percent": 10.0, "unit": "GB/s", "reason": "slow"}],
               "drift": [{"host": "h2", "key": "k", "before": "a", "after": "b", "previous_run": "r0",
                          "reason": "k changed"}]}
ADDRESSES = {"h1": ["10.0.0.1", "fe80::1"], "h2": ["10.0.0.2"]}


@given(damaged([REGRESSIONS, ADDRESSES]))
def test_the_side_file_readers_are_total(document):
    with tempfile.TemporaryDirectory(prefix="tf-total-") as root:
        directory = Path(root)
        fleet_dir(directory, json.dumps(GPU_REPORT), others=1)
        for name in (model.ADDRESSES_NAME, model.REGRESSIONS_NAME):
            (directory / name).write_bytes(_dumps(document))
        errors: list = []
        addresses = read_addresses(directory, errors)
        regressions = read_regressions(directory, errors)
        assert all(isinstance(a, str) for addrs in addresses.values() for a in addrs)
        assert all(isinstance(r.get("host"), str) for r in regressions.get("regressions", []))
        nodes, load_errors = model.load_fleet_dir(root)
        summary = build_summary(nodes, load_errors + errors, addresses)
        summary.regressions = regressions
        write_reports(summary, directory / "out", ("json", "md", "junit", "html"))
