"""Limits as a login session and as systemd services get them, from Debian 12's real files
(tests/fixtures/node/etc, copied from this machine) plus drop-ins written by each test."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner, load
from verify.checks import limits
from verify.result import Status

ETC = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "etc"


def debian_tree(tmp_path) -> FakeTree:
    tree = FakeTree(tmp_path)
    tree.write("/etc/security/limits.conf", (ETC / "limits.conf.debian12").read_text())
    tree.write("/etc/systemd/system.conf", (ETC / "system.conf.debian12").read_text())
    return tree.write("/proc/sys/fs/nr_open", "1048576\n")


TUNED = """# tunefleet
*     soft memlock unlimited
*     hard memlock unlimited
root  -    memlock unlimited
*     -    nofile  1048576
root  -    nofile  1048576
*     -    nproc   unlimited
root  -    nproc   unlimited
*     -    stack   65536
root  -    stack   65536
"""


def by_id(results):
    return {r.check_id: r for r in results}


def test_stock_debian_sets_nothing(tmp_path):
    results = by_id(limits.run(desired_state(), debian_tree(tmp_path).node()))
    memlock = results["limits.login.memlock"]
    assert memlock.status is Status.FAIL and "no limits.conf(.d) entry sets memlock" in memlock.reason
    assert "limits_memlock" in memlock.remediation
    assert results["limits.systemd_memlock"].status is Status.FAIL  # only commented defaults in system.conf


def test_tuned_drop_in_passes_for_users_and_root(tmp_path):
    tree = debian_tree(tmp_path).write("/etc/security/limits.d/90-tunefleet.conf", TUNED)
    tree.write("/etc/systemd/system.conf.d/90-tunefleet.conf",
               "[Manager]\nDefaultLimitMEMLOCK=infinity\nDefaultLimitNOFILE=1048576\n")
    results = by_id(limits.run(desired_state(), tree.node()))
    assert {r.status for r in results.values()} == {Status.PASS}, {k: r.reason for k, r in results.items()}


def test_star_does_not_cover_root(tmp_path):
    only_star = "\n".join(line for line in TUNED.splitlines() if not line.startswith("root"))
    tree = debian_tree(tmp_path).write("/etc/security/limits.d/90-tunefleet.conf", only_star)
    result = by_id(limits.run(desired_state(), tree.node()))["limits.login.memlock"]
    assert result.status is Status.FAIL
    assert result.observed == {"users (*)": "unlimited", "root": "not set"}


def test_later_file_wins_but_a_named_user_outranks_star(tmp_path):
    entries = limits.parse_limits_lines("*  -  nofile 1024\nnobody - nofile 4096\n") + \
        limits.parse_limits_lines("*  -  nofile 1048576\n")  # a later file, lower rank than the name
    effective = limits.effective(entries, "nobody", nr_open=1048576)
    assert effective["nofile"].soft == 4096
    assert limits.effective(entries, "someone", nr_open=1048576)["nofile"].soft == 1048576


def test_unlimited_nofile_means_nr_open_and_hard_below_soft_fails(tmp_path):
    assert limits.normalize("unlimited", "nofile", 1048576) == 1048576
    assert limits.normalize("-1", "memlock", None) == limits.INFINITY
    users = limits.Limit(soft=limits.INFINITY, hard=65536)
    result = limits.judge_login("memlock", limits.INFINITY, users, users, None)
    assert result.status is Status.FAIL and "hard memlock 65536" in result.reason


def test_drop_ins_sort_by_name_and_etc_overrides_lib(tmp_path):
    tree = debian_tree(tmp_path)
    tree.write("/usr/lib/systemd/system.conf.d/50-x.conf", "[Manager]\nDefaultLimitNOFILE=2048\n")
    tree.write("/etc/systemd/system.conf.d/50-x.conf", "[Manager]\nDefaultLimitNOFILE=1048576\n")
    tree.write("/run/systemd/system.conf.d/10-a.conf", "[Manager]\nDefaultLimitMEMLOCK=64M\n")
    found = limits.parse_systemd_conf(limits.systemd_conf_texts(tree.node()))
    assert found == {"NOFILE": "1048576", "MEMLOCK": "64M"}
    assert limits.systemd_value("64M", "MEMLOCK") == 64 * 2**20
    assert limits.systemd_value("1024:524288", "NOFILE") == 1024


def test_running_manager_behind_the_files_says_daemon_reexec(tmp_path):
    tree = debian_tree(tmp_path).write("/etc/security/limits.d/90-tunefleet.conf", TUNED)
    tree.write("/etc/systemd/system.conf.d/90-tunefleet.conf",
               "[Manager]\nDefaultLimitMEMLOCK=infinity\nDefaultLimitNOFILE=1048576\n")
    # captured in a systemd container after writing the drop-in, before `systemctl daemon-reexec`
    runner = ReplayRunner({"systemctl": load("systemctl_show_before_reexec"), "su": load("su_nobody_ulimits")})
    node = tree.node(runner=runner, live=True)
    node.probe_login = True
    results = by_id(limits.run(desired_state(), node))
    nofile = results["limits.systemd_nofile"]
    assert nofile.status is Status.FAIL and "daemon-reexec" in nofile.reason
    assert nofile.observed == {"configured": "1048576", "running manager": "1024"}
    # the su probe (captured on this machine) is recorded, not judged
    assert results["limits.login.memlock"].details["su -l nobody"] == "8192"


def test_no_systemd_falls_back_to_files(tmp_path):
    tree = debian_tree(tmp_path)
    runner = ReplayRunner({"systemctl": load("systemctl_show_no_systemd")})
    assert limits.running_manager(tree.node(runner=runner, live=True)) is None


@pytest.mark.parametrize("value", ["lots", "12Q", ""])
def test_bad_systemd_values_raise(value):
    with pytest.raises(limits.LimitsParseError):
        limits.systemd_value(value, "NOFILE")


def test_after_daemon_reexec_the_running_manager_agrees(tmp_path):
    tree = debian_tree(tmp_path).write("/etc/systemd/system.conf.d/90-tunefleet.conf",
                                       "[Manager]\nDefaultLimitMEMLOCK=infinity\nDefaultLimitNOFILE=1048576\n")
    runner = ReplayRunner({"systemctl": load("systemctl_show_after_reexec")})
    results = by_id(limits.run(desired_state(), tree.node(runner=runner, live=True)))
    for key in ("limits.systemd_memlock", "limits.systemd_nofile"):
        assert results[key].status is Status.PASS, results[key].reason
    assert results["limits.systemd_memlock"].observed == {"configured": "unlimited", "running manager": "unlimited"}


def test_stock_manager_without_config_is_judged_by_what_it_runs(tmp_path):
    runner = ReplayRunner({"systemctl": load("systemctl_show_debian12_stock")})
    results = by_id(limits.run(desired_state(), debian_tree(tmp_path).node(runner=runner, live=True)))
    nofile = results["limits.systemd_nofile"]
    assert nofile.status is Status.FAIL and nofile.observed["running manager"] == "1024"
