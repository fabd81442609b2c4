"""Issue 26 item 3 through the real CLI: `tunefleet ack` records who (from the real uid), when and why; every
`verify --local` puts the lookback in node.memo before any check runs (since the last ack, else boot, and the
previous run's start beside it); a run after an unacknowledged one still judges since boot."""
from __future__ import annotations

import json
import os
import pwd
import sqlite3

import pytest

import verify.checks
from tests.helpers.fake_node import sysctl_node
from verify.cli import main

HOST = "gpu-07"


def verify_local(tmp_path, history, monkeypatch) -> tuple:
    """One run on a fake root named gpu-07; (exit code, report, the lookback the checks saw)."""
    spec, tree = sysctl_node(tmp_path, HOST)
    seen: list = []
    real = verify.checks.run_checks

    def checks_seeing_the_memo(spec, node, **kwargs):
        seen.append(dict(node.memo.get("lookback") or {}))
        return real(spec, node, **kwargs)

    monkeypatch.setattr(verify.checks, "run_checks", checks_seeing_the_memo)
    out = tmp_path / "out"
    code = main(["verify", "--local", "--spec", str(spec), "--root", str(tree.root), "--out", str(out),
                 "--no-bench", "--format", "json", "--quiet", "--history", str(history)])
    return code, json.loads((out / "report.json").read_text()), seen[0]


def test_lookback_is_boot_until_an_ack_and_a_second_run_does_not_forgive_the_first(tmp_path, monkeypatch, capsys):
    history = tmp_path / "h.sqlite"
    code, first, seen = verify_local(tmp_path, history, monkeypatch)
    assert code == 0 and seen == {"since_utc": None, "source": "boot", "previous_run_utc": None}
    assert first["run"]["lookback"] == seen

    # An unacknowledged earlier run must not move the start: its FAIL events would pass the second time.
    code, second, seen = verify_local(tmp_path, history, monkeypatch)
    assert seen == {"since_utc": None, "source": "boot", "previous_run_utc": first["run"]["started_at"]}

    assert main(["ack", HOST, "--reason", "GPU 3 reset after Xid 48", "--history", str(history)]) == 0
    printed = capsys.readouterr().out
    stamp = sqlite3.connect(history).execute("SELECT at_utc FROM acks").fetchone()[0]
    assert f"{HOST} acknowledged at {stamp}" in printed and "GPU 3 reset after Xid 48" in printed
    code, third, seen = verify_local(tmp_path, history, monkeypatch)
    assert seen == {"since_utc": stamp, "source": f"operator ack {stamp}: GPU 3 reset after Xid 48",
                    "previous_run_utc": second["run"]["started_at"]}


def test_ack_names_the_real_user_not_the_environment(tmp_path, monkeypatch, capsys):
    history = tmp_path / "h.sqlite"
    monkeypatch.setenv("USER", "mallory")
    monkeypatch.setenv("LOGNAME", "mallory")
    monkeypatch.setenv("SUDO_USER", "mallory")
    assert main(["ack", "gpu-09", "--reason", "  replaced\tOSFP cable  ", "--history", str(history)]) == 0
    row = sqlite3.connect(history).execute(
        "SELECT h.name, a.reason, a.who FROM acks a JOIN hosts h ON h.id = a.host_id").fetchone()
    assert row == ("gpu-09", "replaced OSFP cable", pwd.getpwuid(os.getuid()).pw_name)
    assert "no run of gpu-09 is recorded there yet" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["ack", HOST, "--reason", "   "], "--reason '   ': must not be empty"),
    (["ack", HOST, "--reason", "x" * 501], "501 characters, at most 500"),
    (["ack", HOST, "--reason", "reset\x1b[2J"], "holds control characters"),
    (["ack", "gpu 07", "--reason", "reset"], "HOST 'gpu 07': a host name has no spaces"),
    (["ack", "", "--reason", "reset"], "HOST '': must not be empty"),
])
def test_ack_refuses_bad_input_by_name_and_writes_nothing(tmp_path, capsys, argv, message):
    history = tmp_path / "h.sqlite"
    assert main(argv + ["--history", str(history)]) == 2
    assert message in capsys.readouterr().err
    assert not history.exists()


def test_ack_without_reason_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["ack", HOST])
    assert stopped.value.code == 2 and "--reason" in capsys.readouterr().err
