"""roles/scheduler_hooks through the real ansible-playbook (connection local) into a throwaway tree:
check mode changes nothing and says what it would, a converge installs deploy/'s files, renders the
desired state the hooks pass as --spec and byte-compiles the verify package, a second run changes
nothing, and scheduler_hooks_state=absent removes every file it installed."""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "scheduler_hooks.yml"

pytestmark = pytest.mark.slow


def play(root: Path, *extra: str, **variables) -> tuple:
    binary = Path(sys.executable).parent / "ansible-playbook"
    if not binary.exists():
        pytest.skip("ansible-playbook is not installed in this venv")
    options = {"scheduler_hooks_root": str(root), "scheduler_hooks_npd": True, "scheduler_hooks_timer": True,
               "ansible_python_interpreter": sys.executable, "scheduler_hooks_python": sys.executable,
               "scheduler_hooks_package_dir": str(root / "opt/tunefleet/verify"), **variables}
    out = subprocess.run([str(binary), "-i", "localhost,", "-c", "local", str(PLAYBOOK), "-e", json.dumps(options),
                          *extra], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, ANSIBLE_NOCOLOR="1"), timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    recap = re.search(r"changed=(\d+)", out.stdout)
    return int(recap.group(1)), out.stdout


def wheel_data() -> tuple:
    """setup.py's DATA: the files a wheel carries under verify/_data/ (read from there, its one home)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "DATA" for t in node.targets))


def install_package(root: Path) -> Path:
    """A copy of the verify package as a node has it installed from the wheel (its _data included), without
    bytecode (the role compiles it)."""
    package = root / "opt/tunefleet/verify"
    shutil.copytree(REPO / "verify", package, ignore=shutil.ignore_patterns("__pycache__", "_data"))
    for source in (path for pattern in wheel_data() for path in sorted(REPO.glob(pattern))):
        target = package / "_data" / source.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return package


def stale_modules(package: Path) -> list:
    return [str(p.relative_to(package)) for p in package.rglob("*.py")
            if not Path(importlib.util.cache_from_source(str(p))).is_file()]


def test_install_is_idempotent_check_mode_tells_the_truth_and_absent_removes_it(tmp_path):
    root = tmp_path / "node"
    (root / "etc/systemd/system").mkdir(parents=True)  # the node's own, as on a systemd host
    package = install_package(root)
    before = sorted(root.rglob("*"))
    changed, said = play(root, "--check", "--diff")
    assert changed > 0 and sorted(root.rglob("*")) == before  # said what it would do, did nothing
    assert "tunefleet-healthcheck" in said
    assert play(root)[0] > 0
    hook = root / "usr/local/libexec/tunefleet/tunefleet-prolog"
    assert hook.read_bytes() == (REPO / "deploy/slurm/tunefleet-slurm-hook").read_bytes()
    assert hook.stat().st_mode & 0o777 == 0o755
    assert (root / "etc/tunefleet/slurm.conf.snippet").read_text().count("tunefleet-healthcheck") == 1
    assert "OnUnitActiveSec=5min" in (root / "etc/systemd/system/tunefleet-health.timer").read_text()
    assert (root / "var/lib/tunefleet-metrics").is_dir()
    # the desired state, rendered by Ansible from the same template and role defaults as `tunefleet spec`
    rendered = root / "etc/tunefleet/desired_state.json"
    assert rendered.stat().st_mode & 0o777 == 0o644
    spec = json.loads(rendered.read_text())
    python_rendered = json.loads(subprocess.run([sys.executable, "-m", "verify", "spec"], cwd=REPO, check=True,
                                                capture_output=True, text=True).stdout)
    assert spec == python_rendered
    defaults = (root / "etc/default/tunefleet").read_text()
    assert 'TUNEFLEET_CHECK_ARGS="--spec /etc/tunefleet/desired_state.json --state-dir' in defaults
    assert stale_modules(package) == [] and len(list(package.rglob("*.py"))) > 50  # every module compiled
    # the hooks' launcher: this interpreter without site, importing the installed copy; the real hook script
    # started through it judges the captured node and runs the job
    launcher = root / "usr/local/libexec/tunefleet/tunefleet-check"
    assert launcher.stat().st_mode & 0o777 == 0o755
    assert launcher.read_text().splitlines()[0] == f"#!{sys.executable} -IS"
    assert "TUNEFLEET=/usr/local/libexec/tunefleet/tunefleet-check\n" in defaults
    started = subprocess.run([str(hook)], capture_output=True, text=True, timeout=120, cwd=root, env={
        "PATH": "/usr/bin:/bin", "TUNEFLEET_NO_DEFAULTS": "1", "TUNEFLEET": str(launcher), "SLURMD_NODENAME": "tfnode",
        "TUNEFLEET_CHECK_ARGS": f"--spec {rendered} --root {REPO / 'tests/fixtures/node'} --state-dir= "
                                f"--textfile-dir= --report {tmp_path / 'prolog.json'} --no-drain"})
    assert started.returncode == 0, started.stderr
    report = json.loads((tmp_path / "prolog.json").read_text())
    assert report["run"]["mode"] == "prolog" and report["results"]
    assert play(root)[0] == 0
    assert play(root, "-e", "scheduler_hooks_state=absent")[0] > 0
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and package not in p.parents)
    assert left == []


def test_a_desired_state_option_in_the_hook_arguments_is_refused_by_name(tmp_path):
    binary = Path(sys.executable).parent / "ansible-playbook"
    if not binary.exists():
        pytest.skip("ansible-playbook is not installed in this venv")
    options = {"scheduler_hooks_root": str(tmp_path), "scheduler_hooks_check_args": "--profile h100-sxm-8x",
               "ansible_python_interpreter": sys.executable}
    out = subprocess.run([str(binary), "-i", "localhost,", "-c", "local", str(PLAYBOOK), "-e", json.dumps(options)],
                         cwd=REPO, capture_output=True, text=True, env=dict(os.environ, ANSIBLE_NOCOLOR="1"),
                         timeout=300)
    assert out.returncode != 0 and "scheduler_hooks_check_args names --spec, --profile or --vars" in out.stdout
    assert list(tmp_path.rglob("*")) == []


def test_an_interpreter_without_verify_installed_gets_the_named_package(tmp_path):
    """scheduler_hooks_package_dir names the package for an interpreter that cannot import verify itself (the GPU
    node's venv in tests/device/hooks_role.sh): the role finds it there, and the launcher it writes runs the hook."""
    base = getattr(sys, "_base_executable", "")
    lacks = subprocess.run([base, "-I", "-c", "import verify"], capture_output=True) if base else None
    if lacks is None or lacks.returncode == 0:
        pytest.skip("no interpreter here that lacks verify")
    root = tmp_path / "node"
    (root / "etc/systemd/system").mkdir(parents=True)
    package = install_package(root)
    play(root, scheduler_hooks_python=base, scheduler_hooks_compile=False)
    launcher = root / "usr/local/libexec/tunefleet/tunefleet-check"
    assert launcher.read_text().splitlines()[0] == f"#!{base} -IS"
    assert json.dumps(str(package.parent)) in launcher.read_text()
    spec = root / "etc/tunefleet/desired_state.json"
    done = subprocess.run([str(launcher), "check", "--mode", "prolog", "--spec", str(spec),
                           "--root", str(REPO / "tests/fixtures/node"), "--state-dir=", "--textfile-dir=", "--no-drain",
                           "--report", str(tmp_path / "prolog.json")], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "prolog.json").read_text())["run"]["mode"] == "prolog"
