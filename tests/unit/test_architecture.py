"""verify/ is a one-way house (docs/architecture.md): no import cycle among its modules, counting the
imports placed inside functions, and the layer contracts of pyproject.toml hold (`make lint` runs them;
this test also proves that they catch an upward import)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]


def strongly_connected(graph: grimp.ImportGraph) -> list:
    """Every group of two or more modules that import each other, directly or round a loop (Tarjan)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    groups: list = []
    counter = [0]

    def visit(module: str) -> None:
        index[module] = low[module] = counter[0]
        counter[0] += 1
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_verify_has_no_import_cycle_counting_imports_inside_functions():
    graph = grimp.build_graph("verify", cache_dir=None)
    assert len(graph.modules) > 100
    assert strongly_connected(graph) == []


def test_the_cycle_finder_sees_a_cycle_made_by_an_import_inside_a_function():
    graph = grimp.build_graph("verify", cache_dir=None)
    # the Node imports the runner; the runner importing the Node back (as from inside a function) closes a loop
    graph.add_import(importer="verify.runner", imported="verify.node", line_number=1, line_contents="planted")
    assert ["verify.node", "verify.runner"] in strongly_connected(graph)


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    tool = Path(sys.executable).with_name("lint-imports")
    argv = [str(tool)] if tool.exists() else [shutil.which("lint-imports") or "lint-imports"]
    return subprocess.run(argv + ["--no-cache", "--config", str(root / "pyproject.toml")], cwd=root,
                          capture_output=True, text=True, timeout=300)


def test_the_layer_contracts_hold():
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("module, planted, contract", [
    # the Node (I/O) importing a check: what issue 25 found in node.py
    ("verify/node.py", "from verify.checks import health_xid", "verify is layered"),
    # a check importing a benchmark (they sit side by side)
    ("verify/checks/sysctl.py", "from verify.bench import nccl", "checks and benchmarks are independent"),
    # the history importing the fleet above it, inside a function
    ("verify/history/store.py", "def _planted():\n    from verify.fleet import run", "verify is layered"),
])
def test_an_upward_import_breaks_the_contracts(tmp_path, module, planted, contract):
    copy = tmp_path / "tree"
    shutil.copytree(REPO / "verify", copy / "verify", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    target = copy / module
    target.write_text(target.read_text() + "\n\n" + planted + "\n")
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command;"
                           " sys.exit(lint_imports_command())", "--no-cache"],
                          cwd=copy, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(copy)})
    assert done.returncode != 0, done.stdout[-2000:]
    assert f"{contract}" in done.stdout and "BROKEN" in done.stdout
