"""sysctl role: the filters that validate and map keys, and the defaults' promises (sources, no booleans)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from tests.helpers.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "sysctl"


filters = load_plugin("filter", "sysctl_tuning")
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("net.core.rmem_max", "/proc/sys/net/core/rmem_max"),
        ("net.ipv4.neigh.default.gc_thresh3", "/proc/sys/net/ipv4/neigh/default/gc_thresh3"),
        # sysctl(8): with '/' as separator a dot in a VLAN interface name stays literal
        ("net/ipv4/conf/eth0.100/rp_filter", "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"),
    ],
)
def test_key_to_proc_path(key, path):
    assert filters.sysctl_proc_path(key) == path


@pytest.mark.parametrize("key", ["../../etc/passwd", "net..core", "net.core.rmem max", ""])
def test_keys_that_escape_or_are_malformed_are_refused(key):
    with pytest.raises(AnsibleFilterError, match="is not a sysctl name"):
        filters.sysctl_proc_path(key)


def test_yaml_booleans_and_non_scalars_are_named():
    # what `vm.swappiness: no` and friends load as
    settings = yaml.safe_load(
        "vm.swappiness: no\nnet.ipv4.tcp_mtu_probing: [1]\nkernel.x: ''\nvm.ok: 0\nnet.a: '1 2'\n"
    )
    problems = filters.sysctl_value_problems(settings)
    assert problems == [
        "kernel.x: '' is empty or spans lines",
        "net.ipv4.tcp_mtu_probing: [1] is a list; a sysctl value is a string or an integer",
        "vm.swappiness: False is a YAML boolean; write 1/0 (quote it if you mean a string)",
    ]


def test_extra_settings_win_and_skip_keys_are_dropped():
    effective = filters.sysctl_effective(
        {"vm.swappiness": 0, "net.core.rmem_max": 1}, {"vm.swappiness": 10}, ["net.core.rmem_max"]
    )
    assert effective == {"vm.swappiness": 10}


def test_defaults_are_all_valid_values():
    assert filters.sysctl_value_problems(DEFAULTS["sysctl_settings"]) == []


def test_defaults_carry_the_cited_nvidia_multinode_values():
    settings = DEFAULTS["sysctl_settings"]
    assert settings["net.core.rmem_max"] == settings["net.core.wmem_max"] == 536870912
    assert settings["net.ipv4.tcp_rmem"].split()[-1] == settings["net.ipv4.tcp_wmem"].split()[-1] == "268435456"
    assert settings["net.core.netdev_max_backlog"] == 10000
    assert settings["vm.swappiness"] == 0 and settings["kernel.numa_balancing"] == 0
    assert settings["vm.zone_reclaim_mode"] == 0


def test_port_range_is_broader_than_the_linux_default_and_not_the_seed_example():
    low, high = (int(port) for port in DEFAULTS["sysctl_settings"]["net.ipv4.ip_local_port_range"].split())
    assert (low, high) != (50000, 51000)
    assert high - low > 60999 - 32768  # broader than the kernel's own default range
    assert low % 2 != high % 2  # ip-sysctl docs: different parity spreads connect() evenly


def test_congestion_control_is_left_to_the_kernel():
    assert "net.ipv4.tcp_congestion_control" not in DEFAULTS["sysctl_settings"]


def test_every_default_key_names_its_source():
    lines = (ROLE / "defaults" / "main.yml").read_text().splitlines()
    for key in DEFAULTS["sysctl_settings"]:
        index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
        above = [line for line in lines[:index] if line.strip()]
        comment_or_sibling = above[-1].strip()
        # the comment right above a group of keys covers the group
        assert comment_or_sibling.startswith("#") or comment_or_sibling.split(":")[0] in DEFAULTS["sysctl_settings"], (
            key
        )


def test_drop_in_renders_every_effective_key():
    """The template is the header; kernel_values appends one line per key (persist_values) with the
    value in force, so the drop-in holds a kept higher value, never the lower recommendation."""
    import jinja2

    kv = load_plugin("modules", "kernel_values")
    template = jinja2.Template((ROLE / "templates" / "90-tunefleet.conf.j2").read_text(), trim_blocks=True)
    effective = {"vm.swappiness": 0, "net.ipv4.tcp_rmem": "1 2 3"}
    header = template.render(ansible_managed="managed", __sysctl_effective=effective)
    values = filters.sysctl_live_values(effective)
    spec = {"path": "/etc/sysctl.d/90-tunefleet.conf", "content": header,
            "persist_values": filters.sysctl_persisted(effective)}
    files, errors = kv.with_persisted_values([spec], {"/proc/sys/net/ipv4/tcp_rmem": "1 5 3"}, values)
    assert errors == [] and files[0]["content"].startswith(header)
    assert files[0]["content"].splitlines()[-2:] == ["vm.swappiness = 0", "net.ipv4.tcp_rmem = 1 5 3"]


def test_argument_spec_defaults_match_defaults_file():
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert set(spec) == set(DEFAULTS)
    for name, option in spec.items():
        if "default" in option:
            assert option["default"] == DEFAULTS[name], name
