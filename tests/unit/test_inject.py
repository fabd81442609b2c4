"""verify.inject: captured outputs answer their commands, every other command runs for real, and a
directory that is not trusted or holds a malformed capture is refused with its name."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from verify.inject import InjectionError, load
from verify.node import Node

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "health" / "h100x1" / "cmd"


def captured(tmp_path: Path, *names: str) -> Path:
    """A private directory holding the real H100 captures `names` (argv, stdout, stderr, rc)."""
    directory = tmp_path / "inject"
    directory.mkdir(mode=0o700)
    for name in names:
        for suffix in ("argv", "stdout", "stderr", "rc"):
            source = HEALTH / f"{name}.{suffix}"
            if source.exists():
                shutil.copy(source, directory / source.name)
    return directory


def test_a_captured_command_is_answered_and_any_other_runs_for_real(tmp_path):
    runner = load(str(captured(tmp_path, "dmesg-kernel", "nvlink-s")))
    node = Node(runner=runner)
    out = node.run(["dmesg", "--kernel"])
    assert out.ok and out.stdout == (HEALTH / "dmesg-kernel.stdout").read_text()
    real = node.run(["sh", "-c", "echo live"])
    assert real.ok and real.stdout == "live\n"
    assert runner.answered == ["dmesg-kernel"]


def test_a_match_capture_answers_any_command_line_it_matches(tmp_path):
    directory = captured(tmp_path)
    (directory / "query.match").write_text(r"nvidia-smi --query-gpu=\S+ --format=csv" + "\n")
    (directory / "query.stdout").write_text("index, name\n0, NVIDIA H100 80GB HBM3\n")
    (directory / "query.rc").write_text("0\n")
    runner = load(str(directory))
    out = runner(["nvidia-smi", "--query-gpu=index,name,remapped_rows.pending", "--format=csv"])
    assert out.stdout.endswith("NVIDIA H100 80GB HBM3\n") and out.returncode == 0
    assert runner(["nvidia-smi", "-q"], timeout_s=5).stdout != out.stdout


def test_the_exit_status_of_a_capture_is_kept(tmp_path):
    directory = captured(tmp_path, "nvlink-s")
    (directory / "nvlink-s.rc").write_text("9\n")
    assert load(str(directory))(["nvidia-smi", "nvlink", "-s"]).returncode == 9


@pytest.mark.parametrize("file, content, said", [
    ("nvlink-s.rc", "nine\n", "nvlink-s.rc holds 'nine'"),
    ("nvlink-s.argv", "\n", "nvlink-s: empty command"),
    ("bad.match", "nvidia-smi (\n", "bad.match"),
])
def test_a_malformed_capture_is_refused_naming_its_file(tmp_path, file, content, said):
    directory = captured(tmp_path, "nvlink-s")
    (directory / file).write_text(content)
    with pytest.raises(InjectionError, match=said.replace("(", r"\(")):
        load(str(directory))


def test_an_empty_directory_is_refused(tmp_path):
    with pytest.raises(InjectionError, match="no <name>.argv"):
        load(str(captured(tmp_path)))


def test_a_directory_others_can_write_is_refused(tmp_path):
    directory = captured(tmp_path, "nvlink-s")
    os.chmod(directory, 0o777)
    with pytest.raises(InjectionError, match="--inject"):
        load(str(directory))


def test_a_symlinked_capture_is_never_followed(tmp_path):
    directory = captured(tmp_path, "nvlink-s")
    secret = tmp_path / "secret"
    secret.write_text("not a capture\n")
    os.remove(directory / "nvlink-s.stdout")
    os.symlink(secret, directory / "nvlink-s.stdout")
    with pytest.raises(InjectionError, match="symlink"):
        load(str(directory))
