"""limits above the recommendation are kept (issue 26 item 7): verify PASSes them and says so.
Debian 12's real limits.conf and system.conf (tests/fixtures/node/etc) plus a drop-in per test."""
from __future__ import annotations

from tests.helpers.fake_node import desired_state
from tests.unit.test_checks_limits import debian_tree
from verify.checks import limits
from verify.result import Status

ABOVE = """*     -    memlock unlimited
root  -    memlock unlimited
*     -    nofile  1048576
root  -    nofile  1048576
*     -    nproc   4194304
root  -    nproc   4194304
*     -    stack   unlimited
root  -    stack   unlimited
"""


def test_limits_above_the_recommendation_pass_and_say_kept(tmp_path):
    tree = debian_tree(tmp_path).write("/etc/security/limits.d/95-site.conf", ABOVE)
    tree.write("/etc/systemd/system.conf.d/95-site.conf",
               "[Manager]\nDefaultLimitMEMLOCK=infinity\nDefaultLimitNOFILE=1048576\n")
    spec = desired_state(limits={"group": "*", "nproc": 65536, "stack": 65536, "nofile": 524288,
                                 "systemd_nofile": 524288})
    results = {r.check_id: r for r in limits.run(spec, tree.node())}
    assert results["limits.login.nproc"].status is Status.PASS
    assert "4194304 is above the recommended 65536: kept" in results["limits.login.nproc"].reason
    assert results["limits.login.stack"].status is Status.PASS  # unlimited is above 65536
    assert results["limits.login.nofile"].status is Status.PASS
    assert results["limits.systemd_nofile"].status is Status.PASS
    assert "1048576 is above the recommended 524288: kept" in results["limits.systemd_nofile"].reason


def test_limits_below_the_recommendation_still_fail(tmp_path):
    tree = debian_tree(tmp_path).write("/etc/security/limits.d/95-site.conf", ABOVE.replace("4194304", "1024"))
    spec = desired_state(limits={"group": "*", "nproc": 65536})
    nproc = {r.check_id: r for r in limits.run(spec, tree.node())}["limits.login.nproc"]
    assert nproc.status is Status.FAIL and "soft nproc 1024" in nproc.reason


def test_a_finite_limit_is_below_unlimited(tmp_path):
    users = limits.Limit(soft=1 << 40, hard=1 << 40)
    assert limits.judge_login("memlock", limits.INFINITY, users, users, None).status is Status.FAIL
