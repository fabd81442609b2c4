"""The limits role never lowers a limit the node's other files set higher (issue 26 item 7): preflight
reads limits.conf, limits.d/*.conf, system.conf and its drop-ins (node_reads.limits_in_files) on a tree
built from Debian 12's real files; the role's filters raise each at_least line of its rendered drop-ins
to that value; verify's pam_limits and systemd judges then see the higher value in force and PASS it."""
from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.plugins import load_plugin
from tests.unit.test_role_limits import defaults_as_checked, render
from verify.checks import limits as limits_check

ROOT = Path(__file__).resolve().parents[2]
ETC = ROOT / "tests/fixtures/node/etc"
PAM_FILE = "/etc/security/limits.d/90-tunefleet.conf"
SYSTEMD_FILE = "/etc/systemd/system.conf.d/90-tunefleet-limits.conf"

node_reads = load_plugin("module_utils", "node_reads")
filters = load_plugin("filter", "limits")


def debian_tree(root: Path, extra_pam: dict = None, extra_systemd: dict = None) -> str:
    """Debian 12's limits.conf and system.conf (all commented out), plus the files a test plants."""
    (root / "etc/security/limits.d").mkdir(parents=True)
    (root / "etc/systemd/system.conf.d").mkdir(parents=True)
    shutil.copy(ETC / "limits.conf.debian12", root / "etc/security/limits.conf")
    shutil.copy(ETC / "system.conf.debian12", root / "etc/systemd/system.conf")
    for path, text in {**(extra_pam or {}), **(extra_systemd or {})}.items():
        (root / path.lstrip("/")).write_text(text)
    return str(root)


def written(root: str) -> tuple:
    read = node_reads.limits_in_files(root)
    pam = filters.limits_keep_higher_pam(render("limits.conf.j2", defaults_as_checked()), read, PAM_FILE)
    systemd = filters.limits_keep_higher_systemd(render("system.conf.j2", defaults_as_checked()), read, SYSTEMD_FILE)
    return pam, systemd


def test_on_debian12_as_shipped_the_drop_ins_are_the_recommendation_unchanged(tmp_path):
    pam, systemd = written(debian_tree(tmp_path))
    assert pam == render("limits.conf.j2", defaults_as_checked())
    assert systemd == render("system.conf.j2", defaults_as_checked())


def test_higher_limits_set_elsewhere_are_kept_and_said_lower_ones_are_raised(tmp_path):
    root = debian_tree(tmp_path, extra_pam={
        # an earlier limits.d file: a higher nofile for everyone, a lower nproc for the group
        "/etc/security/limits.d/10-site.conf": "*  -  nofile 2097152\n@gpuusers hard nproc 4096\n",
        # limits.conf's own root line, above ours
        "/etc/security/limits.conf": (ETC / "limits.conf.debian12").read_text() + "root - stack unlimited\n",
    })
    # our own file from an earlier run is not "in force elsewhere": a planted higher value there is ignored
    (Path(root) / PAM_FILE.lstrip("/")).write_text("@gpuusers soft nproc 999999\n")
    pam, _ = written(root)
    lines = [line.split() for line in pam.splitlines() if line and not line.startswith("#")]
    # the group line outranks `*` for its members: writing 1048576 would have lowered their 2097152
    assert ["@gpuusers", "soft", "nofile", "2097152"] in lines and ["@gpuusers", "hard", "nofile", "2097152"] in lines
    assert ["root", "soft", "nofile", "1048576"] in lines  # `*` never matches root: nothing to keep
    assert ["@gpuusers", "hard", "nproc", "65536"] in lines and ["@gpuusers", "soft", "nproc", "65536"] in lines
    assert ["root", "soft", "stack", "unlimited"] in lines and ["root", "hard", "stack", "unlimited"] in lines
    assert ("# @gpuusers soft nofile: 2097152 from /etc/security/limits.d/10-site.conf is above the "
            "recommended 1048576: kept (at_least)") in pam
    # verify, with pam_limits' precedence over the files as they will be, PASSes every login limit
    (Path(root) / PAM_FILE.lstrip("/")).write_text(pam)
    entries = [e for _, text in limits_check.limits_files(_node(root)) for e in limits_check.parse_limits_lines(text)]
    member = limits_check.effective(entries, "nobody", 1048576, ("gpuusers",))
    assert member["nofile"].soft == 2097152 and member["nproc"].hard == 65536


def test_systemd_default_limits_kept_side_by_side_from_a_drop_in(tmp_path):
    root = debian_tree(tmp_path, extra_systemd={
        "/etc/systemd/system.conf.d/10-site.conf": "[Manager]\nDefaultLimitNOFILE=4096:4194304\n",
    })
    _, systemd = written(root)
    assert "DefaultLimitNOFILE=1048576:4194304" in systemd  # soft ours (higher), hard theirs (higher)
    assert "DefaultLimitMEMLOCK=infinity" in systemd
    assert "from /etc/systemd/system.conf.d/10-site.conf is above the recommended 1048576: kept" in systemd


def test_a_lower_systemd_value_elsewhere_is_overridden(tmp_path):
    root = debian_tree(tmp_path, extra_systemd={
        "/etc/systemd/system.conf": (ETC / "system.conf.debian12").read_text().replace(
            "#DefaultLimitMEMLOCK=8M", "DefaultLimitMEMLOCK=8M"),
    })
    _, systemd = written(root)
    assert systemd == render("system.conf.j2", defaults_as_checked())


def _node(root: str):
    from tests.helpers.fake_node import FakeTree
    return FakeTree(Path(root)).node()
