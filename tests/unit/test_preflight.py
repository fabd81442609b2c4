"""Preflight judges each input against the host: one test per refusal, and what it must accept."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))  # the collection link `make venv` creates

from ansible_collections.tunefleet.gpu_node.plugins.module_utils import preflight_checks as pf  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "preflight"
ALL_ROLES = ["sysctl", "network", "storage", "gpu", "memory", "limits", "cpu"]


def build_host(root: Path, cpufreq: bool = True) -> Path:
    """A GPU-node-shaped tree from captured kernel files: writable and read-only sysctls,
    two interfaces, an NVMe and a loop device, 2 MiB pages on one NUMA node, THP, cpufreq."""
    def put(path: str, text: str, mode: int = 0o644) -> None:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        os.chmod(target, mode)

    fixture = lambda name: (FIXTURES / name).read_text()  # noqa: E731
    put("/proc/sys/net/core/rmem_max", "4194304\n")
    put("/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t33554432\n")
    put("/proc/sys/net/ipv4/tcp_congestion_control", "cubic\n")
    put("/proc/sys/net/ipv4/tcp_available_congestion_control", fixture("tcp_available_congestion_control"), 0o444)
    put("/proc/sys/net/ipv4/conf/all/rp_filter", "2\n")
    put("/proc/sys/vm/swappiness", "60\n")
    put("/proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n")
    put("/proc/sys/net/ipv4/ip_unprivileged_port_start", "1024\n")
    put("/proc/sys/kernel/ngroups_max", fixture("ngroups_max"), 0o444)
    put("/proc/sys/kernel/osrelease", fixture("osrelease"), 0o444)
    put("/proc/sys/fs/nr_open", fixture("nr_open"))
    for name in ("lo", "v0"):
        (root / "sys/class/net" / name).mkdir(parents=True)
    put("/sys/block/nvme0n1/queue/scheduler", fixture("vda_scheduler"))
    put("/sys/block/nvme0n1/size", "7501476528\n")  # sectors: a 3.84 TB namespace
    put("/sys/block/loop0/queue/scheduler", fixture("loop0_scheduler"))
    put("/sys/block/loop0/size", "0\n")  # no file attached: not a device to tune
    (root / "sys/kernel/mm/hugepages/hugepages-2048kB").mkdir(parents=True)
    (root / "sys/devices/system/node/node0/hugepages/hugepages-2048kB").mkdir(parents=True)
    put("/sys/kernel/mm/transparent_hugepage/enabled", fixture("thp_enabled"))
    put("/sys/kernel/mm/transparent_hugepage/defrag", fixture("thp_defrag"))
    if cpufreq:
        for cpu in ("cpu0", "cpu1"):
            put(f"/sys/devices/system/cpu/{cpu}/cpufreq/scaling_available_governors", "performance powersave\n")
    return root


def captured_ip(interface: str):
    """`ip -d -j link show dev X` answered from the captured namespace."""
    links = json.loads((FIXTURES / "ip_d_j_link_show.json").read_text())
    found = [link for link in links if link["ifname"] == interface]
    return json.dumps(found) if found else None


GOOD = {
    "tunefleet_reboot_policy": "never",
    "sysctl_settings": {"net.core.rmem_max": 536870912, "net.ipv4.tcp_rmem": "4096 87380 268435456",
                        "vm.swappiness": 0},
    "sysctl_extra_settings": {"net.ipv4.tcp_congestion_control": "bbr"},
    "sysctl_skip_keys": [],
    "network_mtu": 9000,
    "network_interfaces": ["v0"],
    "network_interface_match": {},
    "network_ring": {"rx": 8192, "tx": 8192},
    "storage_device_patterns": ["nvme*n*"],
    "storage_scheduler": "none",
    "storage_read_ahead_kb": 4096,
    "gpu_persistence_mode": True,
    "gpu_nvidia_peermem": True,
    "gpu_nccl_conf": {"NCCL_DEBUG": "WARN", "NCCL_IB_TIMEOUT": 22},
    "gpu_nccl_conf_path": "/etc/nccl.conf",
    "preflight_require_gpu_driver": False,
    "memory_hugepages_2m": 1024,
    "memory_hugepages_2m_per_node": {0: 512},
    "memory_hugepages_1g": 0,
    "memory_thp_enabled": "madvise",
    "memory_thp_defrag": "defer+madvise",
    "limits_memlock": "unlimited",
    "limits_nofile": 1048576,
    "limits_nproc": 1048576,
    "limits_stack": "unlimited",
    "limits_systemd_memlock": "infinity",
    "limits_systemd_nofile": 1048576,
    "cpu_governor": "performance",
}


def judge(root: Path, **changes) -> list:
    variables = dict(GOOD, **changes)
    return [p.message("gpu01") for p in pf.preflight(str(root), variables, ALL_ROLES, captured_ip)]


def test_a_host_that_can_take_every_default_passes(tmp_path):
    assert judge(build_host(tmp_path)) == []


REFUSALS = [
    # (changes, words the single message must contain)
    ({"sysctl_settings": {"net.core.no_such_key": 1}}, "sysctl_settings['net.core.no_such_key'] = 1: no such key"),
    ({"sysctl_settings": {"kernel.ngroups_max": 1}}, "kernel.ngroups_max'] = 1: read-only"),
    ({"sysctl_settings": {"vm.swappiness": False}}, "vm.swappiness'] = False: a YAML boolean"),
    ({"sysctl_extra_settings": {"vm.swappiness": 1.5}}, "sysctl_extra_settings['vm.swappiness'] = 1.5: must be"),
    ({"sysctl_settings": {"net.ipv4.tcp_rmem": "4096 87380"}}, "tcp_rmem'] = '4096 87380': this key holds 3"),
    ({"sysctl_settings": {"net.core.rmem_max": "lots"}}, "rmem_max'] = 'lots': this key holds 1 integer"),
    ({"sysctl_settings": {"net core rmem": 1}}, "'net core rmem'] = 1: is not a sysctl key"),
    ({"sysctl_extra_settings": {"net.ipv4.tcp_congestion_control": "dctcp"}}, "'dctcp': not available here"),
    ({"network_mtu": 99999}, "network_mtu = 99999: outside 68..65535"),
    ({"network_mtu": 67}, "network_mtu = 67: outside 68..65535"),
    ({"network_mtu": "9k"}, "network_mtu = '9k': must be an integer"),
    ({"network_interfaces": ["ib7"]}, "network_interfaces = 'ib7': no such interface"),
    ({"network_ring": {"rx": True}}, "network_ring['rx'] = True: must be a positive integer"),
    ({"network_interface_match": {"vendor": "mlx"}}, "network_interface_match = {'vendor': 'mlx'}: must be"),
    ({"storage_scheduler": "cfq"}, "storage_scheduler = 'cfq': /dev/nvme0n1 does not offer it"),  # pre-blk-mq name
    ({"storage_read_ahead_kb": -1}, "storage_read_ahead_kb = -1: must be a non-negative integer"),
    ({"storage_device_patterns": ["nvme*n*", "nvme9n1"]}, "storage_device_patterns = 'nvme9n1': no such block device"),
    ({"storage_device_patterns": ["loop0"]}, "storage_device_patterns = 'loop0': loop0 cannot be tuned: no medium"),
    ({"storage_device_patterns": ["nvme*n*", "sd*"]},
     "storage_device_patterns = 'sd*': matches no block device on this host (it has: nvme0n1)"),
    ({"storage_allow_no_match": "maybe"}, "storage_allow_no_match = 'maybe': must be true or false"),
    ({"sysctl_settings": {"net.ipv4.ip_local_port_range": "3000 2000"}},
     "ip_local_port_range'] = '3000 2000': the first port 3000 is above the last 2000, which the kernel refuses"),
    ({"sysctl_settings": {"net.ipv4.ip_local_port_range": "2048 65536"}},
     "ip_local_port_range'] = '2048 65536': 65536 is outside 1..65535"),
    ({"sysctl_settings": {"net.ipv4.ip_local_port_range": "1000 2000"}},
     "'1000 2000': the first port 1000 is below net.ipv4.ip_unprivileged_port_start (1024)"),
    ({"sysctl_extra_settings": {"net.ipv4.tcp_rmem": "0 87380 268435456"}}, "0 is outside 4096..2147483647"),
    ({"sysctl_settings": {"vm.swappiness": 201}}, "vm.swappiness'] = 201: 201 is outside 0..200"),
    ({"sysctl_settings": {"net.core.rmem_max": 2147483648}}, "2147483648 is outside 2048..2147483647"),
    ({"memory_hugepages_1g": 4}, "memory_hugepages_1g = 4: this host's kernel/CPU has no hugepages-1048576kB"),
    ({"memory_hugepages_2m_per_node": {1: 64}}, "memory_hugepages_2m_per_node[1] = 64: this host has no NUMA node 1"),
    ({"memory_thp_enabled": "sometimes"}, "memory_thp_enabled = 'sometimes': not offered here"),
    ({"memory_thp_defrag": True}, "memory_thp_defrag = True: a YAML boolean"),
    ({"cpu_governor": "schedutil"}, "cpu_governor = 'schedutil': cpu0 does not offer it"),
    ({"preflight_require_gpu_driver": True}, "preflight_require_gpu_driver = True: no NVIDIA driver"),
    ({"gpu_nccl_conf": {"NCCL_IB_DISABLE": True}}, "gpu_nccl_conf['NCCL_IB_DISABLE'] = True: a YAML boolean"),
    ({"gpu_nccl_conf_path": "nccl.conf"}, "gpu_nccl_conf_path = 'nccl.conf': must be an absolute path"),
    ({"limits_nofile": 4194304}, "limits_nofile = 4194304: above this host's fs.nr_open 1048576"),
    ({"limits_nofile": "unlimited"}, "limits_nofile = 'unlimited': must be a positive integer"),
    ({"limits_memlock": True}, "limits_memlock = True: a YAML boolean"),
    ({"limits_systemd_memlock": "unlimited"}, "limits_systemd_memlock = 'unlimited': must be a positive integer or"),
    ({"tunefleet_reboot_policy": "always"}, "tunefleet_reboot_policy = 'always': must be one of never, if_needed"),
    ({"sysctl_enabled": "maybe"}, "sysctl_enabled = 'maybe': must be true or false"),
]


@pytest.mark.parametrize(("changes", "words"), REFUSALS, ids=[w.split(":")[0][:40] for _, w in REFUSALS])
def test_each_impossible_input_is_refused_with_host_variable_and_value(tmp_path, changes, words):
    problems = judge(build_host(tmp_path), **changes)
    assert len(problems) == 1, problems
    assert problems[0].startswith("host gpu01: ")
    assert words in problems[0]


def test_every_problem_is_reported_at_once(tmp_path):
    problems = judge(build_host(tmp_path), network_mtu=99999, network_interfaces=["v0", "ib7"], cpu_governor="x")
    assert [p.split(":")[1].strip() for p in problems] == ["network_mtu = 99999", "network_interfaces = 'ib7'",
                                                            "cpu_governor = 'x'"]


def test_mtu_above_the_nic_maximum_is_refused():
    assert pf.mtu_problem(9000, 9978) is None
    assert pf.mtu_problem(9978, 9978) is None
    assert pf.mtu_problem(9979, 9978) == "above this interface's maximum MTU 9978"
    assert pf.mtu_problem(9000, 0) is None  # 0: the driver sets no ceiling (loopback)


@pytest.mark.parametrize(("interface", "expected"), [("lo", 0), ("v0", 65535), ("vx0", 65535)])
def test_max_mtu_is_read_from_captured_ip_output(interface, expected):
    assert pf.max_mtu_from_ip(captured_ip(interface)) == expected


def test_max_mtu_from_text_output_when_ip_has_no_json():
    text = (FIXTURES / "ip_d_link_show.txt").read_text()
    v0 = text[text.index(": v0@"):]
    assert pf.max_mtu_from_ip(v0) == 65535


def test_without_ip_the_mtu_range_is_still_checked(tmp_path):
    root = build_host(tmp_path)
    variables = dict(GOOD, network_mtu=70000)
    problems = pf.preflight(str(root), variables, ["network"], lambda name: None)
    assert [p.variable for p in problems] == ["network_mtu"]


def test_a_host_without_the_hardware_is_not_refused_where_the_inventory_says_so(tmp_path):
    root = build_host(tmp_path, cpufreq=False)
    shutil.rmtree(root / "sys/block/nvme0n1")
    assert judge(root, storage_scheduler="bfq", cpu_governor="schedutil", storage_allow_no_match=True) == []
    # Without saying so, a glob that matches nothing is a mistake until proven otherwise.
    problems = judge(root, storage_scheduler="bfq", cpu_governor="schedutil")
    assert problems == ["host gpu01: storage_device_patterns = 'nvme*n*': matches no block device on this host "
                        "(it has: none); set storage_allow_no_match: true where that is expected, "
                        "or storage_enabled: false"]


def test_a_congestion_control_with_an_installed_module_is_accepted(tmp_path):
    root = build_host(tmp_path)
    release = (FIXTURES / "osrelease").read_text().strip()
    module = root / f"lib/modules/{release}/kernel/net/ipv4/tcp_dctcp.ko.xz"
    module.parent.mkdir(parents=True)
    module.write_bytes(b"")
    assert judge(root, sysctl_extra_settings={"net.ipv4.tcp_congestion_control": "dctcp"}) == []


def test_skipped_keys_and_disabled_roles_are_not_judged(tmp_path):
    root = build_host(tmp_path)
    assert judge(root, sysctl_settings={"net.core.no_such_key": 1}, sysctl_skip_keys=["net.core.no_such_key"]) == []
    assert judge(root, network_enabled=False, network_mtu=99999) == []


def test_only_the_roles_that_will_run_are_judged(tmp_path):
    root = build_host(tmp_path)
    variables = dict(GOOD, network_mtu=99999, cpu_governor="x")
    assert [p.variable for p in pf.preflight(str(root), variables, ["cpu"], captured_ip)] == ["cpu_governor"]


def test_the_gpu_driver_is_found_when_loaded(tmp_path):
    root = build_host(tmp_path)
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04\n")
    assert judge(root, preflight_require_gpu_driver=True) == []


def test_extra_vars_strings_are_read_as_ansible_reads_them(tmp_path):
    """`-e network_mtu=9000 -e cpu_enabled=false` arrive as strings; the roles accept them, so must preflight."""
    root = build_host(tmp_path)
    assert judge(root, network_mtu="9000", memory_hugepages_2m="512", preflight_require_gpu_driver="false") == []
    assert judge(root, cpu_enabled="false", cpu_governor="schedutil") == []
    assert [p.split(":")[1].strip() for p in judge(root, network_mtu="99999")] == ["network_mtu = '99999'"]
    problems = judge(root, preflight_require_gpu_driver="yes")
    assert len(problems) == 1 and "no NVIDIA driver" in problems[0]


def test_the_port_floor_set_in_the_same_run_is_the_one_judged(tmp_path):
    settings = {"net.ipv4.ip_unprivileged_port_start": 1000, "net.ipv4.ip_local_port_range": "1000 2000"}
    put = build_host(tmp_path)
    assert judge(put, sysctl_extra_settings=settings) == []


def test_a_named_device_that_is_there_and_a_matching_glob_pass(tmp_path):
    assert judge(build_host(tmp_path), storage_device_patterns=["nvme0n1", "nvme*"]) == []


def known_names() -> list:
    """Every option of every role's argument spec, read as roles/preflight/vars/main.yml reads them."""
    import yaml

    names = []
    for spec in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            names += list(entry.get("options") or {})
    return names


