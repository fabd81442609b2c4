"""gpu role: nvidia-smi parsing on real captured output, driver detection, nccl.conf checks,
and the gpu_persistence module run through Ansible against a stand-in nvidia-smi."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/role_gpu"


persistence = load_plugin("modules", "gpu_persistence")
facts = load_plugin("module_utils", "gpu_node")
gpu_filters = load_plugin("filter", "gpu")


# --- nvidia-smi persistence query ----------------------------------------------------------

def test_h100_capture_reads_enabled():
    gpus = persistence.parse_query((FIXTURES / "nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01.csv").read_text())
    assert [(g.index, g.bus_id, g.mode) for g in gpus] == [("0", "00000000:00:09.0", "Enabled")]


def test_l40s_capture_reads_disabled():
    gpus = persistence.parse_query((FIXTURES / "nvidia-smi_query-gpu_l40s_595.80.csv").read_text())
    assert [(g.index, g.bus_id, g.mode) for g in gpus] == [("0", "00000000:01:00.0", "Disabled")]


def test_answer_without_the_column_is_an_error():
    with pytest.raises(persistence.PersistenceError, match="no column persistence_mode"):
        persistence.parse_query("index, pci.bus_id\n0, 00000000:01:00.0\n")


def test_unknown_mode_is_an_error_not_a_guess():
    with pytest.raises(persistence.PersistenceError, match=r"persistence mode '\[N/A\]'"):
        persistence.parse_query("index, pci.bus_id, persistence_mode\n0, 00000000:01:00.0, [N/A]\n")


# --- driver detection ----------------------------------------------------------------------

def test_no_driver_says_what_is_missing(tmp_path):
    node = facts.gather(str(tmp_path), which=lambda name: None, module_known=lambda name: False)
    assert node["driver"] is False
    assert node["reason"] == "no NVIDIA driver on this node (no nvidia-smi and no /proc/driver/nvidia)"


def test_nvidia_smi_without_loaded_driver_is_no_driver(tmp_path):
    node = facts.gather(str(tmp_path), which=lambda name: f"/usr/bin/{name}", module_known=lambda name: False)
    assert node["driver"] is False and node["reason"].endswith("(no /proc/driver/nvidia)")


def test_driver_units_and_peermem_found(tmp_path):
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text("NVRM version: 580.159.04\n")
    (tmp_path / "usr/lib/systemd/system").mkdir(parents=True)
    (tmp_path / "usr/lib/systemd/system/nvidia-persistenced.service").write_text("[Service]\n")
    (tmp_path / "sys/module/nvidia_peermem").mkdir(parents=True)
    node = facts.gather(str(tmp_path), which=lambda name: f"/usr/bin/{name}", module_known=lambda name: False)
    assert node["driver"] is True and node["reason"] == ""
    assert node["persistenced_unit"] is True and node["openibd_unit"] is False
    assert node["peermem_loaded"] is True and node["peermem_available"] is True


def test_own_persistenced_unit_is_not_taken_for_the_distribution_one(tmp_path):
    # Without this, a second run would add a drop-in to the role's own unit (not idempotent).
    units = tmp_path / "etc/systemd/system"
    units.mkdir(parents=True)
    own = (ROOT / "roles/gpu/templates/nvidia-persistenced.service.j2").read_text()
    (units / "nvidia-persistenced.service").write_text(own.replace("{{ ansible_managed }}", "Ansible managed"))
    assert facts.gather(str(tmp_path), lambda n: None, lambda n: False)["persistenced_unit"] is False
    (units / "nvidia-persistenced.service").write_text("[Service]\nExecStart=/usr/bin/nvidia-persistenced\n")
    assert facts.gather(str(tmp_path), lambda n: None, lambda n: False)["persistenced_unit"] is True


def test_peermem_available_but_not_loaded(tmp_path):
    node = facts.gather(str(tmp_path), which=lambda name: None, module_known=lambda name: name == "nvidia_peermem")
    assert node["peermem_loaded"] is False and node["peermem_available"] is True


def test_this_machine_has_no_driver():
    # The dev machine has no GPU (ENVIRONMENT.md): the role must take its skip path here.
    node = facts.gather("/", which=lambda name: None, module_known=lambda name: False)
    assert node["driver"] is False


# --- nccl.conf -------------------------------------------------------------------------------

def test_nccl_lines_sorted_and_typed():
    lines = gpu_filters.gpu_nccl_conf_lines({"NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN", "NCCL_IB_TIMEOUT": 22})
    assert lines == ["NCCL_DEBUG=WARN", "NCCL_IB_TIMEOUT=22", "NCCL_SOCKET_IFNAME=ib0"]


@pytest.mark.parametrize("name", ["NCCL_SHARP_ENABLE", "NCCL_SHARP_DISABLE", "NCCL_SHARP_CAPABLE",
                                  "NCCL_NCCL_MAX_RINGS"])
def test_seed_errata_names_are_refused_with_the_right_name(name):
    with pytest.raises(Exception, match=f"NCCL does not read {name}: use NCCL_"):
        gpu_filters.gpu_nccl_conf_lines({name: "1"})


@pytest.mark.parametrize(("settings", "message"), [
    ({"NCCL_P2P_DISABLE": True}, "quote YAML booleans"),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, "not an NCCL variable name"),
    ({"nccl_debug": "WARN"}, "not an NCCL variable name"),
    ({"NCCL_DEBUG": "WARN\nNCCL_P2P_DISABLE=1"}, "one line"),
    (["NCCL_DEBUG=WARN"], "must be a mapping"),
])
def test_bad_nccl_conf_gets_one_clear_error(settings, message):
    with pytest.raises(Exception, match=message):
        gpu_filters.gpu_nccl_conf_lines(settings)


def test_defaults_match_argument_specs():
    defaults = yaml.safe_load((ROOT / "roles/gpu/defaults/main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles/gpu/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert {name: spec.get("default") for name, spec in options.items()} == defaults


# --- the module through Ansible, with a stand-in nvidia-smi --------------------------------

FAKE_SMI = """#!/bin/sh
# Stand-in for nvidia-smi: answers the query with the captured L40S output, Enabled once -pm 1 ran.
here="$(dirname "$0")"
case "$*" in
  *--query-gpu=*) if [ -e "$here/pm_enabled" ]; then cat "$here/enabled.csv"; else cat "{fixture}"; fi ;;
  "-pm 1") touch "$here/pm_enabled"; echo "-pm 1" >> "$here/calls"; echo "Enabled persistence mode." ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
