"""Link peaks and hardware detection: PCIe/NVLink/IB maths, sysfs and nvidia-smi read through the Node."""

from __future__ import annotations

import json

import pytest
from bench_helpers import NODE_FIXTURES, output, scripted_node

from verify.facts import gpu_query, hardware
from verify.judging import peaks
from verify.node import Node

SNAPSHOT = NODE_FIXTURES.parent / "snapshots" / "gpu_h200"


def test_pcie_rates_per_direction():
    assert peaks.pcie_gbps(5, 16) == pytest.approx(63.015, abs=0.01)
    assert peaks.pcie_gbps(4, 16) == pytest.approx(31.51, abs=0.01)
    assert peaks.pcie_gbps(3, 8) == pytest.approx(7.877, abs=0.01)
    assert peaks.pcie_gbps(1, 1) == pytest.approx(0.25)
    assert peaks.pcie_gbps(None, 16) is None and peaks.pcie_gbps(7, 16) is None


def test_sysfs_link_speed_text_to_generation():
    assert peaks.pcie_gen_from_speed("32.0 GT/s PCIe") == 5
    assert peaks.pcie_gen_from_speed("8 GT/s") == 3
    assert peaks.pcie_gen_from_speed("2.5 GT/s PCIe") == 1
    assert peaks.pcie_gen_from_speed("Unknown") is None and peaks.pcie_gen_from_speed(None) is None


def test_the_fastest_reading_of_a_link_is_its_bound():
    # A VM's emulated port may claim Gen1 x1; NVML reads Gen5 x16: the bound must not call 55 GB/s broken.
    best = peaks.pcie_peak([(1, 1, "sysfs"), (5, 16, "NVML"), (None, None, "nothing")])
    assert best.gbps == pytest.approx(63.015, abs=0.01) and "NVML" in best.source
    assert peaks.pcie_peak([(None, 16, "x")]) is None


def test_allreduce_bound_sums_nvlink_and_pcie_and_doubles_for_nvls():
    gen5 = peaks.Peak(63.015, "PCIe Gen5 x16")
    ring = peaks.allreduce_peak(478.116, gen5)
    assert ring.gbps == pytest.approx(541.13, abs=0.01)
    # 8x H100 with NVLS measured 478.87 GB/s over 450 GB/s of NVLink: the NVLS bound must allow it.
    assert peaks.allreduce_peak(450.0, gen5, nvls=True).gbps > 478.87
    assert peaks.allreduce_peak(None, None) is None
    assert peaks.ib_gbps(400) == 50.0 and peaks.ib_gbps(None) is None


def _gpu_tree(tmp_path, speed="32.0 GT/s PCIe", width="16"):
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04\n")
    for bdf in ("0000:00:06.0", "0000:00:07.0"):
        device = tmp_path / "sys/bus/pci/devices" / bdf
        device.mkdir(parents=True)
        for name, value in (("current_link_speed", speed), ("max_link_speed", "32.0 GT/s PCIe"),
                            ("current_link_width", width), ("max_link_width", "16")):
            (device / name).write_text(value + "\n")


def test_detect_reads_gpus_nvlink_pcie_and_hcas_through_the_node(tmp_path):
    _gpu_tree(tmp_path, speed="16.0 GT/s PCIe", width="8")
    nvlink = (NODE_FIXTURES / "nvidia-smi-nvlink-status.txt").read_text()
    node = scripted_node(lambda argv: output(argv, stdout=nvlink), root=str(tmp_path))
    node.live = True
    # What NVML said on the 2x H200 machine, as the snapshot recorded it.
    recorded = json.loads((SNAPSHOT / "recorded.json").read_text())["gpus"]
    node.memo["gpus"] = gpu_query.GpuInventory.from_dict(recorded)
    found = hardware.detect(node)
    assert [g.bus_id for g in found.gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    gpu0 = found.gpus[0]
    assert (gpu0.nvlink_links, gpu0.pcie_gen, gpu0.pcie_width, gpu0.pcie_gen_max) == (18, 4, 8, 5)
    assert found.nvlink_per_gpu() == pytest.approx(478.116)
    assert found.pcie_peak().gbps == pytest.approx(63.015, abs=0.01)
    assert found.describe() == "2x NVIDIA H200, NVLink 18 links (478.1 GB/s) per GPU, PCIe Gen5 x16, no active HCA"
    assert hardware.detect(node) is found  # memoised: nvidia-smi ran once per command
    assert [c["argv"] for c in node.runner.calls] == [["nvidia-smi", "nvlink", "--status"]]


def test_no_driver_means_no_gpu_and_the_reason(tmp_path):
    found = hardware.detect(Node(root=str(tmp_path)))
    assert found.gpus == [] and "no NVIDIA driver" in found.describe()
    assert found.nvlink_per_gpu() is None and found.pcie_peak() is None


def test_nvml_bus_id_to_sysfs_name():
    assert hardware.sysfs_bdf("00000000:00:06.0") == "0000:00:06.0"
    assert hardware.sysfs_bdf("00000001:3B:00.0") == "0001:3b:00.0"
