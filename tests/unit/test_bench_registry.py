"""run_benchmarks and `tunefleet bench`: names, defaults from the desired state, crash isolation."""

from __future__ import annotations

import argparse
import json
import sys
import types

from bench_helpers import output, scripted_node

import verify.bench as bench
from verify.bench import cli
from verify.result import Status


def test_names_default_to_the_desired_state_and_aliases_collapse(tmp_path):
    node = scripted_node(lambda a: output(a), root=str(tmp_path))
    spec = {"verify": {"benchmarks": ["perftest", "rdma", "ib"]}}
    results = bench.run_benchmarks(spec, None, node)
    assert [r.check_id for r in results] == ["bench.rdma"] and results[0].status == Status.SKIP


def test_unknown_name_is_an_error_and_does_not_stop_the_rest(tmp_path):
    node = scripted_node(lambda a: output(a), root=str(tmp_path))
    results = bench.run_benchmarks({}, None, node, ["warp-drive", "rdma"])
    assert results[0].status == Status.ERROR and "warp-drive" in results[0].reason
    assert results[1].check_id == "bench.rdma"


def test_a_crashing_family_becomes_one_error(monkeypatch, tmp_path):
    def crash(spec, profile, node, overrides):
        raise RuntimeError("boom")

    broken = types.ModuleType("verify.bench.broken")
    broken.run = crash
    monkeypatch.setitem(sys.modules, "verify.bench.broken", broken)
    monkeypatch.setitem(bench.FAMILIES, "broken", "verify.bench.broken")
    results = bench.run_benchmarks({}, None, scripted_node(lambda a: output(a)), ["broken"])
    assert results[0].status == Status.ERROR and "boom" in results[0].reason


def test_cli_runs_storage_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = argparse.Namespace(
        name="odirect",
        args=["--dir", str(tmp_path), "--size-bytes", "4M", "--engines", "odirect", "--tries", "1", "--json", str(out)],
    )
    assert cli.main(args) == 0
    data = json.loads(out.read_text())
    assert data[0]["check_id"] == "bench.storage.odirect" and data[0]["status"] == "PASS"
    assert "bench.storage.odirect" in capsys.readouterr().out


def test_cli_rejects_unknown_benchmark_and_profile(capsys):
    assert cli.main(argparse.Namespace(name="nope", args=[])) == 2
    assert cli.main(argparse.Namespace(name="nccl", args=["--profile", "h999"])) == 2
    assert "no hardware profile 'h999'" in capsys.readouterr().err
    assert cli.main(argparse.Namespace(name="list", args=[])) == 0
