"""`tunefleet verify --local` end to end through the real CLI, on fake roots and on this machine."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from verify.cli import main
from verify.result import CheckResult, Status

REPO = Path(__file__).resolve().parents[2]


def write_spec(tmp_path, spec) -> str:
    path = tmp_path / "desired.json"
    path.write_text(json.dumps(spec))
    return str(path)


def passing_tree(tmp_path) -> FakeTree:
    """A root where every judged knob of a trimmed desired state is right."""
    tree = FakeTree(tmp_path / "root")
    tree.write("/proc/sys/net/core/rmem_max", "536870912\n").write("/proc/sys/vm/swappiness", "0\n")
    tree.write("/proc/sys/net/ipv4/tcp_rmem", "4096\t87380\t268435456\n")
    return tree


def trimmed_spec() -> dict:
    off = {"enabled": False}
    return desired_state(network=off, storage=off, gpu=off, memory=off, limits=off, cpu=off)


def test_all_good_exits_0_and_writes_reports(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["verify", "--local", "--spec", write_spec(tmp_path, trimmed_spec()), "--root",
                 str(passing_tree(tmp_path).root), "--out", str(out), "--no-bench", "--format", "json,prom"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["counts"]["PASS"] == 3 and report["summary"]["exit_code"] == 0
    assert (out / "tunefleet.prom").is_file() and not (out / "report.html").exists()
    assert "PASS 3" in capsys.readouterr().out


def test_a_failure_exits_1_an_error_alone_exits_3(tmp_path):
    tree = passing_tree(tmp_path).write("/proc/sys/vm/swappiness", "60\n")
    args = ["verify", "--local", "--root", str(tree.root), "--out", str(tmp_path / "o"), "--quiet", "--no-bench"]
    assert main([*args, "--spec", write_spec(tmp_path, trimmed_spec())]) == 1
    tree.write("/proc/sys/vm/swappiness", "0\n")
    spec = trimmed_spec()
    spec["sysctl"]["settings"]["net.no.such_key"] = 1
    assert main([*args, "--spec", write_spec(tmp_path, spec)]) == 3  # could not check, not bad input


@pytest.mark.parametrize("extra, message", [
    (["--spec", "/nonexistent/desired.json"], "cannot read desired state"),
    (["--profile", "no-such-profile"], "no-such-profile"),
    (["--format", "json,pdf"], "unknown format(s) pdf"),
])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, capsys, extra, message):
    out = tmp_path / "never"
    code = main(["verify", "--local", "--out", str(out), "--quiet", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]
    assert not out.exists()  # nothing written on bad input


def test_vars_with_spec_is_refused(tmp_path, capsys):
    code = main(["verify", "--local", "--spec", write_spec(tmp_path, trimmed_spec()), "--vars", "x.yml"])
    assert code == 2 and "--vars cannot be combined with --spec" in capsys.readouterr().err


def test_benchmarks_missing_package_is_a_skip(tmp_path, monkeypatch):
    from verify import local_run

    monkeypatch.setitem(sys.modules, "verify.bench", None)
    node = passing_tree(tmp_path).node(live=True)
    spec = desired_state(verify={"benchmarks": ["nccl"]})
    results = local_run.run_benchmarks(spec, node, {}, None)
    assert [r.status for r in results] == [Status.SKIP] and "verify.bench is not available" in results[0].reason


def test_benchmarks_are_called_with_spec_profile_node_and_names(tmp_path, monkeypatch):
    from verify import local_run

    calls = []

    def fake_bench(spec, profile, node, names, record=None):
        calls.append((spec["host"], profile, node.root, names))
        return [CheckResult("bench.nccl", "verify", Status.PASS, 300, 345.0)]

    monkeypatch.setattr("verify.bench.run_benchmarks", fake_bench)
    tree = passing_tree(tmp_path)
    report = local_run.verify_node(trimmed_spec(), tree.node(live=True), bench=True, bench_names=["nccl"])
    assert calls == [("testnode", None, str(tree.root), ["nccl"])]
    assert report["results"][-1]["check_id"] == "bench.nccl"
    skipped = local_run.verify_node(trimmed_spec(), tree.node(live=True), bench=False, bench_names=["nccl"])
    assert len(calls) == 1 and not any(r["check_id"].startswith("bench") for r in skipped["results"])


def test_profile_vars_and_name_reach_the_rendered_spec(monkeypatch):
    """--profile renders the role defaults with the profile's "vars" and records its name."""
    from verify import local_run

    monkeypatch.setattr(local_run, "load_named_profile", lambda name: {"vars": {"network_mtu": 4200}})
    captured = {}
    monkeypatch.setattr(local_run, "render_spec", lambda overrides, hostname: captured.update(overrides) or {})
    local_run.build_spec(None, "h100-8x", [], "node1")
    assert captured == {"network_mtu": 4200, "verify_profile": "h100-8x"}


def test_this_machine_in_a_fresh_interpreter_never_imports_torch(tmp_path):
    """The real node, with torch installed here; the timing is benchmarks/config_checks_timing.py's job."""
    code = (
        "import json, sys\n"
        "from verify.checks import run_checks\nfrom verify.node import Node\n"
        f"spec = json.loads({json.dumps(json.dumps(desired_state()))})\n"
        "results = run_checks(spec, Node())\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'n': len(results)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    measured = json.loads(done.stdout)
    assert measured["torch"] is False and measured["n"] > 10


def test_spec_command_renders_role_defaults_with_a_real_profile(capsys):
    """The real path: role defaults + the shipped profile's "vars" + --vars, one JSON document."""
    from verify.profiles import list_profiles, load_profile

    name = next((n for n in list_profiles() if load_profile(n).get("vars")), None)
    if name is None:
        pytest.skip("no shipped profile has vars")
    overrides = load_profile(name)["vars"]
    assert main(["spec", "--profile", name, "--vars", str(REPO / "inventory/local/group_vars/all.yml")]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["schema"] == "tunefleet.desired_state/v1" and spec["verify"]["profile"] == name
    for variable, value in overrides.items():
        role, key = variable.split("_", 1)
        assert spec[role][key] == value, variable
    assert spec["network"]["interfaces"] == []  # from the --vars file
