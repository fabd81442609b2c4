"""The pcie role's module (tunefleet.gpu_node.pcie_acs) through main(), on fake sysfs trees whose bridges hold
config space built from a real lspci capture: apply, re-apply changed=0, restore, refusals, check mode; and the
boot script (the same module_utils file) doing the boot unit's work."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from tests.helpers.fake_node import FakeTree
from tests.helpers.plugins import load_plugin
from tests.unit.test_pcie_checks import ACS_ON, device, from_lspci

ROOT = Path(__file__).resolve().parents[2]
pcie_acs = load_plugin("modules", "pcie_acs")
pci_config = load_plugin("module_utils", "pci_config")
LEDGER = "/var/lib/tunefleet/ledger.json"
PORTS = ("0000:02:00.0", "0000:02:01.0")


@pytest.fixture
def tree(tmp_path, monkeypatch) -> FakeTree:
    """Two GPUs and a ConnectX NIC under the downstream ports of one switch; every port's ACS as the
    captured AMD GPP bridge (SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+)."""
    fake = FakeTree(tmp_path)
    device(fake, ["0000:00:01.0", "0000:01:00.0", PORTS[0]], "0000:03:00.0")
    device(fake, ["0000:00:01.0", "0000:01:00.0", PORTS[1]], "0000:04:00.0", vendor="0x15b3", klass="0x020700")
    for chain in (["0000:00:01.0"], ["0000:00:01.0", "0000:01:00.0"]) + tuple(
            ["0000:00:01.0", "0000:01:00.0", port] for port in PORTS):
        path = tmp_path / ("sys/devices/pci0000:00/" + "/".join(chain)) / "config"
        path.write_bytes(from_lspci(ACS_ON))
    monkeypatch.setattr(pcie_acs, "ROOT", str(tmp_path))
    return fake


def control(tree: FakeTree, bridge: str) -> int:
    return pci_config.read_acs(str(tree.root), bridge)[1]


def run(capsys, check_mode=False, **args) -> dict:
    module_args = dict({"ledger_path": LEDGER, "_ansible_check_mode": check_mode, "_ansible_diff": True}, **args)
    with patch_module_args(module_args), pytest.raises(SystemExit):
        pcie_acs.main()
    return json.loads(capsys.readouterr().out)


def test_apply_records_clears_then_reapply_changes_nothing_then_restore_puts_back(tree, capsys):
    before = control(tree, PORTS[0])
    assert before == 0x001D
    applied = run(capsys)
    assert applied["changed"] is True and len(applied["bridges"]) == 4
    assert all(control(tree, bdf) == 0 for bdf in ("0000:00:01.0", "0000:01:00.0") + PORTS)
    assert "0000:02:00.0: ACS SrcValid+ TransBlk- ReqRedir+" in applied["diff"]["before"]
    ledger = json.loads((tree.root / LEDGER.lstrip("/")).read_text())
    assert ledger["pci_acs"][PORTS[0]] == dict(ledger["pci_acs"][PORTS[0]], offset=0x2A0, control="0x001d",
                                               recorded_by="pcie")
    assert run(capsys)["changed"] is False  # re-apply: nothing to change, the ledger keeps the first value
    assert json.loads((tree.root / LEDGER.lstrip("/")).read_text())["pci_acs"][PORTS[0]]["control"] == "0x001d"
    restored = run(capsys, state="restored")
    assert restored["changed"] is True and control(tree, PORTS[0]) == before
    assert "pci_acs" not in json.loads((tree.root / LEDGER.lstrip("/")).read_text())
    assert run(capsys, state="restored")["changed"] is False


def test_check_mode_shows_every_bridge_and_writes_nothing(tree, capsys):
    shown = run(capsys, check_mode=True)
    assert shown["changed"] is True and shown["diff"]["after"].count("ReqRedir-") == 4
    assert control(tree, PORTS[1]) == 0x001D and not (tree.root / LEDGER.lstrip("/")).exists()


def test_a_vm_is_refused_naming_why_before_anything_changes(tree, capsys):
    tree.write("/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu sse2 hypervisor\n")
    refused = run(capsys)
    assert refused["failed"] and "virtual machine" in refused["msg"] and "pcie_force" in refused["msg"]
    assert control(tree, PORTS[0]) == 0x001D and not (tree.root / LEDGER.lstrip("/")).exists()
    assert run(capsys, force=True)["changed"] is True


def test_vfio_passthrough_is_refused_and_a_bad_address_is_named(tree, capsys):
    tree.mkdir("/sys/bus/pci/drivers/vfio-pci/0000:03:00.0")
    assert "vfio-pci" in run(capsys)["msg"] and control(tree, PORTS[0]) == 0x001D
    bad = run(capsys, bridges=["02:00.0; reboot"], force=True)
    assert bad["failed"] and bad["msg"].startswith("pcie_acs_bridges: '02:00.0; reboot'")


def test_only_named_bridges_change(tree, capsys):
    assert [b["bridge"] for b in run(capsys, bridges=[PORTS[1]])["bridges"]] == [PORTS[1]]
    assert control(tree, PORTS[0]) == 0x001D and control(tree, PORTS[1]) == 0


def test_the_boot_script_clears_the_bits_the_firmware_set_again(tree):
    said = pci_config.clear(str(tree.root), list(PORTS))
    assert said == [f"{PORTS[0]}: ACS control 0x001d -> 0x0000", f"{PORTS[1]}: ACS control 0x001d -> 0x0000"]
    assert pci_config.clear(str(tree.root), list(PORTS)) == []


def test_a_container_without_bridges_changes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pcie_acs, "ROOT", str(tmp_path))
    empty = run(capsys)
    assert empty["changed"] is False and "no bridge" in empty["msg"]


def test_defaults_match_argument_specs_and_preflight_knows_every_variable():
    defaults = yaml.safe_load((ROOT / "roles/pcie/defaults/main.yml").read_text())
    spec = yaml.safe_load((ROOT / "roles/pcie/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert {name: option["default"] for name, option in options.items()} == defaults
    assert defaults["pcie_enabled"] is False  # existing fleets are unchanged
    known = yaml.safe_load((ROOT / "roles/preflight/vars/main.yml").read_text())["__preflight_variable_names"]
    assert set(defaults) <= set(known)


def test_a_config_space_word_is_written_little_endian_at_the_control_register(tmp_path):
    config = tmp_path / "sys/bus/pci/devices/0000:00:01.0/config"
    config.parent.mkdir(parents=True)
    config.write_bytes(from_lspci(ACS_ON))
    pci_config.write_control(str(tmp_path), "0000:00:01.0", 0x2A0, 0x1234)
    assert struct.unpack_from("<H", config.read_bytes(), 0x2A6)[0] == 0x1234
