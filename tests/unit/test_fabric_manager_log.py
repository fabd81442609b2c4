"""The Fabric Manager's own errors where the node runs it (issue 46 item 6): its log's lines of this boot are
judged (a fatal NVSwitch error FAIL reboot, a non-fatal one or any other ERROR line WARN watch), lines from
before the boot are history, a log present but unreadable is ERROR, no log and no error pass. The lines are the
ones leptonai/gpud quotes from its nodes (tests/fixtures/node/health/public/README.md)."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_fabric_checks import HGX, node
from verify.checks import health_fabric
from verify.facts import fabric
from verify.judging import verdicts
from verify.result import Status

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health" / "public"
FM_LOG = (PUBLIC / "fabricmanager-log_faulty_gpud-log-examples.txt").read_text()
BEFORE_THE_LINES = 1_700_000_000  # Nov 2023: every line is of this boot
AFTER_THE_LINES = 1_800_000_000  # 2027: every line is from an earlier boot


def manager_row(tmp_path, log=None, btime=BEFORE_THE_LINES, state="active\n"):
    checked = node(tmp_path, HGX, manager_state=state)
    tree_root = Path(checked.root)
    (tree_root / "proc").mkdir(exist_ok=True)
    (tree_root / "proc" / "stat").write_text(f"cpu  1 2 3\nbtime {btime}\n")
    if log is not None:
        (tree_root / "var" / "log").mkdir(parents=True, exist_ok=True)
        if log == "a directory":
            (tree_root / "var" / "log" / "fabricmanager.log").mkdir()
        else:
            (tree_root / "var" / "log" / "fabricmanager.log").write_text(log)
    return health_fabric.run({}, checked)[-1]


def test_a_fatal_nvswitch_error_this_boot_fails_reboot(tmp_path):
    row = manager_row(tmp_path, FM_LOG)
    assert row.check_id == "health.fabric.manager" and row.status is Status.FAIL
    assert row.details["action"] == verdicts.REBOOT and "NVSwitch fatal error 20034" in row.reason


def test_a_non_fatal_error_alone_is_watched(tmp_path):
    row = manager_row(tmp_path, FM_LOG.splitlines()[0] + "\n")
    assert row.status is Status.WARN and row.details["action"] == verdicts.WATCH
    assert "non-fatal error 12028 (1x this boot" in row.reason


def test_lines_of_an_earlier_boot_are_history_and_no_log_passes(tmp_path):
    assert manager_row(tmp_path / "old", FM_LOG, btime=AFTER_THE_LINES).status is Status.PASS
    assert manager_row(tmp_path / "none").status is Status.PASS


def test_a_log_present_but_unreadable_is_error(tmp_path):
    row = manager_row(tmp_path, "a directory")
    assert row.status is Status.ERROR and row.reason.startswith("could not read /var/log/fabricmanager.log")


def test_the_manager_down_names_what_it_logged(tmp_path):
    row = manager_row(tmp_path, FM_LOG, state="failed\n")
    assert row.status is Status.FAIL and "is failed" in row.reason and "fatal error 20034" in row.reason


@given(st.text(max_size=400))
@settings(max_examples=200, deadline=None)
def test_the_log_reader_is_total(text):
    for line in fabric.parse_manager_log(text):
        assert line.level.isupper()
    health_fabric.manager_log_findings(fabric.parse_manager_log(text))
