"""GPU checks without a GPU: a fake NVML module, replayed real nvidia-smi captures
(tests/fixtures/node/nvidia-smi, see the README there), fake driver files.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tests.helpers.fake_node import FakeTree, desired_state
from tests.helpers.replay import ReplayRunner
from verify.checks import gpu_persistence, nccl_conf, peermem, run_checks, versions
from verify.facts import gpu_query
from verify.result import Status
from verify.runner import CommandOutput

SMI = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "nvidia-smi"
H100_ENABLED = (SMI / "nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01.csv").read_text()
L40S_DISABLED = (SMI / "nvidia-smi_query-gpu_l40s_595.80.csv").read_text()
PROPRIETARY = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
               "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
        "(dvs-builder@U22-I3-AE18-09-3)  Wed Jan 14 10:00:00 UTC 2026\n")


def gpu_tree(tmp_path, banner=OPEN, release="6.8.0-60-generic", rdma=True):
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", banner)
    if rdma:  # a ConnectX HCA registered with the RDMA core: what GPUDirect RDMA serves
        tree.write("/sys/class/infiniband/mlx5_0/node_type", "1: CA\n")
    return tree.write("/proc/sys/kernel/osrelease", release + "\n")


def smi(stdout, rc=0):
    return ReplayRunner({"nvidia-smi": CommandOutput(gpu_query.SMI_ARGV, rc, stdout, "", 0.1)})


@pytest.fixture
def no_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError


def test_no_driver_skips_every_gpu_check(tmp_path):
    node = FakeTree(tmp_path).node(live=True)
    spec = desired_state()
    for check in (gpu_persistence.run, peermem.run, nccl_conf.run, versions.run):
        for result in check(spec, node):
            assert result.status is Status.SKIP and "no NVIDIA driver" in result.reason


def test_parse_real_nvidia_smi_captures():
    gpus, driver = gpu_query.parse_smi_csv(H100_ENABLED)
    assert [(g.index, g.bus_id, g.name, g.persistence_mode, g.memory_mib) for g in gpus] == \
        [(0, "00000000:00:09.0", "NVIDIA H100 80GB HBM3", True, 81559)]
    assert driver == "590.48.01"
    gpus, driver = gpu_query.parse_smi_csv(L40S_DISABLED)
    assert (gpus[0].persistence_mode, driver) == (False, "595.80")


@pytest.mark.parametrize("capture, status", [(H100_ENABLED, Status.PASS), (L40S_DISABLED, Status.FAIL)])
def test_nvidia_smi_fallback_judges_each_gpu(tmp_path, no_pynvml, capture, status):
    node = gpu_tree(tmp_path).node(runner=smi(capture), live=True)
    result = gpu_persistence.run(desired_state(), node)[0]
    assert result.check_id == "gpu.persistence_mode.0" and result.status is status
    if status is Status.FAIL:
        assert "00000000:01:00.0" in result.reason and "gpu_persistence_mode" in result.remediation


def test_nvidia_smi_failure_is_a_skip_with_its_message(tmp_path, no_pynvml):
    runner = ReplayRunner({"nvidia-smi": CommandOutput(gpu_query.SMI_ARGV, 9, "NVIDIA-SMI has failed because it "
                                                       "couldn't communicate with the NVIDIA driver.\n", "", 0.1)})
    result = gpu_persistence.run(desired_state(), gpu_tree(tmp_path).node(runner=runner, live=True))[0]
    assert result.status is Status.SKIP and "couldn't communicate" in result.reason


@pytest.mark.parametrize("damage", [
    lambda text: text.replace("Enabled", "Sometimes"),
    lambda text: "garbage\n",
    lambda text: text.splitlines()[0] + "\n",  # header only: no GPU
    lambda text: text.rstrip("\n") + ", extra\n",
    lambda text: text.replace("persistence_mode", "persistence"),
])
def test_damaged_captures_raise_parse_error(damage):
    with pytest.raises(gpu_query.SmiParseError):
        gpu_query.parse_smi_csv(damage(H100_ENABLED))


def test_nvml_is_used_when_pynvml_loads(tmp_path, monkeypatch):
    fake = types.SimpleNamespace(
        NVMLError=RuntimeError, NVML_FEATURE_ENABLED=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "580.159.04", nvmlSystemGetCudaDriverVersion_v2=lambda: 13000,
        nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPersistenceMode=lambda h: 1 if h == 0 else 0,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=150 * 2**30),
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0".encode()),
        nvmlDeviceGetName=lambda h: b"NVIDIA H200",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    runner = ReplayRunner()
    node = gpu_tree(tmp_path).node(runner=runner, live=True)
    inventory = gpu_query.query_gpus(node)
    assert (inventory.source, inventory.cuda_driver_version, inventory.gpus[1].bus_id) == \
        ("nvml", "13.0", "00000000:19:00.0")
    assert [r.status for r in gpu_persistence.run(desired_state(), node)] == [Status.PASS, Status.FAIL]
    assert runner.calls == []  # NVML answered; nvidia-smi never ran


def test_banner_parse():
    assert gpu_query.parse_driver_banner(OPEN) == ("580.159.04", True)
    assert gpu_query.parse_driver_banner(PROPRIETARY) == ("535.183.01", False)


def test_peermem_loaded_passes(tmp_path):
    tree = gpu_tree(tmp_path, banner=PROPRIETARY)
    tree.write("/proc/modules", "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n"
                                "nvidia 54001664 1 nvidia_peermem, Live 0x0000000000000000 (POE)\n")
    assert peermem.run(desired_state(), tree.node())[0].status is Status.PASS


def test_dmabuf_stack_passes_only_when_peermem_is_not_asked_by_name(tmp_path):
    tree = gpu_tree(tmp_path, banner=OPEN, release="6.8.0-60-generic")
    rdma_only = desired_state(gpu={"nvidia_peermem": False, "rdma_expected": True})
    ok = peermem.run(rdma_only, tree.node())[0]
    assert ok.status is Status.PASS and "DMA-BUF" in ok.observed and "open kernel module" in ok.observed
    asked = peermem.run(desired_state(), tree.node())[0]
    assert asked.status is Status.FAIL and "could use DMA-BUF" in asked.reason


@pytest.mark.parametrize("banner, release, why", [
    (PROPRIETARY, "6.8.0-60-generic", "proprietary kernel module"),
    (OPEN, "5.4.0-150-generic", "kernel < 5.12"),
])
def test_no_peermem_and_no_dmabuf_fails_saying_which(tmp_path, banner, release, why):
    spec = desired_state(gpu={"nvidia_peermem": False, "rdma_expected": True})
    result = peermem.run(spec, gpu_tree(tmp_path, banner, release).node())[0]
    assert result.status is Status.FAIL and why in result.reason


@pytest.mark.parametrize("gpu", [{"nvidia_peermem": True}, {"nvidia_peermem": False, "rdma_expected": True}])
@pytest.mark.parametrize("banner", [OPEN, PROPRIETARY])
def test_peermem_on_a_node_without_an_rdma_device_skips_saying_so(tmp_path, gpu, banner):
    """Issue 47: a 1x H100 with no RDMA device failed its prolog on 'nvidia_peermem is not loaded'. With the
    same stack and an HCA present it is still judged (the twin: FAIL / PASS as above)."""
    spec = desired_state(gpu=gpu)
    bare = peermem.run(spec, gpu_tree(tmp_path / "bare", banner, rdma=False).node())[0]
    assert bare.status is Status.SKIP and "no RDMA device" in bare.reason and "/sys/class/infiniband" in bare.reason
    with_hca = peermem.run(spec, gpu_tree(tmp_path / "hca", banner).node())[0]
    assert with_hca.status in (Status.PASS, Status.FAIL)
    assert with_hca.status is (Status.PASS if banner == OPEN and not gpu["nvidia_peermem"] else Status.FAIL)


def bare_root_tree(tmp_path, modules=""):
    """A --root tree with the driver banner but no /proc/sys (no kernel release to read)."""
    tree = FakeTree(tmp_path).write("/proc/driver/nvidia/version", OPEN)
    tree.write("/sys/class/infiniband/mlx5_0/node_type", "1: CA\n")
    return tree.write("/proc/modules", modules) if modules else tree


def test_peermem_without_a_kernel_release_judges_what_it_can_and_skips_the_rest(tmp_path):
    rdma_only = desired_state(gpu={"nvidia_peermem": False, "rdma_expected": True})
    results = run_checks(rdma_only, bare_root_tree(tmp_path).node(), names=["gpu.nvidia_peermem"])
    assert [r.status for r in results] == [Status.SKIP]  # was an ERROR with a traceback
    assert "/proc/sys/kernel/osrelease absent" in results[0].reason and "DMA-BUF" in results[0].reason
    # asked by name, only the module counts: still a FAIL, the kernel does not matter
    asked = run_checks(desired_state(), bare_root_tree(tmp_path).node(), names=["gpu.nvidia_peermem"])[0]
    assert asked.status is Status.FAIL and "osrelease absent" in asked.reason
    assert "gpu_nvidia_peermem" in asked.remediation
    loaded = bare_root_tree(tmp_path, "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n").node()
    assert peermem.run(rdma_only, loaded)[0].status is Status.PASS


def test_peermem_with_a_garbled_kernel_release_is_an_error_naming_the_file(tmp_path):
    spec = desired_state(gpu={"nvidia_peermem": False, "rdma_expected": True})
    result = peermem.run(spec, gpu_tree(tmp_path, OPEN, "linux").node())[0]
    assert result.status is Status.ERROR
    assert "/proc/sys/kernel/osrelease" in result.reason and "'linux'" in result.reason


def test_nccl_conf_exact_extra_and_wrong(tmp_path):
    tree = gpu_tree(tmp_path)
    tree.write("/etc/nccl.conf", "# managed by tunefleet\nNCCL_DEBUG=WARN\nNCCL_IB_HCA=mlx5\n")
    assert nccl_conf.run(desired_state(), tree.node())[0].status is Status.PASS
    tree.write("/etc/nccl.conf", "NCCL_DEBUG=WARN\nNCCL_IB_HCA=mlx5\nNCCL_SOCKET_IFNAME=eth0\n")
    extra = nccl_conf.run(desired_state(), tree.node())[0]
    assert extra.status is Status.WARN and "NCCL_SOCKET_IFNAME" in extra.reason
    tree.write("/etc/nccl.conf", "NCCL_DEBUG=INFO\n")
    wrong = nccl_conf.run(desired_state(), tree.node())[0]
    assert wrong.status is Status.FAIL and "NCCL_DEBUG='INFO'" in wrong.reason


def test_nccl_conf_missing_file_fails_and_bad_line_raises(tmp_path):
    tree = gpu_tree(tmp_path)
    assert nccl_conf.run(desired_state(), tree.node())[0].status is Status.FAIL
    with pytest.raises(nccl_conf.NcclConfParseError, match="line 2"):
        nccl_conf.parse_nccl_conf("NCCL_DEBUG=WARN\nthis is not a setting\n")


def _nccl_tree(tmp_path, header_version=(2, 28, 3), wheel="nvidia_nccl_cu13-2.28.9.dist-info"):
    tree = gpu_tree(tmp_path)
    major, minor, patch = header_version
    tree.write("/usr/include/nccl.h", f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n"
                                      f"#define NCCL_PATCH {patch}\n#define NCCL_SUFFIX \"\"\n")
    tree.mkdir(f"/usr/local/lib/python3.12/dist-packages/{wheel}")
    return tree


def test_nccl_versions_differ_is_a_warning(tmp_path, no_pynvml):
    # the GPU machine's pair (ENVIRONMENT.md): torch's NCCL 2.28.9 wheel, system nccl.h 2.28.3
    node = _nccl_tree(tmp_path).node(runner=smi(H100_ENABLED), live=False)
    result = versions.run(desired_state(), node)[0]
    assert result.status is Status.WARN and "2.28.9" in result.reason and "2.28.3" in result.reason
    assert "no role variable" in result.remediation


def test_nccl_versions_equal_pass_and_lib_file_name_counts(tmp_path):
    tree = gpu_tree(tmp_path)
    tree.write("/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", "")
    tree.mkdir("/usr/lib/python3/dist-packages/nvidia_nccl_cu12-2.21.5.dist-info")
    result = versions.run(desired_state(), tree.node())[0]
    assert result.status is Status.PASS and result.observed == "2.21.5"


def test_cuda_runtime_newer_than_driver(tmp_path):
    assert versions.judge_cuda(("13.0", "x"), "12.4", "550.54").status is Status.FAIL
    assert versions.judge_cuda(("12.8", "x"), "12.4", "550.54").status is Status.WARN
    assert versions.judge_cuda(("12.4", "x"), "13.0", "580.159.04").status is Status.PASS
    assert versions.judge_cuda(("12.4", "x"), None, None).status is Status.SKIP


def test_config_checks_never_import_torch(tmp_path):
    """In a fresh interpreter (torch may already be loaded in this one by other tests)."""
    import json
    import subprocess

    root = _nccl_tree(tmp_path).root
    code = ("import json, sys; from verify.checks import run_checks; from verify.node import Node; "
            f"run_checks(json.loads({json.dumps(json.dumps(desired_state()))}), Node(root={str(root)!r})); "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_facts_report_library_versions_for_fleet_drift(tmp_path):
    from verify.facts.node_facts import gather_facts

    assert gather_facts(_nccl_tree(tmp_path).node())["libraries"] == \
        {"nccl_system": "2.28.3", "nccl_framework": "2.28.9", "cuda_runtime": None}
