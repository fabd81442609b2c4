"""Every figure has a physical bound (issue 27 items 1-2): storage against its device's link, RDMA
against its port's rate and the fastest wire's latency, the fleet's multi-node all-reduce against the
inter-node rail. Garbage (NaN, inf, negative, zero where nothing moved, above the bound, wrong types)
is ERROR "measurement broken" in every judge, "recorded only" included, never PASS.

Hypothesis uses the same profiles as test_parsers_fuzz.py: fixed seed ("ci") in `make test`,
TUNEFLEET_HYPOTHESIS_PROFILE=fuzz for a random seed and many more examples.
"""
from __future__ import annotations

import argparse
import math
import os
from typing import Optional

from hypothesis import given
from hypothesis import strategies as st

from verify.bench import hostcopy, nccl, perftest, storage
from verify.bench.common import judged, recorded_only
from verify.bench.nccl_parse import CurvePoint, NcclTransport
from verify.bench.perftest_parse import PerftestResult, PerftestRow
from verify.facts.links import Port
from verify.fleet import multinode
from verify.judging import peaks
from verify.judging.thresholds import Threshold, broken_measurement
from verify.node import Node
from verify.result import Status


def garbage(bound: Optional[float], zero_is_broken: bool = True):
    """Figures no real measurement gives: not finite, negative, zero (nothing moved), above `bound`
    (None: a figure with no upper limit, a latency), or not a number at all."""
    choices = [
        st.sampled_from([math.nan, math.inf, -math.inf]),
        st.floats(max_value=-1e-9, allow_nan=False),
        st.one_of(st.text(max_size=8), st.none(), st.booleans(), st.lists(st.integers(), max_size=2)),
    ]
    if bound is not None:
        choices += [
            st.floats(min_value=bound * 1.000001, allow_nan=False, allow_infinity=False).filter(lambda v: v > bound),
            st.integers(min_value=int(bound) + 1, max_value=10 ** 400),
        ]
    if zero_is_broken:
        choices.append(st.sampled_from([0, 0.0, -0.0]))
    return st.one_of(*choices)


FLOOR = Threshold(limit=1.0, warn=2.0)


# ---- the shared rule --------------------------------------------------------------------------------

@given(garbage(100.0))
def test_broken_measurement_names_every_kind_of_garbage(value):
    assert broken_measurement(value, 100.0, "", 0.0).startswith("measurement broken")


@given(st.floats(min_value=0.001, max_value=100.0))
def test_a_real_figure_inside_its_bounds_is_not_broken(value):
    assert broken_measurement(value, 100.0, "", 0.0) is None


@given(garbage(100.0))
def test_recorded_only_and_judged_never_pass_garbage(value):
    peak = peaks.Peak(100.0, "test link")
    assert recorded_only("x", value, "x", value, {}, peak, 0.0).status == Status.ERROR
    for threshold in (FLOOR, Threshold(limit=1e12, kind="max")):
        assert judged("x", threshold, value, "x", None, value, "", {}, peak=100.0, floor=0.0).status == Status.ERROR


# ---- storage: O_DIRECT, cuFile and gdsio against the device's link ---------------------------------

@given(garbage(peaks.unknown_storage_bound().gbps), st.sampled_from([None, FLOOR]))
def test_storage_rate_garbage_is_error_with_or_without_a_floor(gbps, threshold):
    row = storage.judge_floor("bench.storage.odirect", "O_DIRECT:", gbps, threshold, {})
    assert row.status == Status.ERROR and "measurement broken" in row.reason


def test_storage_rate_above_its_nvme_link_is_error_and_below_is_recorded():
    link = peaks.pcie_peak([(4, 4, "test")])  # 7.88 GB/s
    assert storage.judge_floor("s", "O_DIRECT:", 8.5, None, {}, link).status == Status.ERROR
    kept = storage.judge_floor("s", "O_DIRECT:", 6.9, None, {}, link)
    assert kept.status == Status.PASS and "recorded only" in kept.reason
    assert kept.details["physical_peak"]["gbps"] == round(link.gbps, 3)


def _link(tmp_path, where: str, target: str) -> None:
    path = tmp_path / where.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _write(tmp_path, where: str, text: str) -> None:
    path = tmp_path / where.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _nvme(tmp_path, name: str, pci: str, speed: str, width: str) -> None:
    pci_dir = f"/sys/devices/pci0000:00/{pci}"
    _write(tmp_path, f"{pci_dir}/max_link_speed", speed + "\n")
    _write(tmp_path, f"{pci_dir}/max_link_width", width + "\n")
    controller = f"{pci_dir}/nvme/{name[:5]}"
    (tmp_path / controller.lstrip("/")).mkdir(parents=True)
    _link(tmp_path, f"{controller}/device", f"../../../{pci}")
    _link(tmp_path, f"/sys/block/{name}/device", f"../../devices/pci0000:00/{pci}/nvme/{name[:5]}")
    (tmp_path / f"sys/block/{name}/{name}p1").mkdir(parents=True)


