"""Nothing damaged can drain a node (issue 41 item 1): the real deploy/slurm hook and the npd command run as
the scheduler runs them (a new process each), over the real 1x H100 capture (tests/helpers/drills), against
each damaged input. No traceback, the documented exit code, and no drain: the hooks run with --dry-run, so a
drain would be printed ("would run scontrol update ... State=DRAIN") and written in the --report file.

A damaged state file is set aside (renamed state.json.damaged) with a WARN naming it and the run goes on as a
first run; an error tunefleet did not foresee exits 70 (verify.result.EXIT_INTERNAL_ERROR) with one line,
which the hook answers as "could not check"."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import drills
from tests.helpers.fake_node import desired_state
from verify.cli import main
from verify.result import EXIT_INTERNAL_ERROR
from verify.scheduler import state as saved

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "deploy" / "slurm" / "tunefleet-slurm-hook"
BOOT_ID = "0f1e2d3c-0000-4000-8000-000000000001"
DRILL = {d.name: d for d in drills.DRILLS}
# What each hook may answer when nothing FAILed: prolog/epilog let the job run (0), health says 0 or 3 (the
# dry run cannot ask a Slurm that is not here whether to resume), npd 0 OK, 2 Unknown or 70, which
# node-problem-detector also reads as Unknown (pkg/custompluginmonitor/plugin/plugin.go: every exit status
# but 0 and 1 is cpmtypes.Unknown), so it never sets the problem condition.
ANSWERS = {"prolog": {0}, "healthcheck": {0, 3}, "npd": {0, 2, EXIT_INTERNAL_ERROR}}


def good_state(**fields) -> dict:
    return dict({"schema": saved.SCHEMA, "boot_id": BOOT_ID, "kernel_uptime_s": 1.5, "open_events": [],
                 "counters": {}, "counters_at": 1.7e9, "last_run": {"prolog": 1.7e9}}, **fields)


# Each a state.json a node could hold after a crash, a full disk or a bad hand edit.
DAMAGED = {
    "counters_at beyond a float": json.dumps(good_state(counters_at=10 ** 400)),
    "kernel_uptime_s infinite": json.dumps(good_state()).replace('"kernel_uptime_s": 1.5', '"kernel_uptime_s": 1e999'),
    "last_run beyond a float": json.dumps(good_state(last_run={"health": 10 ** 400})),
    "a counter beyond 64 bits": json.dumps(good_state(counters={"health.ib.mlx5_0/1": {"symbol_error": 10 ** 400}})),
    "a negative stamp": json.dumps(good_state(counters_at=-5)),
    "nested 100000 deep": "[" * 100_000 + "]" * 100_000,
    "cut in half": json.dumps(good_state())[:40],
    "not UTF-8": b"\xff\xfe{\x00",
    "empty": "",
}


def machine(tmp_path: Path) -> tuple:
    """(tree, drill directory, spec file): the H100 capture, healthy, every tuning role off."""
    tree = drills.rebuild_sysfs(tmp_path / "tree")
    tree.write("/proc/sys/kernel/random/boot_id", BOOT_ID + "\n")
    spec = desired_state(**{role: {"enabled": False} for role in
                            ("sysctl", "network", "storage", "gpu", "memory", "limits", "cpu")})
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return tree.root, drills.make(DRILL["healthy"], tmp_path / "inject"), tmp_path / "spec.json"


def check_args(tmp_path: Path, tree: Path, inject: Path, spec: Path, name: str) -> list:
    return ["--root", str(tree), "--inject", str(inject), "--spec", str(spec), "--state-dir", str(tmp_path / "state"),
            "--textfile-dir", str(tmp_path / "textfile"), "--dry-run", "--report", str(tmp_path / f"{name}.json")]


def run_hook(tmp_path: Path, name: str, args: list) -> subprocess.CompletedProcess:
    """deploy/slurm's hook under its installed name (prolog, healthcheck), or the NPD plugin's command line."""
    if name == "npd":
        return subprocess.run([sys.executable, "-m", "verify", "check", "--mode", "npd", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    hook = tmp_path / f"tunefleet-{name}"
    hook.write_bytes(HOOK.read_bytes())
    hook.chmod(0o755)
    env = {"TUNEFLEET_NO_DEFAULTS": "1", "TUNEFLEET": f"{sys.executable} -m verify",
           "TUNEFLEET_CHECK_ARGS": " ".join(args), "SLURMD_NODENAME": "tfnode",
           "PYTHONPATH": str(REPO)}
    return subprocess.run([str(hook)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def assert_no_drain(done: subprocess.CompletedProcess, report: Path, name: str) -> None:
    said = done.stdout + done.stderr
    assert "Traceback" not in said, said[-2000:]
    assert done.returncode in ANSWERS[name], (done.returncode, said[-2000:])
    assert "State=DRAIN" not in said and "FAIL" not in said, said[-2000:]
    if report.exists():
        rows = json.loads(report.read_text())["results"]
        assert not [r for r in rows if r["check_id"].startswith("scheduler.drain")], rows


@pytest.mark.parametrize("damage", sorted(DAMAGED))
@pytest.mark.parametrize("name", ["prolog", "healthcheck", "npd"])
def test_a_damaged_state_file_is_set_aside_and_never_drains(tmp_path, damage, name):
    tree, inject, spec = machine(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    content = DAMAGED[damage]
    (state / saved.FILE_NAME).write_bytes(content if isinstance(content, bytes) else content.encode())
    done = run_hook(tmp_path, name, check_args(tmp_path, tree, inject, spec, name))
    assert_no_drain(done, tmp_path / f"{name}.json", name)
    rows = {r["check_id"]: r for r in json.loads((tmp_path / f"{name}.json").read_text())["results"]}
    warn = rows["scheduler.state"]
    assert warn["status"] == "WARN" and f"{state}/{saved.FILE_NAME}" in warn["reason"]
    assert f"set aside as {state}/{saved.DAMAGED_NAME}" in warn["reason"]
    # the damaged bytes are kept for a person; the run wrote a fresh state a second run reads without a word
    aside = (state / saved.DAMAGED_NAME).read_bytes()
    assert aside == (content if isinstance(content, bytes) else content.encode())
    assert saved.load(str(state)) [1] == ""


def test_a_state_file_that_is_a_directory_or_a_link_is_set_aside_without_following_it(tmp_path):
    tree, inject, spec = machine(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / saved.FILE_NAME).mkdir()
    done = run_hook(tmp_path, "prolog", check_args(tmp_path, tree, inject, spec, "prolog"))
    assert_no_drain(done, tmp_path / "prolog.json", "prolog")
    reason = {r["check_id"]: r for r in json.loads((tmp_path / "prolog.json").read_text())["results"]}[
        "scheduler.state"]["reason"]
    assert "is not a regular file" in reason and (state / saved.DAMAGED_NAME).is_dir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("keep")
    (state / saved.DAMAGED_NAME).rmdir()
    (state / saved.FILE_NAME).unlink()  # the fresh state the run wrote
    os.symlink(elsewhere, state / saved.FILE_NAME)
    state_now, warning = saved.load(str(state))
    assert "is a symlink" in warning and state_now == saved.State()
    assert elsewhere.read_text() == "keep" and os.path.islink(state / saved.DAMAGED_NAME)


def absurd_xid(inject: Path) -> None:
    """The real Xid 79 line of the public capture with its code made 5000 digits long."""
    line = drills.on_this_gpu(drills.public_lines("kernel-log_faulty_akash209-xid79-535.161.07.txt",
                                                  r"Xid .*: 79,")[0])
    drills.append_kernel_lines(inject, [re.sub(r": 79,", ": " + "9" * 5000 + ",", line)])


@pytest.mark.parametrize("name", ["prolog", "healthcheck", "npd"])
def test_an_absurd_xid_code_in_a_drill_capture_never_drains(tmp_path, name):
    """It ended all three modes with a ValueError traceback and exit 1 (a FAIL to the hook: a drain). Now the
    reader refuses it, or failing that the run exits 70 and the hook answers "could not check"."""
    tree, inject, spec = machine(tmp_path)
    absurd_xid(inject)
    done = run_hook(tmp_path, name, check_args(tmp_path, tree, inject, spec, name))
    assert_no_drain(done, tmp_path / f"{name}.json", name)
    if "exit 70" in done.stderr or "internal error" in done.stdout:
        said = done.stdout if name == "npd" else done.stderr
        internal = [line for line in said.splitlines() if "internal error (exit 70" in line]
        assert len(internal) == 1 and f"--inject {inject}" in internal[0], said


# ---- the exit code itself: the real command with an unforeseen error planted in one reader -------------------

def test_an_unforeseen_error_is_one_line_naming_the_inputs_and_exit_70(tmp_path, capsys, monkeypatch):
    tree, inject, spec = machine(tmp_path)

    def broken(node):  # an error no reader foresaw, raised where the kernel's boot id is read
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr("verify.scheduler.kernel_events.boot_id", broken)
    for mode, stream in (("prolog", "err"), ("health", "err"), ("npd", "out")):
        code = main(["check", "--mode", mode, *check_args(tmp_path, tree, inject, spec, mode)])
        said = capsys.readouterr()
        line = getattr(said, stream)
        assert code == EXIT_INTERNAL_ERROR == 70
        assert line.count("\n") == 1 and "Traceback" not in said.out + said.err
        assert line.startswith(f"tunefleet check --mode {mode}: internal error (exit 70, no verdict): OverflowError")
        assert f"--spec {spec}" in line and f"--state-dir {tmp_path / 'state'}" in line and f"--root {tree}" in line
        assert "verify/scheduler/modes.py" in line


@pytest.mark.parametrize("name, want", [("tunefleet-prolog", 0), ("tunefleet-epilog", 0), ("tunefleet-healthcheck", 3)])
def test_the_slurm_hook_answers_70_as_could_not_check(tmp_path, name, want):
    """deploy/slurm's hook with TUNEFLEET a command that exits 70 and says its one line, as tunefleet does."""
    hook = tmp_path / name
    hook.write_bytes(HOOK.read_bytes())
    hook.chmod(0o755)
    command = tmp_path / "tunefleet"
    command.write_text("#!/bin/sh\necho 'tunefleet check: internal error (exit 70, no verdict): ...' >&2\nexit 70\n")
    command.chmod(0o755)
    done = subprocess.run([str(hook)], env={"TUNEFLEET_NO_DEFAULTS": "1", "TUNEFLEET": str(command),
                                            "SLURMD_NODENAME": "node1"}, capture_output=True, text=True, timeout=30)
    assert done.returncode == want
    assert "could not check (exit 70" in done.stderr and "not draining" in done.stderr


