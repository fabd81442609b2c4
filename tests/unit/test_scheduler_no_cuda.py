"""The scheduler's hooks never create a CUDA context and the prolog stays light (issue 39 item 3):
`tunefleet check --mode prolog|epilog|health|npd` reads NVML, the kernel log and sysfs only.

Each hook runs in its own process here, as the scheduler starts it, and reports the modules it imported:
no torch on any hook's path (torch is how a CUDA context would be made), neither jinja2 nor PyYAML on the
prolog's (a cached or --spec desired state is JSON). The health hook's commands are recorded on the 2x H200
machine's real capture: health.p2p asks `nvidia-smi topo -p2p`, and no argv starts Python (an engine)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import desired_state
from tests.unit.test_checks_health_replay import HEALTH, CaptureRunner, nvml_inventory
from verify.facts import peer_access
from verify.result import Status
from verify.runner import CommandOutput
from verify.scheduler.contract import MODES
from verify.scheduler.modes import Options, run_mode

REPO = Path(__file__).resolve().parents[2]
P2P_OK = (REPO / "tests" / "fixtures" / "node" / "peer_access" / "gpux2-p2p-ok.stdout").read_text()
NEVER_ON_A_HOOK = ("torch", "verify.engine", "verify.bench")
NEVER_ON_THE_PROLOG = ("jinja2", "yaml", *NEVER_ON_A_HOOK)
# Modules the installed hooks (--spec) no longer pay for at every job start (issue 39: prolog p99 0.25 s):
# the spec cache's hashlib (OpenSSL), socket for the host name, concurrent.futures (logging, queue).
NOT_AT_A_SPEC_HOOK_START = ("hashlib", "_hashlib", "socket", "concurrent", "logging")
REPORT_MODULES = ("import json, sys; from verify.cli import main; code = main(sys.argv[1:]); "
                  "print(json.dumps([code, sorted(sys.modules)]))")


def hook(tmp_path: Path, *argv: str) -> tuple:
    """(exit code, modules imported) of one `tunefleet check` in a fresh process."""
    out = subprocess.run([sys.executable, "-c", REPORT_MODULES, "check", *argv], cwd=REPO, capture_output=True,
                         text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=180)
    assert out.stdout.strip(), out.stderr[-2000:]
    code, modules = json.loads(out.stdout.strip().splitlines()[-1])
    return code, {name.split(".")[0] if not name.startswith("verify.") else name for name in modules}


def imported(modules: set, names: tuple) -> list:
    return [name for name in names if name in modules or any(m.startswith(name + ".") for m in modules)]


@pytest.fixture()
def machine(tmp_path):
    """The H100 capture as a tree and the healthy drill's commands, the spec as the installed hooks get it."""
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    inject_dir = drills.make(drills.DRILLS[0], tmp_path / "inject")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(desired_state(gpu={"nvidia_peermem": False})))
    common = ["--state-dir", str(tmp_path / "state"), "--textfile-dir", str(tmp_path / "textfile"), "--no-drain"]
    return {"over_tree": ["--root", str(tree.root), "--inject", str(inject_dir), *common],
            "spec": ["--spec", str(spec_file)], "common": common}


@pytest.mark.parametrize("mode", MODES)
def test_no_hook_imports_torch_or_an_engine(tmp_path, machine, mode):
    code, modules = hook(tmp_path, "--mode", mode, *machine["spec"], *machine["over_tree"])
    assert code in ((0, 1, 2) if mode == "npd" else (0, 1, 3)), code  # npd: 2 is "unknown" (an ERROR)
    assert imported(modules, NEVER_ON_A_HOOK) == []
    if mode in ("prolog", "epilog"):
        assert imported(modules, NEVER_ON_THE_PROLOG) == []


def test_the_prolog_on_the_live_node_reads_nvml_and_imports_no_template_engine(tmp_path, machine):
    """No --root, no --inject: NVML in-process (none on this machine: it says so and the checks go on), the
    kernel log, the textfile; still neither jinja2, PyYAML nor torch."""
    code, modules = hook(tmp_path, "--mode", "prolog", *machine["spec"], *machine["common"])
    assert code in (0, 1) and imported(modules, NEVER_ON_THE_PROLOG) == []
    assert imported(modules, NOT_AT_A_SPEC_HOOK_START) == []


def test_the_prolog_without_spec_renders_once_then_reads_the_cached_json(tmp_path, machine):
    report = tmp_path / "report.json"
    first, rendering = hook(tmp_path, "--mode", "prolog", *machine["over_tree"])
    assert "jinja2" in rendering  # the first run renders the role defaults (and is the only one to)
    code, modules = hook(tmp_path, "--mode", "prolog", *machine["over_tree"], "--report", str(report))
    assert json.loads(report.read_text())["run"]["spec_source"] == "cache"
    assert imported(modules, NEVER_ON_THE_PROLOG) == []


class Recording(CaptureRunner):
    """The 2x H200 capture's answers (anything it lacks: not installed), `nvidia-smi topo -p2p r|w` answered
    with the public healthy 2-GPU matrix; every argv kept."""

    def __init__(self):
        super().__init__(HEALTH / "h200x2" / "cmd", strict=False)
        self.argvs: list = []

    def __call__(self, argv, timeout_s: float = 60.0, env=None, cwd=None) -> CommandOutput:
        argv = [str(a) for a in argv]
        self.argvs.append(argv)
        if argv[:3] == ["nvidia-smi", "topo", "-p2p"]:
            return CommandOutput(argv, 0, P2P_OK, "", 0.0)
        return super().__call__(argv, timeout_s, env, cwd)


@pytest.mark.parametrize("mode", ["health", "npd"])
def test_the_health_hooks_judge_peer_access_without_starting_an_engine(tmp_path, mode):
    runner = Recording()
    node = drills.rebuild_sysfs(tmp_path / "tree", HEALTH / "h200x2").node(runner=runner, live=True)
    node.memo["gpus"] = nvml_inventory("h200x2")
    options = Options(mode, state_dir=str(tmp_path / "state"), drain=False, use_nvml=False, use_kmsg=False)
    outcome = run_mode(desired_state(), node, options)
    p2p = next(r for r in outcome.results if r.check_id == "health.p2p")
    assert p2p.status is Status.PASS and p2p.details["source"] == peer_access.SOURCE_SMI
    assert ["nvidia-smi", "topo", "-p2p", "r"] in runner.argvs and ["nvidia-smi", "topo", "-p2p", "w"] in runner.argvs
    started_python = [argv for argv in runner.argvs if argv[0] == sys.executable or "python" in Path(argv[0]).name
                      or any("engine" in word for word in argv)]
    assert started_python == []
