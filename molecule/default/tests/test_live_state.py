"""Live state of the tuned container: what the kernel, a login session and a systemd service see.

Expected values come from the desired state prepare.yml rendered from the same variables the
roles read (templates/desired_state.json.j2), so a role that stops applying a knob fails here.
"""
from __future__ import annotations

import json
import shlex

import pytest

from verify.kernel_rules import compare, direction_of

MOLECULE_DIR = "/var/tmp/tunefleet-molecule"
FACT_FILE = "/etc/ansible/facts.d/tunefleet_molecule.fact"
VERIFY_OUT = f"{MOLECULE_DIR}/report"


def read_json(host, path: str) -> dict:
    return json.loads(host.file(path).content_string)


def active(text: str) -> str:
    """`none [mq-deadline] kyber` -> `mq-deadline`."""
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else text.strip()


@pytest.fixture(scope="module")
def spec(host) -> dict:
    return read_json(host, f"{MOLECULE_DIR}/desired_state.json")


@pytest.fixture(scope="module")
def fixture(host) -> dict:
    return read_json(host, FACT_FILE)


def test_this_scenario_applies_real_knobs(spec, fixture):
    # Guards the guards: a scenario that skipped everything would pass every test below.
    assert fixture["sysctl_namespaced_keys"], "no sysctl key can be applied in this container"
    assert spec["network"]["interfaces"] == fixture["veth_pair"]
    assert spec["storage"]["device_patterns"] == [fixture["loop_device"]]


def test_namespaced_sysctls_are_live(host, spec, fixture):
    for key in fixture["sysctl_namespaced_keys"]:
        expected = spec["sysctl"]["settings"][key]
        observed = host.check_output(f"sysctl -n {key}")
        # never de-tune (kernel_rules.DIRECTIONS): an at_least key the node had higher stays higher
        direction = direction_of(key, spec["sysctl"].get("exact_keys") or [])
        assert compare(direction, observed, expected) in ("same", "better"), \
            f"{key}: kernel says {observed!r}, desired {expected!r} ({direction})"
    assert host.check_output("sysctl -n net.core.somaxconn") == "8192"


def test_sysctl_dropin_brings_the_values_back_at_boot(host, spec, fixture):
    # Persistence, proven the way a boot does it: knock a key back, let systemd-sysctl re-read
    # /etc/sysctl.d, and the tuned value must return.
    key = "net.core.somaxconn"
    host.run_expect([0], f"sysctl -w {key}=4096")
    host.run_expect([0], "systemctl restart systemd-sysctl.service")
    assert host.check_output(f"sysctl -n {key}") == str(spec["sysctl"]["settings"][key])
    for key in fixture["sysctl_host_wide_keys"]:
        assert key not in host.file("/etc/sysctl.d/90-tunefleet.conf").content_string, (
            f"{key} is host-wide and in sysctl_skip_keys, yet it was persisted"
        )


@pytest.mark.parametrize("index", [0, 1])
def test_mtu_is_live(host, spec, fixture, index):
    name = fixture["veth_pair"][index]
    assert host.file(f"/sys/class/net/{name}/mtu").content_string.strip() == str(spec["network"]["mtu"])


def test_loop_device_queue_is_tuned(host, spec, fixture):
    queue = f"/sys/block/{fixture['loop_device']}/queue"
    assert active(host.file(f"{queue}/scheduler").content_string) == spec["storage"]["scheduler"]
    assert host.file(f"{queue}/read_ahead_kb").content_string.strip() == str(spec["storage"]["read_ahead_kb"])


def test_udev_rule_reapplies_the_queue_settings(host, spec, fixture):
    # A change event is what the kernel sends when a loop device gets a new file: the owned
    # rule must tune the device again after its settings were lost.
    device = fixture["loop_device"]
    queue = f"/sys/block/{device}/queue"
    host.run_expect([0], f"sh -c 'echo none > {queue}/scheduler; echo 128 > {queue}/read_ahead_kb'")
    host.run_expect([0], f"udevadm trigger --action=change --settle /sys/block/{device}")
    assert active(host.file(f"{queue}/scheduler").content_string) == spec["storage"]["scheduler"]
    assert host.file(f"{queue}/read_ahead_kb").content_string.strip() == str(spec["storage"]["read_ahead_kb"])


