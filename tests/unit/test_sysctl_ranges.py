"""The preflight's sysctl rules without the kernel: the model row each kernel version gets, the
fallback when the kernel cannot be asked, and the one namespace a whole run asks. The running
kernel's own answers are compared in test_preflight_kernel.py."""
from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import sysctl_ranges as sr  # noqa: E402


def tree(tmp_path: Path, release: str) -> str:
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text(release + "\n")
    return str(tmp_path)


def test_each_version_gets_the_row_since_which_it_holds():
    assert sr.modelled_range("vm.swappiness", "5.4.0-150-generic").high == 100
    assert sr.modelled_range("vm.swappiness", "5.8.0").high == 200
    assert sr.modelled_range("kernel.numa_balancing", "5.15.0-91-generic").high == 1
    assert sr.modelled_range("kernel.numa_balancing", "6.8.0-45-generic").high == 4
    assert sr.modelled_range("net.ipv4.tcp_rmem", "6.17.0").low == 1
    assert sr.modelled_range("net.ipv4.tcp_rmem", "6.18.44-fc-v669").low == 4096


@given(st.text(max_size=40))
def test_a_release_that_names_no_version_gets_the_strictest_row(release):
    """osrelease as any text: never raises; no version means the row with the highest floor."""
    version = sr.kernel_version(release)
    rule = sr.modelled_range("net.ipv4.tcp_rmem", release)
    if version is None:
        assert rule.low == 4096
    else:
        assert rule in sr.MODEL["net.ipv4.tcp_rmem"]


def test_a_tree_is_judged_by_its_kernels_model_and_never_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(sr, "probe", lambda candidates: (_ for _ in ()).throw(AssertionError("asked")))
    old = sr.KernelRanges(tree(tmp_path, "5.4.0-150-generic"), [("vm.swappiness", 150)])
    assert "150 is outside 0..100, which this kernel (5.4.0-150-generic) refuses" in old.problem("vm.swappiness", 150)
    assert old.problem("net.ipv4.tcp_rmem", "1 1 1") is None
    assert old.problem("net.ipv4.tcp_rmem", "1 1") == "this key holds 3 integer(s)"
    assert old.problem("net.ipv4.ip_local_port_range", "3000 2000").startswith("the first port 3000 is above")
    assert old.problem("net.no.such_key", "x") is None


def test_the_running_kernels_answers_win_over_the_model(monkeypatch):
    """One namespace for the whole run; a refusal is the kernel's text, a take overrides a stricter model."""
    asked = []

    def probe(candidates):
        candidates = list(candidates)
        asked.append(candidates)
        return ["Invalid argument" if value == "1 1 1" else True for _key, value, _before in candidates]

    monkeypatch.setattr(sr, "probe", probe)
    kernel = sr.KernelRanges("/", [("net.ipv4.tcp_rmem", "1 1 1"), ("net.ipv4.tcp_wmem", "2 2 2"),
                                   ("net.ipv4.ip_local_port_range", "1024\t65535"), ("vm.swappiness", 10)])
    assert len(asked) == 1 and [c[0] for c in asked[0]] == [
        "net.ipv4.ip_local_port_range", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"]  # vm.* is host-wide: never asked
    assert asked[0][0][2] == [(sr.PORT_FLOOR_KEY, "0")]  # the floor is the caller's rule, opened in the namespace
    assert "(asked in a throwaway network namespace: Invalid argument)" in kernel.problem(
        "net.ipv4.tcp_rmem", "1 1 1")
    assert kernel.problem("net.ipv4.tcp_wmem", "2 2 2") is None


def test_a_refusal_the_model_explains_says_why_and_keeps_the_kernels_answer(monkeypatch):
    # molecule/default: '3000 2000' must say the first port is above the last, not only "Invalid argument".
    monkeypatch.setattr(sr, "probe", lambda candidates: ["Invalid argument" for _ in list(candidates)])
    kernel = sr.KernelRanges("/", [("net.ipv4.ip_local_port_range", "3000 2000")])
    problem = kernel.problem("net.ipv4.ip_local_port_range", "3000 2000")
    assert problem.startswith("the first port 3000 is above the last 2000")
    assert "(asked in a throwaway network namespace: Invalid argument)" in problem


def test_without_root_nothing_is_asked_and_the_model_judges(monkeypatch):
    monkeypatch.setattr(sr.os, "geteuid", lambda: 1000)
    assert sr.probe([("net.ipv4.tcp_rmem", "1 1 1", [])]) == [None]
    kernel = sr.KernelRanges("/", [("net.ipv4.tcp_rmem", "0 1 1")])
    assert kernel.answers == {}
    assert "0 is outside" in kernel.problem("net.ipv4.tcp_rmem", "0 1 1")