def test_nvme_bound_is_its_controllers_pcie_link_and_a_partition_finds_its_disk(tmp_path):
    _nvme(tmp_path, "nvme0n1", "0000:01:00.0", "16.0 GT/s PCIe", "4")
    node = Node(root=str(tmp_path))
    assert storage.whole_disk(node, "nvme0n1p1") == "nvme0n1"
    bound = storage.device_bound(node, "nvme0n1")
    assert abs(bound.gbps - 7.877) < 0.01 and "Gen4 x4" in bound.source


def test_md_array_bound_is_the_sum_of_its_members(tmp_path):
    _nvme(tmp_path, "nvme0n1", "0000:01:00.0", "32.0 GT/s PCIe", "4")
    _nvme(tmp_path, "nvme1n1", "0000:02:00.0", "32.0 GT/s PCIe", "4")
    for member in ("nvme0n1p1", "nvme1n1p1"):
        (tmp_path / "sys/block/md0/slaves" / member).mkdir(parents=True)
    bound = storage.device_bound(Node(root=str(tmp_path)), "md0")
    assert abs(bound.gbps - 2 * peaks.pcie_gbps(5, 4)) < 1e-6 and "md0 over" in bound.source


def test_sata_is_six_gbits_and_virtio_falls_back_to_the_fastest_storage_link(tmp_path):
    _link(tmp_path, "/sys/block/sda", "../devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda")
    _link(tmp_path, "/sys/block/vda", "../devices/pci0000:00/0000:00:04.0/virtio1/block/vda")
    node = Node(root=str(tmp_path))
    assert storage.device_bound(node, "sda").gbps == 0.6
    assert storage.device_bound(node, "vda") is None
    assert storage.judge_floor("s", "O_DIRECT:", 0.9, None, {}, storage.device_bound(node, "sda")).status \
        == Status.ERROR
    fastest = peaks.unknown_storage_bound("vda: virtio, no link")
    assert abs(fastest.gbps - peaks.pcie_gbps(6, 16)) < 1e-9 and "Gen6 x16" in fastest.source


def test_storage_bound_of_a_file_follows_its_device_number(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"x")
    number = os.stat(data).st_dev
    root = tmp_path / "root"
    _nvme(root, "nvme0n1", "0000:01:00.0", "8.0 GT/s PCIe", "4")
    _link(root, f"/sys/dev/block/{os.major(number)}:{os.minor(number)}", "../../block/nvme0n1/nvme0n1p1")
    assert "Gen3 x4" in storage.storage_bound(Node(root=str(root)), str(data)).source
    assert "not on a block device" in storage.storage_bound(Node(root=str(tmp_path / "empty")), str(data)).source


# ---- RDMA perftest: the port's own rate, the fastest wire's latency --------------------------------

PORT_400 = Port("mlx5_0", 1, 400.0, "InfiniBand", "4: ACTIVE")
PORT_UNKNOWN = Port("mlx5_1", 1, None, "InfiniBand", "4: ACTIVE")


def _bw(average) -> PerftestResult:
    return PerftestResult("bw", rows=[PerftestRow(65536, 5000, bw_peak_gbits=None, bw_avg_gbits=average)])


def _lat(typical) -> PerftestResult:
    return PerftestResult("lat", rows=[PerftestRow(2, 1000, latency_us={"t_typical": typical})])


def test_rdma_bandwidth_above_its_port_rate_is_error_even_with_a_floor():
    threshold = perftest.bw_threshold(None, None, PORT_400, False)
    row = perftest.judge("r", _bw(5000.0), PORT_400, "write_bw", threshold, None)
    assert row.status == Status.ERROR and "400 Gb/s" in row.reason
    assert perftest.judge("r", _bw(380.0), PORT_400, "write_bw", threshold, None).status == Status.PASS
    both = perftest.bw_threshold(None, None, PORT_400, True)
    assert perftest.judge("r", _bw(760.0), PORT_400, "write_bw", both, None, bidirectional=True).status \
        == Status.PASS


@given(garbage(400.0), st.sampled_from([PORT_400, PORT_UNKNOWN]))
def test_rdma_bandwidth_garbage_is_error(average, port):
    threshold = perftest.bw_threshold(None, None, port, False)
    if average is None:
        return  # no average at all is its own ERROR ("no average bandwidth"), checked below
    row = perftest.judge("r", _bw(average), port, "write_bw", threshold, None)
    bound = peaks.rdma_port_bound(port.rate_gbits).gbps
    if isinstance(average, (int, float)) and not isinstance(average, bool) and 0 < average <= bound:
        return  # within an unknown port's XDR bound: a real figure
    assert row.status == Status.ERROR