"""


def with_persistence_enabled(capture: Path) -> str:
    """The captured answer with only its persistence_mode cell turned to Enabled."""
    header, row = capture.read_text().splitlines()[:2]
    names = [cell.strip() for cell in header.split(",")]
    cells = row.split(", ")
    cells[names.index("persistence_mode")] = "Enabled"
    return f"{header}\n{', '.join(cells)}\n"


@pytest.mark.slow
def test_persistence_module_check_apply_and_second_run(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.replace("{fixture}", str(FIXTURES / "nvidia-smi_query-gpu_l40s_595.80.csv")))
    smi.chmod(0o755)
    (tmp_path / "enabled.csv").write_text(with_persistence_enabled(FIXTURES / "nvidia-smi_query-gpu_l40s_595.80.csv"))
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [{"name": "pm", "tunefleet.gpu_node.gpu_persistence": {"nvidia_smi": str(smi)}}],
    }]))

    def run(*extra: str) -> dict:
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
        command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                   "-e", f"ansible_python_interpreter={sys.executable}", str(playbook), *extra]
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]

    checked = run("--check", "--diff")
    assert checked["changed"] is True and "would run nvidia-smi -pm 1" in checked["msg"]
    assert not (tmp_path / "calls").exists()
    applied = run()
    assert applied["changed"] is True
    assert applied["gpus"] == [{"index": "0", "bus_id": "00000000:01:00.0", "before": "Disabled", "after": "Enabled"}]
    assert run()["changed"] is False
    assert (tmp_path / "calls").read_text() == "-pm 1\n"
