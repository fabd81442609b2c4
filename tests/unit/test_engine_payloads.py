"""Engine payloads are checked where they enter verify (issue 27 item 2, verify.payload_schema.checked_payload):
a malformed payload is one ERROR naming the field, the well-formed rows of it are still judged, and an
engine's garbage figure ends as an ERROR row and exit status EXIT_COULD_NOT_CHECK through the real CLI.

Hypothesis profiles as in test_parsers_fuzz.py (fixed seed in `make test`, TUNEFLEET_HYPOTHESIS_PROFILE=fuzz).
"""
from __future__ import annotations

import json

import pytest
from bench_helpers import fixture, output, scripted_node
from hypothesis import given
from hypothesis import strategies as st

from verify import cli
from verify.bench import cli as bench_cli
from verify.bench import cufile_read, gpu_engine, hostcopy, nccl, odirect_read, storage, torch_allreduce
from verify.bench.odirect_read import make_file
from verify.engine import RESULT_MARKER, read_result
from verify.payload_schema import checked_payload, schema_problems
from verify.result import EXIT_COULD_NOT_CHECK, Status

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                    max_leaves=12)
ROW = {"size_bytes": 1 << 30, "count": 1 << 28, "dtype": "float", "redop": "sum", "time_us": 9000.0,
       "algbw_gbps": 120.0, "busbw_gbps": 120.0, "wrong": 0}


def engine_stdout(payload) -> str:
    return "progress\n" + RESULT_MARKER + json.dumps(payload) + "\n"


def test_every_real_captured_payload_fits_its_engines_schema():
    for name, schema in (("gpu_engine_h100x1.stdout", gpu_engine.PAYLOAD_SCHEMA),
                         ("gpu_engine_h200x2.stdout", gpu_engine.PAYLOAD_SCHEMA),
                         ("h200x2_torch_allreduce.stdout", torch_allreduce.PAYLOAD_SCHEMA),
                         ("h200x2_hostcopy.stdout", hostcopy.torch_hostcopy.PAYLOAD_SCHEMA),
                         ("h200x2_odirect_qd1.stdout", odirect_read.PAYLOAD_SCHEMA),
                         ("h200_cufile_compat.stdout", cufile_read.PAYLOAD_SCHEMA)):
        kept, problems = checked_payload(read_result(fixture(name)), schema)
        assert kept is not None and problems == [], name


def test_problems_name_the_missing_and_wrong_fields():
    payload = {"world_size": "2", "rows": [dict(ROW), {k: v for k, v in ROW.items() if k != "busbw_gbps"}, []]}
    kept, problems = checked_payload(payload, torch_allreduce.PAYLOAD_SCHEMA)
    assert kept is None  # world_size is wrong: nothing safe to judge
    assert problems == ["world_size: expected int, got a string", "rows[1].busbw_gbps: missing",
                        "rows[2]: expected an object, got a list"]
    assert schema_problems([], torch_allreduce.PAYLOAD_SCHEMA) == ["the payload: expected an object, got a list"]
    empty = checked_payload({"world_size": 2, "rows": []}, torch_allreduce.PAYLOAD_SCHEMA)
    assert empty == (None, ["rows: empty list"])
    assert schema_problems(True, int) == ["the payload: expected int, got a boolean"]


@given(JSON)
def test_any_json_is_either_fit_to_judge_or_named_problems(payload):
    for schema in (torch_allreduce.PAYLOAD_SCHEMA, gpu_engine.PAYLOAD_SCHEMA, odirect_read.PAYLOAD_SCHEMA,
                   cufile_read.PAYLOAD_SCHEMA, hostcopy.torch_hostcopy.PAYLOAD_SCHEMA):
        kept, problems = checked_payload(payload, schema)
        assert kept is not None or problems
        assert all(isinstance(p, str) and ":" in p for p in problems)


def test_read_result_survives_deep_nesting():
    assert read_result(RESULT_MARKER + "[" * 100000 + "]" * 100000) is None


# ---- storage: one engine's malformed result is its ERROR, the others still judged -------------------

@given(JSON)
def test_storage_engine_payload_of_any_shape_is_judged_or_one_named_error(payload):
    node = scripted_node(lambda argv: output(argv, stdout=engine_stdout(payload)))
    row = storage._engine_try(node, "bench.storage.odirect", ["x"], 10, "O_DIRECT read",
                              lambda p: storage.judge_floor("bench.storage.odirect", "O_DIRECT:", p["gbps"], None, {}),
                              odirect_read.PAYLOAD_SCHEMA).result
    assert row.status in (Status.ERROR, Status.PASS)
    if row.status == Status.PASS:
        assert isinstance(payload, dict) and 0 < payload["gbps"] <= storage.peaks.unknown_storage_bound().gbps


@pytest.mark.parametrize("figure", ["NaN", "Infinity", "-Infinity", "-5", "0", "1e9"])
def test_cli_storage_garbage_figure_is_an_error_row_and_a_could_not_check_exit(tmp_path, monkeypatch, capsys,
                                                                              figure):
    path = str(tmp_path / "f.bin")
    make_file(path, 1 << 20)
    run = f'{{"bytes": 1048576, "seconds": 0.001, "gbps": {figure}}}'
    line = f'{RESULT_MARKER}{{"engine": "odirect", "gbps": {figure}, "runs": [{run}]}}\n'
    monkeypatch.setattr(bench_cli, "Node", lambda: scripted_node(lambda argv: output(argv, stdout=line)))
    code = cli.main(["bench", "storage", "--file", path, "--engines", "odirect", "--tries", "1"])
    printed = capsys.readouterr().out
    assert code == EXIT_COULD_NOT_CHECK  # ERROR: could not be checked, never 0
    assert "ERROR bench.storage.odirect" in printed and "measurement broken" in printed


