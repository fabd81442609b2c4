"""network role: NIC selection and NUMA/IRQ facts from fake sysfs trees, the IRQ-affinity plan,
ethtool parsing on real captures, backend detection, and the rendered boot/irqbalance scripts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from tests.helpers.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "network"
FIXTURES = ROOT / "tests" / "fixtures" / "sysfs_net"


nic_info = load_plugin("module_utils", "nics")
kv = load_plugin("modules", "kernel_values")
filters = load_plugin("filter", "network_tuning")


def add_nic(
    sys_root: Path,
    name: str,
    *,
    pci: str | None,
    driver: str,
    numa: str = "-1",
    cpus: str = "0-1",
    irqs: tuple = (),
    virtio: bool = False,
    mtu: str = "1500",
) -> None:
    """A netdev as sysfs lays it out: class/net/NAME -> devices/..., device -> the PCI function
    (or a virtio device under it), driver and subsystem symlinks."""
    netdir = sys_root / "devices" / "virtual" / "net" / name
    if pci:
        function = sys_root / "devices" / "pci0000:00" / pci
        function.mkdir(parents=True)
        (function / "subsystem").symlink_to(sys_root / "bus" / "pci")
        (function / "numa_node").write_text(numa + "\n")
        (function / "local_cpulist").write_text(cpus + "\n")
        (function / "msi_irqs").mkdir()
        for irq in irqs:
            (function / "msi_irqs" / str(irq)).write_text("msix\n")
        device = function / "virtio2" if virtio else function
        if virtio:
            device.mkdir()
            (device / "subsystem").symlink_to(sys_root / "bus" / "virtio")
        (device / "driver").symlink_to(sys_root / "bus" / ("virtio" if virtio else "pci") / "drivers" / driver)
        netdir = device / "net" / name
    netdir.mkdir(parents=True)
    (netdir / "mtu").write_text(mtu + "\n")
    (netdir / "type").write_text("1\n")
    if pci:
        (netdir / "device").symlink_to(device)
    (sys_root / "class" / "net").mkdir(parents=True, exist_ok=True)
    (sys_root / "class" / "net" / name).symlink_to(netdir)


@pytest.fixture
def gpu_node_sys(tmp_path):
    """Two mlx5 ports on two NUMA nodes, the CI VM's real virtio eth0 (captured), and a veth."""
    sys_root = tmp_path / "sys"
    for part in ("bus/pci/drivers/mlx5_core", "bus/virtio/drivers/virtio_net"):
        (sys_root / part).mkdir(parents=True)
    captured = json.loads((FIXTURES / "eth0_virtio_net_sysfs.json").read_text())
    add_nic(
        sys_root,
        "eth0",
        pci=os.path.basename(captured["pci_realpath"]),
        driver=captured["driver"],
        numa=captured["numa_node"],
        cpus=captured["local_cpulist"],
        irqs=tuple(captured["msi_irqs"]),
        virtio=True,
        mtu=captured["mtu"],
    )
    add_nic(sys_root, "ens1f0np0", pci="0000:3b:00.0", driver="mlx5_core", numa="0", cpus="0-15,32-47", irqs=(101, 102))
    add_nic(
        sys_root, "ens2f0np0", pci="0000:86:00.0", driver="mlx5_core", numa="1", cpus="16-31,48-63", irqs=(201, 202)
    )
    add_nic(sys_root, "veth0", pci=None, driver="veth")
    return sys_root


def test_virtio_nic_irqs_come_from_its_pci_parent(gpu_node_sys):
    nic = nic_info.read_nic(str(gpu_node_sys), "eth0")
    assert nic == {
        "name": "eth0",
        "driver": "virtio_net",
        "pci_address": "0000:00:03.0",
        "numa_node": -1,
        "local_cpulist": "0-1",
        "irqs": [37, 38, 39],
        "mtu": 1400,
        "type": "1",
    }


def test_select_by_driver_glob_and_name(gpu_node_sys):
    nics, missing = nic_info.select_nics(str(gpu_node_sys), ["veth0"], {"driver": "mlx5*"})
    assert [nic["name"] for nic in nics] == ["ens1f0np0", "ens2f0np0", "veth0"]
    assert missing == []


def test_both_globs_must_match(gpu_node_sys):
    nics, _ = nic_info.select_nics(str(gpu_node_sys), [], {"driver": "mlx5_core", "pci": "0000:86:*"})
    assert [nic["name"] for nic in nics] == ["ens2f0np0"]
    assert nic_info.select_nics(str(gpu_node_sys), [], {})[0] == []


def test_missing_names_are_reported(gpu_node_sys):
    _, missing = nic_info.select_nics(str(gpu_node_sys), ["ib0", "eth0"], {})
    assert missing == ["ib0"]


def test_each_nic_irq_goes_to_its_own_numa_nodes_cpus(gpu_node_sys):
    nics, _ = nic_info.select_nics(str(gpu_node_sys), [], {"driver": "mlx5_core"})
    assert filters.network_irq_plan(nics) == {
        "/proc/irq/101/smp_affinity_list": "0-15,32-47",
        "/proc/irq/102/smp_affinity_list": "0-15,32-47",
        "/proc/irq/201/smp_affinity_list": "16-31,48-63",
        "/proc/irq/202/smp_affinity_list": "16-31,48-63",
    }


