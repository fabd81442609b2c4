"""node_reads: what preflight reads once for the roles (issue 13), on fake trees and captured
nvidia-smi answers; only the roles that will run are read."""
from __future__ import annotations

from pathlib import Path

from tests.helpers.plugins import load_plugin

node_reads = load_plugin("module_utils", "node_reads")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "role_gpu"
H100 = (FIXTURES / "nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01.csv").read_text()  # Enabled
L40S = (FIXTURES / "nvidia-smi_query-gpu_l40s_595.80.csv").read_text()  # Disabled


def no_tool(name):
    return None


def never_known(name):
    return False


class ModuleRunCommand:
    """Stands in for AnsibleModule.run_command (argv -> rc, out, err); remembers what it ran."""

    def __init__(self, rc: int = 0, out: str = ""):
        self.rc, self.out, self.calls = rc, out, []

    def __call__(self, argv):
        self.calls.append(argv)
        return self.rc, self.out, ""


def write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def gpu_tree(root: Path) -> Path:
    write(root, "/proc/driver/nvidia/version", "NVRM version: 580.159.04\n")
    return root


def read(root: Path, roles, variables=None, which=no_tool, run=None):
    return node_reads.read_node(str(root), variables or {}, roles, which, never_known, run or ModuleRunCommand())


def test_only_the_roles_that_run_are_read(tmp_path):
    # no marker path given: the reboot role looks itself
    assert read(tmp_path, []) == {"reboot_marker_present": True, "systemd": False}
    assert set(read(tmp_path, ["memory", "limits"])) == {"thp", "nr_open", "limits", "reboot_marker_present", "systemd"}


def test_systemd_is_seen_by_its_runtime_directory(tmp_path):
    (tmp_path / "run/systemd/system").mkdir(parents=True)
    assert read(tmp_path, [])["systemd"] is True


def test_a_reboot_marker_is_seen_even_as_a_dangling_link(tmp_path):
    marker = {"reboot_marker_path": "/var/lib/tunefleet/reboot-required"}
    assert read(tmp_path, [], marker)["reboot_marker_present"] is False
    (tmp_path / "var/lib/tunefleet").mkdir(parents=True)
    (tmp_path / "var/lib/tunefleet/reboot-required").symlink_to(tmp_path / "nowhere")
    assert read(tmp_path, [], marker)["reboot_marker_present"] is True  # the module replaces it, unfollowed


def test_thp_and_nr_open(tmp_path):
    assert read(tmp_path, ["memory", "limits"]) == {"thp": False, "nr_open": None, "reboot_marker_present": True,
                                                    "systemd": False, "limits": {"pam": [], "systemd": []}}
    write(tmp_path, node_reads.THP_ENABLED, "always [madvise] never\n")
    write(tmp_path, "/proc/sys/fs/nr_open", "1048576\n")
    assert read(tmp_path, ["memory", "limits"]) == {"thp": True, "nr_open": 1048576, "reboot_marker_present": True,
                                                    "systemd": False, "limits": {"pam": [], "systemd": []}}
    write(tmp_path, "/proc/sys/fs/nr_open", "garbage\n")
    assert read(tmp_path, ["limits"])["nr_open"] is None  # preflight judged it; no number, no ceiling


def test_block_devices_follow_the_patterns(tmp_path):
    write(tmp_path, "/sys/block/vda/queue/scheduler", "[mq-deadline] none\n")
    write(tmp_path, "/sys/block/vda/queue/read_ahead_kb", "128\n")
    write(tmp_path, "/sys/block/vda/size", "1000\n")
    write(tmp_path, "/sys/block/loop3/size", "0\n")
    node = read(tmp_path, ["storage"], {"storage_device_patterns": ["vd*", "loop*"]})
    assert [d["name"] for d in node["block_devices"]] == ["vda"]
    assert node["block_devices"][0]["schedulers"] == ["mq-deadline", "none"]
    assert node["block_devices_left_out"] == [{"name": "loop3", "reason": "no medium (size 0)"}]


def test_gpus_with_persistence_disabled_are_named(tmp_path):
    runner = ModuleRunCommand(out=L40S)
    gpu = read(gpu_tree(tmp_path), ["gpu"], which=lambda name: f"/usr/bin/{name}", run=runner)["gpu"]
    assert gpu["driver"] is True and gpu["persistence_disabled"] == ["0"]
    assert runner.calls == [["/usr/bin/nvidia-smi"] + node_reads.gpu_node.PERSISTENCE_QUERY]
    gpu = read(tmp_path, ["gpu"], which=lambda name: f"/usr/bin/{name}", run=ModuleRunCommand(out=H100))["gpu"]
    assert gpu["persistence_disabled"] == []


def test_persistence_is_not_asked_when_not_wanted_or_without_a_driver(tmp_path):
    runner = ModuleRunCommand(out=L40S)
    variables = {"gpu_persistence_mode": "false"}  # -e gpu_persistence_mode=false is a string
    gpu = read(gpu_tree(tmp_path), ["gpu"], variables, which=lambda name: f"/usr/bin/{name}", run=runner)["gpu"]
    assert gpu["persistence_disabled"] == [] and runner.calls == []
    gpu = read(tmp_path / "empty", ["gpu"], run=runner)["gpu"]
    assert gpu["driver"] is False and "no nvidia-smi" in gpu["reason"] and runner.calls == []


def test_an_nvidia_smi_that_fails_or_babbles_names_no_gpu(tmp_path):
    # The gpu_persistence module asks again and reports the error itself.
    for runner in (ModuleRunCommand(rc=9, out=L40S), ModuleRunCommand(out="index, pci.bus_id\n0, 00000000:01:00.0\n")):
        gpu = read(gpu_tree(tmp_path), ["gpu"], which=lambda name: f"/usr/bin/{name}", run=runner)["gpu"]
        assert gpu["persistence_disabled"] == []


def test_this_machine_reads_without_error():
    node = node_reads.read_node("/", {"storage_device_patterns": ["*"], "gpu_persistence_mode": False},
                                ["storage", "cpu", "memory", "limits", "gpu"], no_tool, never_known, ModuleRunCommand())
    assert isinstance(node["nr_open"], int) and isinstance(node["thp"], bool)
    assert all(not d["name"].startswith("/") for d in node["block_devices"])


def test_the_nics_are_found_by_name_with_the_backend_asked(tmp_path):
    (tmp_path / "sys/class/net/eth0").mkdir(parents=True)
    (tmp_path / "sys/class/net/eth0/mtu").write_text("1500\n")
    node = read(tmp_path, ["network"], {"network_interfaces": ["eth0", "ib7"], "network_persist_backend": "none"})
    assert [nic["name"] for nic in node["network"]["nics"]] == ["eth0"]
    assert node["network"]["nics"][0]["mtu"] == 1500
    assert node["network"]["missing"] == ["ib7"] and node["network"]["backend"] == "none"
