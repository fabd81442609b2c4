"""The limits role no longer lifts nproc for every login user of a shared node: memlock stays
unlimited for everyone (RDMA registration), the rest is for the group the inventory names, and
nproc is finite by default. Judged with pam_limits' own precedence (verify.checks.limits)."""
from __future__ import annotations

from pathlib import Path

import yaml

from tests.unit.test_role_limits import defaults_as_checked, render
from verify.checks.limits import INFINITY, effective, parse_limits_lines

ROOT = Path(__file__).resolve().parents[2]


def entries(group: str) -> list:
    return parse_limits_lines(render("limits.conf.j2", defaults_as_checked(), group))


def test_a_user_outside_the_group_gets_no_raised_nproc_but_still_memlock():
    outsider = effective(entries("gpuusers"), "nobody", 1048576)
    assert outsider["nproc"].soft is None and outsider["nofile"].soft is None  # the distribution's limits
    assert outsider["memlock"].soft == INFINITY  # RDMA registration needs it for every user's job
    member = effective(entries("gpuusers"), "nobody", 1048576, ("gpuusers",))
    assert member["nproc"].soft == member["nproc"].hard == 65536


def test_nproc_is_finite_by_default():
    defaults = yaml.safe_load((ROOT / "roles/limits/defaults/main.yml").read_text())
    assert str(defaults["limits_nproc"]).isdigit() and defaults["limits_group"] != "*"
    assert defaults["limits_memlock"] == "unlimited"