def test_a_role_prefixed_name_no_spec_knows_is_refused_with_the_closest_known_name():
    defined = ["memory_hugepage_2m", "storage_read_ahead", "sysctl_settings", "ansible_host", "network_mtu",
               "memory_reboot_required", "reboot_rebooted", "tunefleet_reboot_serial", "gpu_frobnicate"]
    problems = [p.message("gpu01") for p in pf.check_variable_names(defined, known_names())]
    assert problems == [
        "host gpu01: gpu_frobnicate: no tunefleet role has this variable, so it would be ignored",
        "host gpu01: memory_hugepage_2m: no tunefleet role has this variable, so it would be ignored; "
        "did you mean memory_hugepages_2m?",
        "host gpu01: storage_read_ahead: no tunefleet role has this variable, so it would be ignored; "
        "did you mean storage_read_ahead_kb?",
    ]


def test_every_role_default_is_a_known_name():
    import yaml

    known = set(known_names())
    for defaults in sorted(REPO.glob("roles/*/defaults/main.yml")):
        missing = set(yaml.safe_load(defaults.read_text()) or {}) - known
        assert not missing, f"{defaults}: {sorted(missing)} not in any argument spec: preflight would refuse them"


def test_names_are_judged_only_when_the_known_ones_are_given(tmp_path):
    root = build_host(tmp_path)
    assert pf.preflight(str(root), GOOD, ALL_ROLES, captured_ip, ["memory_hugepage_2m"], []) == []
    found = pf.preflight(str(root), GOOD, ALL_ROLES, captured_ip, ["memory_hugepage_2m"], known_names())
    assert [p.variable for p in found] == ["memory_hugepage_2m"]