def test_rdma_unknown_port_rate_is_bounded_by_the_fastest_infiniband_port():
    assert perftest.judge("r", _bw(900.0), PORT_UNKNOWN, "write_bw", None, None).status == Status.ERROR
    kept = perftest.judge("r", _bw(700.0), PORT_UNKNOWN, "write_bw", None, None)
    assert kept.status == Status.PASS and "recorded only" in kept.reason
    assert perftest.judge("r", _bw(None), PORT_UNKNOWN, "write_bw", None, None).status == Status.ERROR


@given(st.one_of(garbage(None), st.floats(min_value=0.0, max_value=peaks.RDMA_LATENCY_FLOOR_US)),
       st.sampled_from([None, Threshold(limit=5.0, kind="max")]))
def test_rdma_latency_at_or_below_the_fastest_wire_is_error(typical, ceiling):
    row = perftest.judge("r", _lat(typical), PORT_400, "write_lat", None, ceiling)
    assert row.status == Status.ERROR


def test_zero_latency_is_error_and_a_real_one_passes():
    zero = perftest.judge("r", _lat(0.0), PORT_400, "write_lat", None, None)
    assert zero.status == Status.ERROR and "physical floor" in zero.reason
    assert perftest.judge("r", _lat(2.42), PORT_400, "write_lat", None, None).status == Status.PASS


# ---- host copies and the intra-node all-reduce: zero and wrong types too ----------------------------

@given(garbage(peaks.pcie_gbps(5, 16)), st.booleans(), st.sampled_from([None, Threshold(limit=10.0)]))
def test_host_copy_garbage_is_error_with_any_link_knowledge_and_any_floor(gbps, link_known, absolute):
    pcie = {"gen_max": 5, "width_max": 16} if link_known else {}
    row = hostcopy.judge_copy("h2d", {"index": 0, "h2d_gbps": gbps, "pcie": pcie}, absolute, hostcopy.DERIVED_RATIO)
    if gbps is None:
        assert row.status == Status.ERROR  # "no H2D measurement"
        return
    if not link_known and isinstance(gbps, (int, float)) and 0 < gbps <= peaks.FASTEST_HOST_LINK_GBPS:
        return  # within the NVLink-C2C bound: real on a Grace Hopper
    assert row.status == Status.ERROR


def _measurement(busbw, ranks: int = 2) -> nccl.Measurement:
    point = CurvePoint(1 << 30, 1 << 28, "float", "sum", 1000.0, busbw, busbw, 0)
    return nccl.Measurement("torch", [point], ranks, NcclTransport(), [], {})


@given(garbage(peaks.unknown_links_bound().gbps), st.sampled_from([None, Threshold(limit=1.0)]))
def test_allreduce_garbage_is_error_with_or_without_a_floor(busbw, threshold):
    if busbw is None or isinstance(busbw, (str, list, bool)):
        return  # the schema refuses these at the boundary (test_engine_payloads.py)
    row = nccl.judge(_measurement(busbw), 2, threshold, nccl.NcclOptions(), None, peaks.unknown_links_bound())
    assert row.status == Status.ERROR


# ---- the fleet's multi-node all-reduce: the inter-node rail ----------------------------------------

def _args(**changes) -> argparse.Namespace:
    values = dict(nnodes=2, nproc_per_node=1, node_rank=0, master_addr="h0", launcher="torchrun", backend="nccl")
    values.update(changes)
    return argparse.Namespace(**values)


def _rows(busbw) -> dict:
    return {"world_size": 2, "rows": [{"size_bytes": 1 << 30, "count": 1 << 28, "dtype": "float", "redop": "sum",
                                       "time_us": 1000.0, "algbw_gbps": 1.0, "busbw_gbps": busbw, "wrong": 0}]}


def test_internode_rail_bound_is_twice_the_hca_rates_else_xdr_else_the_links_bound():
    assert peaks.internode_busbw_bound([400.0] * 8).gbps == 800.0
    assert peaks.internode_busbw_bound([400.0, None]).gbps == 2 * (400 + 800) / 8
    assert peaks.internode_busbw_bound([]).gbps == peaks.unknown_links_bound().gbps


def test_multinode_busbw_above_the_rail_is_error_and_inside_it_passes():
    rail = peaks.internode_busbw_bound([400.0])  # 100 GB/s
    above = multinode.judge_run(_rows(150.0), 0, "", _args(), None, None, rail)
    assert above["status"] == "ERROR" and "inter-node rail" in above["reason"]
    assert multinode.judge_run(_rows(45.0), 0, "", _args(), None, None, rail)["status"] == "PASS"


@given(garbage(100.0))
def test_multinode_garbage_is_error(busbw):
    rail = peaks.internode_busbw_bound([400.0])
    assert multinode.judge_run(_rows(busbw), 0, "", _args(), None, None, rail)["status"] == "ERROR"
