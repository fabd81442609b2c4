"""Test doubles are the real Node with an injected runner: nothing in tests/ may drift from their calls.

A hand-written stand-in for Node once accepted `env` while the real Node.run did not, so every
benchmark passed its unit tests and crashed on the GPU machine. These tests read every test
source and fail on any node-like class or runner whose call differs from the real one.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from bench_helpers import RecordingRunner

from tests.helpers.replay import ReplayRunner
from verify.node import Node
from verify.runner import run_command

TESTS = Path(__file__).resolve().parents[1]
RUNNER_PARAMS = list(inspect.signature(run_command).parameters)
NODE_METHODS = {
    name: list(inspect.signature(member).parameters)
    for name, member in inspect.getmembers(Node, inspect.isfunction)
    if not name.startswith("_")
}
# Callables taking argv that are not Node runners (a different interface), with the reason.
OTHER_INTERFACES = {
    "FakeSystemd": "plugins/module_utils ledger runner: run(argv) -> (rc, stdout, stderr)",
    "ModuleRunCommand": "AnsibleModule.run_command as node_reads calls it: run(argv) -> (rc, stdout, stderr)",
}


def _params(function: ast.FunctionDef) -> list:
    args = function.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


def drifted(source: str, origin: str) -> list:
    """Every node-like class or runner in `source` whose call differs from Node's / run_command's."""
    problems = []
    tree = ast.parse(source, origin)
    for owner in ast.walk(tree):
        if isinstance(owner, ast.ClassDef):
            bases = {getattr(b, "id", getattr(b, "attr", "")) for b in owner.bases}
            for item in owner.body:
                if not isinstance(item, ast.FunctionDef):
                    continue
                params = _params(item)
                where = f"{origin}:{item.lineno} {owner.name}.{item.name}"
                real = NODE_METHODS.get(item.name)
                if "Node" in bases and real is not None and params != real:
                    problems.append(f"{where}{tuple(params)} differs from Node.{item.name}{tuple(real)}")
                elif "Node" not in bases and item.name == "run" and params[1:2] == ["argv"]:
                    problems.append(f"{where}: a hand-written node; use Node(runner=...) instead")
                elif (item.name == "__call__" and params[1:2] == ["argv"] and owner.name not in OTHER_INTERFACES
                      and params[1:] != RUNNER_PARAMS):
                    problems.append(f"{where}{tuple(params[1:])} differs from run_command{tuple(RUNNER_PARAMS)}")
        elif isinstance(owner, ast.FunctionDef):
            params = _params(owner)
            if params[:2] == ["argv", "timeout_s"] and params != RUNNER_PARAMS:
                problems.append(f"{origin}:{owner.lineno} {owner.name}{tuple(params)} differs from run_command")
    return problems


def test_the_recording_and_replay_runners_have_run_commands_call():
    expected = inspect.signature(run_command)
    for runner in (RecordingRunner, ReplayRunner):
        actual = inspect.signature(runner.__call__)
        params = list(actual.parameters.values())[1:]  # without self
        assert [(p.name, p.kind, p.default) for p in params] == [
            (p.name, p.kind, p.default) for p in expected.parameters.values()
        ], runner.__name__


def test_node_run_passes_env_and_cwd_through_to_its_runner():
    runner = RecordingRunner(lambda argv: run_command(["true"]))
    Node(runner=runner).run(["x"], timeout_s=3.0, env={"A": "1"}, cwd="/")
    assert runner.calls == [{"argv": ["x"], "timeout_s": 3.0, "env": {"A": "1"}, "cwd": "/"}]


def test_no_test_double_in_tests_drifts_from_node_or_run_command():
    problems = []
    for path in sorted(TESTS.rglob("*.py")):
        if "fixtures" in path.parts:
            continue
        problems += drifted(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS)))
    assert problems == []


def test_the_drift_detector_catches_the_shapes_that_broke_before():
    hand_written = "class ScriptedNode:\n    def run(self, argv, timeout_s=60.0, env=None, cwd=None):\n        pass\n"
    old_subclass = "class RecordingNode(Node):\n    def run(self, argv, timeout_s=10.0):\n        pass\n"
    old_runner = "class Replay:\n    def __call__(self, argv, timeout_s=60.0):\n        pass\n"
    nested = "def make():\n    def run(argv, timeout_s=60.0):\n        pass\n"
    for source in (hand_written, old_subclass, old_runner, nested):
        assert drifted(source, "example.py"), source
    good = "class R(Node):\n    def run(self, argv, timeout_s=1.0, env=None, cwd=None):\n        pass\n"
    assert drifted(good, "example.py") == []
