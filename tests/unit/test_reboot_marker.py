"""The reboot_marker module on a fake node root: write, keep, remove, corrupt markers, symlinks, check mode."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.helpers.plugins import load_plugin

reboot_marker = load_plugin("modules", "reboot_marker")

BOOT = "6f1d2c3b-0a9e-4e7d-8c21-5b4a3f2e1d0c"
EARLIER_BOOT = "00000000-0000-0000-0000-000000000000"
MARKER = "/var/lib/tunefleet/reboot-required"
REASON = "memory: 1 GiB huge pages are reserved on the kernel command line"
# What the role's copy task wrote (to_nice_json + newline): existing markers must stay byte-identical.
WRITTEN = ('{\n    "boot_id": "6f1d2c3b-0a9e-4e7d-8c21-5b4a3f2e1d0c",\n    "reasons": [\n'
           '        "memory: 1 GiB huge pages are reserved on the kernel command line"\n    ]\n}\n')


@pytest.fixture
def root(tmp_path) -> Path:
    node = tmp_path / "node"
    boot_id = node / "proc/sys/kernel/random/boot_id"
    boot_id.parent.mkdir(parents=True)
    boot_id.write_text(BOOT + "\n")
    return node


def marker(root: Path) -> Path:
    return root / MARKER.lstrip("/")


def put_marker(root: Path, content: str | bytes, mode: int = 0o600) -> Path:
    path = marker(root)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    path.chmod(mode)
    return path


def apply(root: Path, reasons=(), forget_earlier=False, check_mode=False) -> dict:
    return reboot_marker.apply(str(root), MARKER, list(reasons), forget_earlier, check_mode)


def test_reasons_are_written_root_only_and_byte_identical_to_the_old_role(root):
    result = apply(root, [REASON])
    path = marker(root)
    assert path.read_text() == WRITTEN
    assert json.loads(WRITTEN) == {"reasons": [REASON], "boot_id": BOOT}
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert (result["changed"], result["action"], result["pending"]) == (True, "written", [REASON])
    assert result["diff"]["before"] == "" and result["diff"]["after"] == WRITTEN
    assert os.listdir(path.parent) == ["reboot-required"]  # no temporary file left behind


def test_the_same_marker_again_changes_nothing(root):
    apply(root, [REASON])
    inode = marker(root).stat().st_ino
    result = apply(root, [REASON])
    assert (result["changed"], result["action"], result["pending"]) == (False, "unchanged", [REASON])
    assert marker(root).stat().st_ino == inode  # not rewritten
    assert "diff" not in result


def test_other_reasons_or_a_loose_mode_are_rewritten(root):
    put_marker(root, WRITTEN, mode=0o644)
    assert apply(root, [REASON])["changed"]
    assert oct(marker(root).stat().st_mode & 0o777) == "0o600"
    result = apply(root, ["cpu: isolcpus"])
    assert result["changed"] and json.loads(marker(root).read_text())["reasons"] == ["cpu: isolcpus"]


def test_a_loose_state_directory_is_made_root_only(root):
    put_marker(root, WRITTEN)
    marker(root).parent.chmod(0o755)
    result = apply(root, [REASON])
    assert result["changed"] and result["action"] == "unchanged"
    assert oct(marker(root).parent.stat().st_mode & 0o777) == "0o700"


def test_a_marker_from_an_earlier_boot_is_removed(root):
    put_marker(root, json.dumps({"reasons": ["memory: old"], "boot_id": EARLIER_BOOT}))
    result = apply(root)
    assert not marker(root).exists()
    assert (result["changed"], result["action"], result["pending"]) == (True, "removed", [])
    assert result["earlier_marker"] == "earlier_boot"


def test_a_marker_from_this_boot_is_kept_and_still_pending(root):
    put_marker(root, WRITTEN)
    result = apply(root)
    assert marker(root).read_text() == WRITTEN
    assert (result["changed"], result["action"], result["pending"]) == (False, "kept", [REASON])


def test_a_kept_marker_without_reasons_still_says_a_reboot_is_needed(root):
    put_marker(root, json.dumps({"boot_id": BOOT}))
    assert apply(root)["pending"] == ["an earlier run"]


def test_forget_earlier_removes_a_marker_from_this_boot(root):
    put_marker(root, WRITTEN)
    result = apply(root, forget_earlier=True)
    assert not marker(root).exists()
    assert (result["changed"], result["pending"]) == (True, [])


def test_forget_earlier_does_not_stop_this_runs_reasons(root):
    result = apply(root, [REASON], forget_earlier=True)
    assert marker(root).read_text() == WRITTEN and result["pending"] == [REASON]


def test_no_reasons_and_no_marker_touches_nothing(root):
    result = apply(root)
    assert (result["changed"], result["action"], result["pending"]) == (False, "none", [])
    assert not marker(root).parent.exists()


@pytest.mark.parametrize("content, problem", [
    (b'{"reasons": ["memory: 1 GiB', "not JSON"),          # truncated by a crash mid-write
    (b"\xff\xfe{}", "not UTF-8"),
    (b'["memory: x"]', "not a JSON object"),
    (b'{"reasons": ["x"], "boot_id": 5}', "boot_id is 5"),
    (f'{{"reasons": "x", "boot_id": "{BOOT}"}}'.encode(), "reasons is not a list"),
    (b" " * (70 * 1024), "larger than"),
])
def test_a_corrupt_marker_counts_as_an_unknown_earlier_boot(root, content, problem):
    put_marker(root, content)
    result = apply(root)
    assert not marker(root).exists()
    assert result["earlier_marker"] == "unknown_boot" and problem in result["earlier_problem"]
    assert (result["pending"], result["action"]) == ([], "removed")
    put_marker(root, content)
    result = apply(root, [REASON])
    assert marker(root).read_text() == WRITTEN and result["action"] == "written"


def test_a_symlink_at_the_marker_path_is_never_followed(root, tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text(json.dumps({"reasons": ["root:$6$secret"], "boot_id": BOOT}))
    marker(root).parent.mkdir(parents=True, mode=0o700)
    marker(root).symlink_to(secret)
    result = apply(root)
    assert "root:$6$secret" not in json.dumps(result)  # not read through the link
    assert "symlink" in result["earlier_problem"]
    assert not os.path.lexists(marker(root)) and secret.exists()

    marker(root).symlink_to(secret)
    before = secret.read_text()
    apply(root, [REASON])
    assert not marker(root).is_symlink() and marker(root).read_text() == WRITTEN
    assert secret.read_text() == before  # the write replaced the link, not its target


def test_check_mode_writes_nothing_and_shows_the_marker_it_would_write(root):
    result = apply(root, [REASON], check_mode=True)
    assert not marker(root).parent.exists()
    assert (result["changed"], result["pending"]) == (True, [REASON])
    assert result["diff"] == {"before": "", "after": WRITTEN, "before_header": MARKER, "after_header": MARKER}


def test_check_mode_removes_nothing_and_shows_what_would_go(root):
    stale = json.dumps({"reasons": ["memory: old"], "boot_id": EARLIER_BOOT})
    put_marker(root, stale, mode=0o640)
    marker(root).parent.chmod(0o755)
    result = apply(root, check_mode=True)
    assert marker(root).read_text() == stale
    assert (result["changed"], result["action"], result["diff"]["before"], result["diff"]["after"]) == (
        True, "removed", stale, "")
    apply(root, [REASON], check_mode=True)
    assert marker(root).read_text() == stale
    assert oct(marker(root).parent.stat().st_mode & 0o777) == "0o755"


def test_a_directory_at_the_marker_path_is_refused_before_any_change(root):
    marker(root).mkdir(parents=True)
    with pytest.raises(reboot_marker.MarkerError, match=f"reboot_marker_path {MARKER}: is not a regular file"):
        apply(root, [REASON])
    assert marker(root).is_dir()


def test_without_a_boot_id_nothing_is_dated_or_changed(root):
    (root / "proc/sys/kernel/random/boot_id").unlink()
    with pytest.raises(reboot_marker.MarkerError, match="/proc/sys/kernel/random/boot_id cannot be read"):
        apply(root, [REASON])
    assert not marker(root).parent.exists()


@pytest.mark.parametrize("path", ["var/lib/tunefleet/reboot-required", "/var/lib/../tmp/reboot-required"])
def test_a_bad_marker_path_is_named(root, path):
    with pytest.raises(reboot_marker.MarkerError, match=f"reboot_marker_path '{path}'"):
        reboot_marker.apply(str(root), path, [REASON], False, False)


def run_main(capsys, **args) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        reboot_marker.main()
    return json.loads(capsys.readouterr().out)


def test_main_in_check_mode_with_diff(root, capsys):
    result = run_main(capsys, root=str(root), path=MARKER, reasons=[REASON],
                      _ansible_check_mode=True, _ansible_diff=True)
    assert result["changed"] and result["pending"] == [REASON] and result["diff"]["after"] == WRITTEN
    assert not marker(root).parent.exists()


def test_main_fails_with_the_reason_not_a_traceback(root, capsys):
    marker(root).mkdir(parents=True)
    result = run_main(capsys, root=str(root), path=MARKER, reasons=[REASON])
    assert result["failed"] and "is not a regular file" in result["msg"]
