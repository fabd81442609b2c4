"""limits role: value checks (filters) and the two rendered drop-ins."""
from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

from tests.helpers.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]


limits = load_plugin("filter", "limits")
NR_OPEN = Path("/proc/sys/fs/nr_open").read_text().strip()  # this machine's real ceiling (1048576)


def render(template: str, values: dict, group: str = "gpuusers") -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROOT / "roles/limits/templates")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    return env.get_template(template).render(
        ansible_managed="Ansible managed", __limits_values=values, limits_group=group,
        __limits_systemd_file="/etc/systemd/system.conf.d/90-tunefleet-limits.conf")


def defaults_as_checked() -> dict:
    d = yaml.safe_load((ROOT / "roles/limits/defaults/main.yml").read_text())
    return {
        "memlock": limits.limits_pam_value(d["limits_memlock"], "limits_memlock"),
        "nofile": limits.limits_pam_value(d["limits_nofile"], "limits_nofile", False, NR_OPEN),
        "nproc": limits.limits_pam_value(d["limits_nproc"], "limits_nproc"),
        "stack": limits.limits_pam_value(d["limits_stack"], "limits_stack"),
        "systemd_memlock": limits.limits_systemd_value(d["limits_systemd_memlock"], "limits_systemd_memlock"),
        "systemd_nofile": limits.limits_systemd_value(d["limits_systemd_nofile"], "limits_systemd_nofile", NR_OPEN),
    }


def test_defaults_pass_their_own_checks_on_this_machine():
    assert defaults_as_checked() == {"memlock": "unlimited", "nofile": "1048576", "nproc": "65536",
                                     "stack": "65536", "systemd_memlock": "infinity", "systemd_nofile": "1048576"}


def test_limits_file_covers_root_and_everyone_soft_and_hard():
    lines = [line.split() for line in render("limits.conf.j2", defaults_as_checked()).splitlines()
             if line and not line.startswith("#")]
    assert len(lines) == 16
    for kind in ("soft", "hard"):
        for who in ("*", "root"):  # memlock for every user: RDMA registration
            assert [who, kind, "memlock", "unlimited"] in lines
        for who in ("@gpuusers", "root"):  # the rest only for the group the inventory names
            assert [who, kind, "nofile", "1048576"] in lines
            assert [who, kind, "nproc", "65536"] in lines
    assert not [line for line in lines if line[0] == "*" and line[2] != "memlock"]


def test_a_star_group_gives_every_limit_to_every_user():
    lines = [line.split() for line in render("limits.conf.j2", defaults_as_checked(), "*").splitlines()
             if line and not line.startswith("#")]
    assert ["*", "soft", "nproc", "65536"] in lines and not [line for line in lines if line[0].startswith("@")]


def test_systemd_file_sets_the_manager_defaults():
    text = render("system.conf.j2", defaults_as_checked())
    assert "[Manager]\nDefaultLimitMEMLOCK=infinity\nDefaultLimitNOFILE=1048576\n" in text


def test_nofile_above_nr_open_is_refused_because_logins_would_fail():
    with pytest.raises(Exception, match=r"limits_nofile: 2097152 is above this node's fs.nr_open \(1048576\)"):
        limits.limits_pam_value(2097152, "limits_nofile", False, "1048576")


def test_nofile_cannot_be_unlimited():
    with pytest.raises(Exception, match="limits_nofile: 'unlimited' is not allowed"):
        limits.limits_pam_value("unlimited", "limits_nofile", False, NR_OPEN)


@pytest.mark.parametrize("bad", [True, "lots", "1.5", "-5"])
def test_bad_pam_values_name_the_variable(bad):
    with pytest.raises(Exception, match="limits_stack"):
        limits.limits_pam_value(bad, "limits_stack")


def test_systemd_soft_hard_pair():
    assert limits.limits_systemd_value("1024:524288", "limits_systemd_nofile", NR_OPEN) == "1024:524288"
    assert limits.limits_systemd_value("unlimited", "limits_systemd_memlock") == "infinity"
    with pytest.raises(Exception, match="soft limit 4096 is above hard limit 1024"):
        limits.limits_systemd_value("4096:1024", "limits_systemd_nofile")
    with pytest.raises(Exception, match="above this node's fs.nr_open"):
        limits.limits_systemd_value("1024:99999999", "limits_systemd_nofile", "1048576")
    with pytest.raises(Exception, match="is a boolean"):
        limits.limits_systemd_value(False, "limits_systemd_memlock")


def test_defaults_match_argument_specs():
    defaults = yaml.safe_load((ROOT / "roles/limits/defaults/main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles/limits/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert {name: spec.get("default") for name, spec in options.items()} == defaults
