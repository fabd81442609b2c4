"""tunefleet's own failure never drains (issue 53 item 4): the launcher roles/scheduler_hooks installs
(templates/tunefleet-check.j2) answers every failure of tunefleet itself, an import error before the CLI's
catch-all, a SystemExit with a text, a traceback, with exit 70 ("could not check"), never the FAIL (1) that
Slurm drains on; and the real Slurm hook started through it lets the job run. Each failure is planted in the
package the role installed; the healthy twin still answers 1 for a lost GPU and 0 for a configuration finding."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import desired_state
from tests.unit.test_scheduler_role import install_package, play
from verify.result import EXIT_INTERNAL_ERROR

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple:
    """(node root, installed package, launcher, hook) as the role installs them; one install for the module."""
    root = tmp_path_factory.mktemp("launcher") / "node"
    (root / "etc/systemd/system").mkdir(parents=True)
    package = install_package(root)
    play(root, scheduler_hooks_compile=False)
    bin_dir = root / "usr/local/libexec/tunefleet"
    return root, package, bin_dir / "tunefleet-check", bin_dir / "tunefleet-prolog"


PLANTS = {
    # an import error in the CLI module, before its catch-all exists
    "import error": ("cli.py", "raise ImportError('planted: a broken install')\n", "ImportError: planted"),
    "SystemExit with text": ("cli.py", "raise SystemExit('planted: stopped')\n", "SystemExit: planted: stopped"),
    "traceback in __main__": ("__main__.py", "1 / 0\n", "ZeroDivisionError"),
    "broken isolated.py": ("isolated.py", "def (:\n", "SyntaxError"),
    "a missing module": ("scheduler/cli.py", "import tunefleet_module_that_is_not_there  # noqa\n",
                         "No module named"),
}


def planted(source: bytes, line: str) -> bytes:
    """The module with `line` run first (after its `from __future__` import, which must stay first)."""
    future = b"from __future__ import annotations\n"
    if future in source:
        head, tail = source.split(future, 1)
        return head + future + line.encode() + tail
    return line.encode() + source


def machine_args(tmp_path: Path, drill: str, rdma: bool = False) -> list:
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    if rdma:
        tree.write("/sys/class/infiniband/mlx5_0/node_type", "1: CA\n")
    spec = desired_state(**{role: {"enabled": False} for role in
                            ("sysctl", "network", "storage", "memory", "limits", "cpu")})
    spec["gpu"]["nvidia_peermem"] = True
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    inject = drills.make(next(d for d in drills.DRILLS if d.name == drill), tmp_path / "inject")
    return ["--root", str(tree.root), "--inject", str(inject), "--spec", str(tmp_path / "spec.json"),
            "--state-dir=", "--textfile-dir=", "--no-drain"]


def launch(launcher: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(launcher), *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})


def through_hook(hook: Path, launcher: Path, args: list) -> subprocess.CompletedProcess:
    return subprocess.run([str(hook)], capture_output=True, text=True, timeout=120, env={
        "PATH": "/usr/bin:/bin", "TUNEFLEET_NO_DEFAULTS": "1", "TUNEFLEET": str(launcher),
        "SLURMD_NODENAME": "tfnode", "TUNEFLEET_CHECK_ARGS": " ".join(args)})


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_every_failure_of_tunefleet_itself_is_could_not_check_never_the_drain(installed, tmp_path, plant):
    _, package, launcher, hook = installed
    name, line, said = PLANTS[plant]
    target = package / name
    original = target.read_bytes()
    args = machine_args(tmp_path, "xid79")  # a node that would drain: the failure must still not
    try:
        target.write_bytes(planted(original, line))
        for mode in ("prolog", "health", "npd"):
            done = launch(launcher, "check", "--mode", mode, *args)
            assert done.returncode == EXIT_INTERNAL_ERROR, (mode, done.returncode, done.stdout, done.stderr)
            shown = done.stdout if mode == "npd" else done.stderr
            assert "exit 70" in shown and said in shown and "Traceback" not in done.stderr
        job = through_hook(hook, launcher, args)
        assert job.returncode == 0 and "not draining" in job.stderr, job.stderr
    finally:
        target.write_bytes(original)


def test_the_healthy_install_answers_the_verdict_a_lost_gpu_drains_a_finding_does_not(installed, tmp_path):
    _, _, launcher, hook = installed
    lost = through_hook(hook, launcher, machine_args(tmp_path / "lost", "xid79"))
    assert lost.returncode == 1 and "FAIL drain-rma: health.gpu.xid." in lost.stderr
    finding = through_hook(hook, launcher, machine_args(tmp_path / "finding", "healthy", rdma=True))
    assert finding.returncode == 0 and "reported, job allowed: FAIL gpu.nvidia_peermem" in finding.stderr


def test_an_exit_status_given_as_a_number_passes_through_and_one_given_as_text_does_not(installed, tmp_path):
    _, package, launcher, _ = installed
    target = package / "__main__.py"
    original = target.read_bytes()
    try:
        for code, want in (("3", 3), ("None", 0), ("256 + 1", 1), ("'1'", EXIT_INTERNAL_ERROR),
                           ("True", EXIT_INTERNAL_ERROR)):
            target.write_text(f"raise SystemExit({code})\n")
            assert launch(launcher, "check", "--mode", "prolog").returncode == want, code
    finally:
        target.write_bytes(original)


def test_the_role_writes_the_operators_policy_and_refuses_a_bad_one_by_name(tmp_path):
    root = tmp_path / "node"
    (root / "etc/systemd/system").mkdir(parents=True)
    install_package(root)
    policy = {"xids": {"79": "warn"}, "checks": {"health.ib": {"do": "drain", "after_runs": 3, "recovery_s": 900}}}
    play(root, scheduler_hooks_compile=False, scheduler_hooks_policy=policy)
    written = root / "etc/tunefleet/policy.json"
    assert json.loads(written.read_text()) == policy and written.stat().st_mode & 0o777 == 0o644
    assert "--policy /etc/tunefleet/policy.json\"" in (root / "etc/default/tunefleet").read_text()
    # NPD starts the launcher too: tunefleet's own failure is Unknown (70) there, never the condition (1)
    npd = json.loads((root / "etc/tunefleet/tunefleet-custom-plugin-monitor.json").read_text())
    assert {rule["args"][1] for rule in npd["rules"]} == {"/usr/local/libexec/tunefleet/tunefleet-check"}
    with pytest.raises(AssertionError) as refused:
        play(root, scheduler_hooks_compile=False, scheduler_hooks_policy={"xids": {"79": "drian"}})
    assert "xids.79.do = 'drian': must be one of ignore, warn, drain" in str(refused.value)
    assert json.loads(written.read_text()) == policy  # refused before anything changed
    play(root, scheduler_hooks_compile=False)  # none set any more: the defaults, no file, no option
    assert not written.exists() and "--policy" not in (root / "etc/default/tunefleet").read_text()
