"""A fleet command says why (issue 48 item 2): a failed step shows its real message, whole, and a host name
that cannot name a directory or could be read as an option is refused before any play starts, exit 2,
naming the host and the rule it broke. Also where tunefleet.gpu_node resolves from (item 1)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verify.fleet import run as fleet_run
from verify.fleet.run import Progress, collection_root, failure_message, link_collection, word_cut

REPO = Path(__file__).resolve().parents[2]
TUNEFLEET = [sys.executable, "-m", "verify"]

# ansible.builtin.command's result when the command exits non-zero (ansible-core 2.19): the reason is
# only in stderr; msg is Ansible's generic line. The stderr is verify.fleet.rundir's own refusal.
COMMAND_FAILED = {
    "changed": True, "cmd": ["/usr/bin/python3", "-I", "-B", "-c", "...", "verify.fleet.rundir"],
    "delta": "0:00:00.061", "msg": "non-zero return code", "rc": 2, "stdout": "", "stdout_lines": [],
    "stderr": "run directory: inventory host name '../../x' cannot name a directory: it must be one path "
              "component (no '/', not '.' or '..', not empty)",
}
# tunefleet.gpu_node.preflight's failure: one problem a line.
PREFLIGHT_FAILED = {
    "changed": False,
    "msg": "preflight refused this host, nothing was changed:\n"
           "host gpu01: network_mtu = 99999: outside 68..65535\n"
           "host gpu01: sysctl_settings['vm.swappiness'] = 201: 201 is outside 0..200",
}


def test_a_command_that_failed_shows_its_stderr_not_ansibles_generic_line():
    said = failure_message(COMMAND_FAILED)
    assert said.startswith("non-zero return code: run directory: inventory host name '../../x'")
    assert said.endswith("(no '/', not '.' or '..', not empty)")


def test_every_line_of_a_modules_message_is_kept_under_its_host():
    lines = []
    progress = Progress(write=lines.append)
    progress({"event": "runner_on_failed", "event_data": {"host": "gpu01", "task": "Refuse inputs",
                                                          "res": PREFLIGHT_FAILED}})
    shown = "\n".join(lines)
    assert "network_mtu = 99999: outside 68..65535" in shown and "201 is outside 0..200" in shown
    first, *rest = shown.splitlines()
    assert first.split()[:2] == ["gpu01", "FAILED"] and all(line.startswith(" " * 30) for line in rest)


def test_a_failed_loop_says_which_items_failed_and_why():
    res = {"msg": "One or more items failed", "results": [
        {"failed": False, "item": "a"}, {"failed": True, "msg": "non-zero return code", "stderr": "b: no such file"}]}
    assert failure_message(res) == "non-zero return code: b: no such file"


@given(st.text(alphabet=st.sampled_from("ab é\t-"), max_size=900), st.integers(min_value=5, max_value=400))
def test_a_long_line_is_cut_between_words_never_inside_one(text, limit):
    cut = word_cut(text, limit)
    if len(text) <= limit:
        assert cut == text
        return
    assert cut.endswith(" …") and len(cut) <= limit + 2
    head = cut[:-2]
    rest = text[len(head):]
    # What is kept ends where a word ends: only a first word longer than the limit is cut inside.
    assert text.startswith(head) and (rest[:1].isspace() or " " not in text[:limit])


def write_inventory(tmp_path: Path, host: str) -> Path:
    inventory = tmp_path / "hosts"
    inventory.write_text(f"{host} ansible_connection=local\n")
    return inventory


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["verify", "site", "restore"])
@pytest.mark.parametrize("host, rule", [
    ("../../x", "it must be one path component (no '/', not '.' or '..', not empty)"),
    ("-oProxyCommand=x", "could be read as an option or split by a tool"),
])
def test_a_host_name_that_breaks_a_rule_is_refused_before_any_play(tmp_path, verb, host, rule):
    inventory = write_inventory(tmp_path, host)
    argv = [*TUNEFLEET, verb, "-i", str(inventory)]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TUNEFLEET_HISTORY": str(tmp_path / "h.sqlite")})
    assert done.returncode == 2, done.stderr
    assert f"host name {host!r}" in done.stderr and rule in done.stderr
    assert "PLAY" not in done.stdout and not (tmp_path / "reports").exists()


def test_an_installed_collection_is_its_own_root(tmp_path):
    home = tmp_path / "cols" / "ansible_collections" / "tunefleet" / "gpu_node"
    assert collection_root(home, str(tmp_path / "scratch")) == tmp_path / "cols"
    env = fleet_run.ansible_env(home, collections=collection_root(home))
    assert env["ANSIBLE_COLLECTIONS_PATH"].split(":")[0] == str(tmp_path / "cols")


def test_a_checkout_is_linked_as_the_collection_in_the_runs_private_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", "/home/someone/collections")  # the caller's: never read
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o700)
    root = collection_root(REPO, str(scratch))
    link_collection(REPO, root)
    link = root / "ansible_collections" / "tunefleet" / "gpu_node"
    assert link.is_symlink() and link.resolve() == REPO.resolve()
    assert (link / "plugins" / "filter").is_dir()  # tunefleet.gpu_node.* filters resolve through it
    link_collection(REPO, root)  # a second run in the same directory keeps it
    env = fleet_run.ansible_env(REPO, collections=root)
    assert env["ANSIBLE_COLLECTIONS_PATH"].split(":") == [str(root), *fleet_run.DEFAULT_COLLECTION_PATHS]
    assert "/home/someone" not in " ".join(env.values())
