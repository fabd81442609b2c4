"""The registry turns any exception into one ERROR result; malformed node files never crash a run."""
from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.fake_node import FakeTree, desired_state
from verify import checks
from verify.checks import ethtool_params, limits, nccl_conf, path_mtu, peermem
from verify.facts import gpu_query
from verify.result import Status


def test_every_registered_check_runs_on_an_empty_tree(tmp_path):
    results = checks.run_checks(desired_state(), FakeTree(tmp_path).node())
    errors = [r for r in results if r.status is Status.ERROR]
    assert len(results) > 10
    assert all(r.check_id.startswith("sysctl.") for r in errors)  # keys this empty "kernel" lacks


def test_a_check_that_raises_becomes_one_error(tmp_path, monkeypatch):
    monkeypatch.setitem(checks.REGISTRY, "memory", ("memory", "verify.checks.memory:run"))
    monkeypatch.setattr("verify.checks.memory.run", lambda spec, node: 1 / 0)
    timings: dict = {}
    results = checks.run_checks(desired_state(), FakeTree(tmp_path).node(), names=["memory", "cpu.governor"],
                                timings=timings)
    assert results[0].check_id == "memory" and results[0].status is Status.ERROR
    assert "ZeroDivisionError" in results[0].reason
    assert results[1].check_id == "cpu.governor"  # the run went on
    assert set(timings) == {"memory", "cpu.governor"}


def test_a_module_not_there_yet_is_an_error_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setitem(checks.REGISTRY, "safety.conflicts", ("safety", "verify.checks.not_written_yet:run"))
    result = checks.run_checks(desired_state(), FakeTree(tmp_path).node(), names=["safety.conflicts"])[0]
    assert result.status is Status.ERROR and "ModuleNotFoundError" in result.reason


def test_a_check_returning_the_wrong_type_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr("verify.checks.cpu.run", lambda spec, node: "PASS")
    result = checks.run_checks(desired_state(), FakeTree(tmp_path).node(), names=["cpu.governor"])[0]
    assert result.status is Status.ERROR and "not a list of CheckResult" in result.reason


GARBAGE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
INT_FILES = ("/sys/class/net/ens1/mtu", "/sys/block/nvme0n1/queue/read_ahead_kb",
             "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "/proc/sys/fs/nr_open")
CHOICE_FILES = ("/sys/block/nvme0n1/queue/scheduler", "/sys/kernel/mm/transparent_hugepage/enabled")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(GARBAGE, min_size=len(INT_FILES) + len(CHOICE_FILES) + 3,
                       max_size=len(INT_FILES) + len(CHOICE_FILES) + 3))
def test_malformed_node_files_give_error_never_a_crash(values):
    root = Path(tempfile.mkdtemp())
    try:
        tree = FakeTree(root).nic("ens1", irqs={100: values[0]})
        for path, value in zip(INT_FILES + CHOICE_FILES, values[1:]):
            tree.write(path, value)
        tree.write("/etc/security/limits.d/90-x.conf", f"* - nofile {values[-2]}\n")
        tree.write("/etc/systemd/system.conf", f"[Manager]\nDefaultLimitNOFILE={values[-1]}\n")
        results = checks.run_checks(desired_state(), tree.node())
        assert all(isinstance(r.status, Status) for r in results)
        mtu = next(r for r in results if r.check_id in ("network.mtu", "network.mtu.ens1"))
        if not re.fullmatch(r"-?[0-9]+", values[1].strip()):
            assert mtu.status is Status.ERROR, mtu
    finally:
        shutil.rmtree(root)


PARSERS = [
    (lambda t: path_mtu.parse_ping(t, t), ValueError),
    (lambda t: ethtool_params.parse_sections(t, ethtool_params.RING_KEYS), ValueError),
    (gpu_query.parse_smi_csv, ValueError),
    (gpu_query.parse_driver_banner, ValueError),
    (nccl_conf.parse_nccl_conf, ValueError),
    (limits.parse_limits_lines, ValueError),
    (limits.parse_probe, ValueError),
    (lambda t: limits.parse_systemd_conf([t]), ValueError),
    (peermem.kernel_version, ValueError),
]


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_parsers_answer_or_raise_their_parse_error(text):
    for parse, allowed in PARSERS:
        with contextlib.suppress(allowed):  # any other exception fails the test
            parse(text)