def skip_unless_memory_applied(spec: dict) -> None:
    if not spec["memory"]["enabled"]:
        pytest.skip("memory role left out (TUNEFLEET_MOLECULE_HOST_MEMORY=skip): huge pages and THP are host-wide")


def test_memory_knobs_are_live(host, spec):
    skip_unless_memory_applied(spec)
    mm = "/sys/kernel/mm"
    pages = host.file(f"{mm}/hugepages/hugepages-2048kB/nr_hugepages").content_string.strip()
    assert pages == str(spec["memory"]["hugepages_2m"])
    assert active(host.file(f"{mm}/transparent_hugepage/enabled").content_string) == spec["memory"]["thp_enabled"]
    assert active(host.file(f"{mm}/transparent_hugepage/defrag").content_string) == spec["memory"]["thp_defrag"]


def login_limit(host, user: str, flag: str) -> str:
    return host.check_output(f"runuser -l {user} -c {shlex.quote('ulimit ' + flag)}")


@pytest.mark.parametrize("user", ["root", "tfprobe"])
def test_login_session_limits(host, spec, user):
    # runuser -l opens a PAM session, so pam_limits applies /etc/security/limits.d as at login.
    assert login_limit(host, user, "-l") == str(spec["limits"]["memlock"])
    assert login_limit(host, user, "-u") == str(spec["limits"]["nproc"])
    assert login_limit(host, user, "-n") == str(spec["limits"]["nofile"])
    assert login_limit(host, user, "-s") == str(spec["limits"]["stack"])


def test_systemd_service_limits(host, spec):
    # A service started now must get the manager's new defaults (the role re-executes systemd).
    memlock = host.check_output("systemd-run --wait --pipe --quiet sh -c 'ulimit -l'")
    nofile = host.check_output("systemd-run --wait --pipe --quiet sh -c 'ulimit -n'")
    systemd_memlock = str(spec["limits"]["systemd_memlock"])  # bytes; ulimit -l answers KiB
    assert memlock == ("unlimited" if systemd_memlock == "infinity" else str(int(systemd_memlock) // 1024))
    assert nofile == str(spec["limits"]["systemd_nofile"])
    shown = host.check_output("systemctl show --property DefaultLimitNOFILE --value")
    assert shown == str(spec["limits"]["systemd_nofile"])


@pytest.mark.parametrize("unit", ["tunefleet-nic-tune.service", "tunefleet-thp.service"])
def test_boot_units_are_enabled(host, spec, unit):
    if unit != "tunefleet-nic-tune.service":
        skip_unless_memory_applied(spec)
    assert host.service(unit).is_enabled, f"{unit} is not enabled: its knobs would be lost at reboot"


def test_huge_page_total_is_persisted_for_boot(host, spec):
    # A total count (no per-NUMA-node split) is a plain sysctl, so it persists as a drop-in.
    skip_unless_memory_applied(spec)
    dropin = host.file("/etc/sysctl.d/91-tunefleet-hugepages.conf").content_string
    assert f"vm.nr_hugepages = {spec['memory']['hugepages_2m']}" in dropin


def test_gpu_role_writes_nothing_without_a_driver(host, spec):
    # No NVIDIA driver in a CI container: the gpu role must skip, not half-configure the node.
    assert not host.file(spec["gpu"]["nccl_conf_path"]).exists
    assert not host.file("/etc/modules-load.d/tunefleet-peermem.conf").exists
    assert not host.file("/etc/systemd/system/nvidia-persistenced.service").exists


def test_verify_package_finds_no_failure(host, spec):
    # The project's own verify, on the node's bare python3, judged against the same document.
    command = (
        f"cd {MOLECULE_DIR} && python3 -m verify verify --local --spec desired_state.json"
        f" --no-bench --format json --out {VERIFY_OUT} --quiet"
    )
    run = host.run(command)
    assert run.rc in (0, 1, 2), run.stderr
    report = read_json(host, f"{VERIFY_OUT}/report.json")
    failed = [f"{r['check_id']}: {r['reason']}" for r in report["results"] if r["status"] == "FAIL"]
    assert not failed, "verify FAILED on the tuned node:\n" + "\n".join(failed)
    passed = {r["role"] for r in report["results"] if r["status"] == "PASS"}
    applied = {"sysctl", "network", "storage", "limits"} | ({"memory"} if spec["memory"]["enabled"] else set())
    assert applied <= passed, f"roles with a PASS: {sorted(passed)}"