def test_cli_storage_with_a_malformed_payload_names_the_field(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "f.bin")
    make_file(path, 1 << 20)
    line = RESULT_MARKER + '{"engine": "odirect", "gbps": "fast", "runs": {}}\n'
    monkeypatch.setattr(bench_cli, "Node", lambda: scripted_node(lambda argv: output(argv, stdout=line)))
    code = cli.main(["bench", "storage", "--file", path, "--engines", "odirect", "--tries", "1"])
    assert code == EXIT_COULD_NOT_CHECK
    printed = capsys.readouterr().out
    assert "malformed result: gbps: expected int or float, got a string; runs: expected a list" in printed


# ---- host copies and the all-reduce: the good rows of a malformed payload are still judged ---------

def test_hostcopy_malformed_gpu_is_one_error_and_the_other_gpu_is_judged(monkeypatch):
    monkeypatch.setattr(hostcopy, "module_available", lambda name: True)
    good = {"index": 0, "name": "H200", "pcie": {"gen_max": 5, "width_max": 16}, "h2d_gbps": 55.0, "d2h_gbps": 55.0}
    payload = {"gpus": [good, {"index": 1, "name": "H200", "h2d_gbps": 55.0}]}
    node = scripted_node(lambda argv: output(argv, stdout=engine_stdout(payload)))
    rows = {r.check_id: r for r in hostcopy.run(None, None, node, {"tries": 1})}
    assert rows["bench.h2d.gpu0"].status == Status.PASS and rows["bench.d2h.gpu0"].status == Status.PASS
    assert "bench.h2d.gpu1" not in rows
    error = rows["bench.hostcopy.payload"]
    assert error.status == Status.ERROR and "gpus[1].d2h_gbps: missing" in error.reason


def test_allreduce_malformed_row_is_one_error_and_the_good_rows_are_judged(monkeypatch):
    monkeypatch.setattr(nccl, "module_available", lambda name: True)
    monkeypatch.setattr(nccl, "which", lambda name, root="/": None)
    small = dict(ROW, size_bytes=1 << 20, busbw_gbps="12")
    payload = {"world_size": 2, "rows": [small, ROW], "engine": "torch"}
    node = scripted_node(lambda argv: output(argv, stdout=engine_stdout(payload)), root="/nonexistent")
    rows = nccl.run(None, None, node, {"engine": "torch", "gpus": 2, "tries": 1})
    assert [r.check_id for r in rows] == [nccl.CHECK_ID, f"{nccl.CHECK_ID}.payload"]
    assert rows[0].status == Status.PASS and rows[0].observed == 120.0
    assert rows[1].status == Status.ERROR and "rows[0].busbw_gbps: expected int or float" in rows[1].reason


def test_allreduce_with_no_good_row_is_one_error_naming_the_field(monkeypatch):
    monkeypatch.setattr(nccl, "module_available", lambda name: True)
    monkeypatch.setattr(nccl, "which", lambda name, root="/": None)
    node = scripted_node(lambda argv: output(argv, stdout=engine_stdout({"world_size": 2, "rows": [{}]})),
                         root="/nonexistent")
    rows = nccl.run(None, None, node, {"engine": "torch", "gpus": 2, "tries": 1})
    assert len(rows) == 1 and rows[0].status == Status.ERROR and "rows[0].size_bytes: missing" in rows[0].reason


@given(JSON)
def test_allreduce_payload_of_any_shape_never_raises(payload):
    node = scripted_node(lambda argv: output(argv, stdout=engine_stdout(payload)), root="/nonexistent")
    measurement, error, _ = nccl.measure(node, "torch", None, nccl.NcclOptions(engine="torch"), 2)
    assert (measurement is None) != (error is None)


# ---- the GPU engines' payload (verify.bench.gpu.run) --------------------------------------------------

def _gpu_run(tmp_path, monkeypatch, payload_text: str):
    """verify.bench.gpu.run on the real Node whose engine subprocess answered `payload_text`."""
    from verify.bench import gpu
    from verify.node import Node
    from verify.runner import CommandOutput

    monkeypatch.setattr(gpu, "module_available", lambda name: True)
    monkeypatch.setattr(gpu, "link_facts", lambda node: (None, None))

    def runner(argv, timeout_s=60.0, env=None, cwd=None):
        return CommandOutput(list(argv), 0, payload_text, "", 0.1)

    return gpu.run({}, None, Node(root=str(tmp_path), runner=runner), {"seconds": 0.1})


def test_a_gpu_payload_of_the_wrong_shape_is_one_error_naming_the_field(tmp_path, monkeypatch):
    from verify.engine import RESULT_MARKER

    rows = _gpu_run(tmp_path, monkeypatch, RESULT_MARKER + json.dumps(["not", "an", "object"]) + "\n")
    assert [(r.check_id, r.status) for r in rows] == [("bench.gpu", Status.ERROR)]
    assert "malformed" in rows[0].reason