def test_nics_without_pci_irqs_are_named_not_planned(gpu_node_sys):
    nics, _ = nic_info.select_nics(str(gpu_node_sys), ["veth0", "eth0"], {})
    assert filters.network_irq_unpinnable(nics) == ["veth0"]
    assert sorted(filters.network_irq_plan(nics)) == [f"/proc/irq/{irq}/smp_affinity_list" for irq in (37, 38, 39)]


def test_an_irq_shared_by_nics_on_different_nodes_is_refused():
    nics = [{"name": "a", "local_cpulist": "0-3", "irqs": [5]}, {"name": "b", "local_cpulist": "4-7", "irqs": [5]}]
    with pytest.raises(AnsibleFilterError, match="IRQ 5 is shared by a .* and b"):
        filters.network_irq_plan(nics)
    same_cpus = [
        {"name": "a", "local_cpulist": "0-3", "irqs": [5]},
        {"name": "b", "local_cpulist": "0,1,2,3", "irqs": [5]},
    ]
    plan = filters.network_irq_plan(same_cpus)
    assert list(plan) == ["/proc/irq/5/smp_affinity_list"]
    assert kv.parse_cpulist(plan["/proc/irq/5/smp_affinity_list"]) == {0, 1, 2, 3}


def test_mtu_plan():
    assert filters.network_mtu_values([{"name": "ens1f0np0"}], "9000") == {"/sys/class/net/ens1f0np0/mtu": 9000}


def test_ethtool_ring_output_of_ethtool_6_1_parses():
    parsed = filters.network_ethtool_parse((FIXTURES / "ethtool_g_virtio_net.txt").read_text())
    assert parsed == {
        "maximums": {"rx": 256, "rx-mini": None, "rx-jumbo": None, "tx": 256},
        "current": {"rx": 256, "rx-mini": None, "rx-jumbo": None, "tx": 256},
    }


def test_ethtool_args_only_for_values_that_differ():
    channels = (FIXTURES / "ethtool_l_veth.txt").read_text()  # max rx/tx 2, current 1
    assert filters.network_ethtool_args(channels, {"rx": 2, "tx": 1}, "va") == ["rx", "2"]
    assert filters.network_ethtool_args(channels, {"rx": 1, "tx": 1}, "va") == []


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        ({"rx": 3}, "rx=3 exceeds the NIC's maximum 2"),
        ({"combined": 4}, "does not support setting combined"),
        ({"rx": True}, "must be a non-negative integer"),
        ({"queues": 2}, "unknown ethtool parameter 'queues'"),
    ],
)
def test_ethtool_values_the_nic_cannot_take_are_refused(wanted, message):
    with pytest.raises(AnsibleFilterError, match=message):
        filters.network_ethtool_args((FIXTURES / "ethtool_l_veth.txt").read_text(), wanted, "va")


def test_netplan_null_means_not_defined():
    assert nic_info.netplan_defines((FIXTURES / "netplan_get_defined.txt").read_text())
    assert not nic_info.netplan_defines((FIXTURES / "netplan_get_undefined.txt").read_text())


def test_networkd_file_from_real_networkctl_output():
    assert (
        nic_info.parse_networkd_file((FIXTURES / "networkctl_status_managed.txt").read_text())
        == "/etc/systemd/network/10-va.network"
    )
    assert nic_info.parse_networkd_file((FIXTURES / "networkctl_status_unmanaged.txt").read_text()) is None


@pytest.mark.parametrize(
    ("files", "active", "binaries", "backend"),
    [
        (["netplan/50-cloud-init.yaml", "network/interfaces"], {"systemd-networkd"}, {"netplan", "ifup"}, "netplan"),
        (["netplan/50-cloud-init.yaml"], {"NetworkManager"}, set(), "networkmanager"),  # yaml left behind, no netplan
        ([], {"NetworkManager", "systemd-networkd"}, set(), "networkmanager"),
        ([], {"systemd-networkd"}, set(), "networkd"),
        (["network/interfaces"], set(), {"ifup"}, "ifupdown"),
        (["network/interfaces"], set(), set(), "none"),
    ],
)
def test_backend_detection_order(tmp_path, files, active, binaries, backend):
    for relative in files:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    assert nic_info.detect_backend(str(tmp_path), active, lambda name: name in binaries) == backend


def render(template: str, **variables) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / "templates")), trim_blocks=True)
    env.filters["tunefleet.gpu_node.shell_quote"] = load_plugin("filter", "shell").shell_quote
    return env.get_template(template).render(ansible_managed="managed", **variables)