@pytest.mark.parametrize("mode", ["prolog", "epilog"])
@pytest.mark.parametrize("says, want", [
    # Python's own exit 1 before tunefleet's handler, as a plain `tunefleet` console script gives it
    ("Traceback (most recent call last):\n  File \"/usr/local/bin/tunefleet\"\nImportError: planted", 0),
    ("planted: a SystemExit with a text", 0),
    ("", 0),
    # tunefleet's verdict: the line it prints before it exits 1
    ("tunefleet {mode}: FAIL reboot: health.gpu.xid.0000:00:06.0: Xid 79 (policy default.hardware)", 1),
])
def test_a_job_hooks_exit_1_drains_only_with_tunefleets_verdict(tmp_path, mode, says, want):
    """deploy/slurm's hook run with a plain `tunefleet` (no launcher): exit 1 without the verdict line is
    tunefleet's own failure, answered as could not check; the verdict's exit 1 is passed on to Slurm."""
    hook = tmp_path / f"tunefleet-{mode}"
    hook.write_bytes(HOOK.read_bytes())
    hook.chmod(0o755)
    command = tmp_path / "tunefleet"
    command.write_text("#!/bin/sh\ncat >&2 <<'SAID'\n" + says.format(mode=mode) + "\nSAID\nexit 1\n")
    command.chmod(0o755)
    done = subprocess.run([str(hook)], env={"TUNEFLEET_NO_DEFAULTS": "1", "TUNEFLEET": str(command),
                                            "SLURMD_NODENAME": "node1"}, capture_output=True, text=True, timeout=30)
    assert done.returncode == want, done.stderr
    assert says.format(mode=mode) in done.stderr  # slurmd's log still gets what tunefleet said
    if not want:
        assert "could not check (exit 70" in done.stderr and "not draining" in done.stderr
