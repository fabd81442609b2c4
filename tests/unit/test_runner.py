"""The command runner never raises: missing tools, failures and hangs come back as data."""
from __future__ import annotations

import os
import time

from verify.runner import run_command


def test_output_and_exit_code_are_kept() -> None:
    out = run_command(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (out.returncode, out.stdout, out.stderr, out.ok) == (3, "out\n", "err\n", False)


def test_a_missing_tool_is_reported_not_raised() -> None:
    out = run_command(["tunefleet-no-such-tool", "--help"])
    assert out.missing and not out.ok and out.returncode is None


def test_a_hung_command_is_killed_with_its_children_and_keeps_partial_output(tmp_path) -> None:
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    out = run_command(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; echo partial; wait"], timeout_s=1)
    assert out.timed_out and not out.ok
    assert "partial" in out.stdout
    assert time.monotonic() - started < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the hung command's child survived the timeout")