def test_irqbalance_policy_script_bans_exactly_the_tuned_pci_functions(tmp_path, gpu_node_sys):
    nics, _ = nic_info.select_nics(str(gpu_node_sys), ["veth0"], {"driver": "mlx5_core"})
    script = tmp_path / "policy"
    script.write_text(render("tunefleet-irqbalance-policy.j2", __network_nics=nics))
    script.chmod(0o755)

    def ask(device_path: str) -> str:
        proc = subprocess.run([str(script), device_path, "101"], capture_output=True, text=True, check=True)
        return proc.stdout.strip()

    assert ask("/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0") == "ban=true"
    assert ask("/sys/devices/pci0000:85/0000:85:00.0/0000:86:00.0") == "ban=true"
    assert ask("/sys/devices/pci0000:00/0000:00:03.0") == ""  # not tuned: irqbalance keeps balancing it


def test_boot_script_is_valid_sh_and_tunes_each_nic():
    text = render(
        "tunefleet-nic-tune.j2",
        __network_nics=[{"name": "ens1f0np0"}, {"name": "ens2f0np0"}],
        network_mtu=9000,
        network_ring={"rx": 8192},
        network_channels={"combined": 32},
        network_irq_affinity=True,
    )
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    assert 'ethtool -L "$nic" combined 32' in text and 'ethtool -G "$nic" rx 8192' in text
    assert text.index("ethtool -L") < text.index("ethtool -G")  # rings apply per channel on mlx5
    assert [line for line in text.splitlines() if line.startswith("tune ")] == ["tune ens1f0np0", "tune ens2f0np0"]


def test_a_planted_interface_name_reaches_the_boot_script_as_one_quoted_word(tmp_path):
    # Preflight refuses such a name first; the renderer quotes whatever reaches it all the same.
    planted = f"a$(touch {tmp_path}/x)"
    text = render("tunefleet-nic-tune.j2", __network_nics=[{"name": planted}], network_mtu=9000, network_ring={},
                  network_channels={}, network_irq_affinity=False)
    assert f"tune 'a$(touch {tmp_path}/x)'" in text.splitlines()
    ran = subprocess.run(["sh", "-c", text], capture_output=True, text=True, timeout=30)  # no such NIC: warns
    assert f"a$(touch {tmp_path}/x) is absent" in ran.stderr
    ifupdown = render("ifupdown-tunefleet-mtu.j2", __network_nics=[{"name": planted}, {"name": "ens1"}],
                      network_mtu=9000)
    assert f"  'a$(touch {tmp_path}/x)'|ens1)" in ifupdown
    subprocess.run(["/bin/sh", "-c", ifupdown], env={"IFACE": "ens1", "PATH": "/nonexistent"}, capture_output=True,
                   timeout=30)
    assert not (tmp_path / "x").exists()


def test_netplan_and_networkmanager_drop_ins_name_each_nic():
    nics = [
        {"name": "ens1f0np0", "netplan_defined": True},
        {"name": "ens2f0np0", "netplan_defined": True},
        {"name": "ib0", "netplan_defined": False},
    ]
    netplan = yaml.safe_load(render("netplan-90-tunefleet.yaml.j2", __network_nics=nics, network_mtu=9000))
    # ib0 is not in the user's netplan: defining it here would hand it to netplan's renderer
    assert netplan == {"network": {"version": 2, "ethernets": {"ens1f0np0": {"mtu": 9000}, "ens2f0np0": {"mtu": 9000}}}}
    nics[2]["type"] = "32"  # ARPHRD_INFINIBAND: NetworkManager keeps an IPoIB MTU as infiniband.mtu
    nm = render("NetworkManager-90-tunefleet.conf.j2", __network_nics=nics, network_mtu=9000)
    assert "[connection-tunefleet-ens2f0np0]\nmatch-device=interface-name:ens2f0np0\nethernet.mtu=9000" in nm
    assert "[connection-tunefleet-ib0]\nmatch-device=interface-name:ib0\ninfiniband.mtu=9000" in nm


def test_argument_spec_defaults_match_defaults_file():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert set(spec) == set(defaults)
    assert all(spec[name]["default"] == defaults[name] for name in spec)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_real_pci_nic_irqs_are_planned_pinned_and_put_back():
    """On a host with a PCI NIC (the CI VM's virtio eth0): plan from real sysfs, pin one IRQ to one CPU, restore it."""
    pci_nics = [
        nic for nic in nic_info.select_nics("/sys", [], {"pci": "*"})[0] if nic["irqs"] and nic["local_cpulist"]
    ]
    if not pci_nics:
        pytest.skip("no PCI NIC with MSI IRQs on this host")
    plan = filters.network_irq_plan(pci_nics[:1])
    path = sorted(plan)[0]
    original = Path(path).read_text().strip()
    cpus = sorted(kv.parse_cpulist(plan[path]))
    try:
        changes, errors = kv.plan({path: str(cpus[-1])})
        assert errors == []
        refused = kv.apply(changes, tolerate_eio=True)
        if refused:
            pytest.skip(f"{path} is kernel-managed here")
        assert kv.parse_cpulist(Path(path).read_text()) == {cpus[-1]}
        assert kv.plan({path: str(cpus[-1])}) == ([], [])
    finally:
        Path(path).write_text(original)
    assert Path(path).read_text().strip() == original
