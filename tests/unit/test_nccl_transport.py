"""The transport NCCL used between nodes (verify/bench/nccl_transport.py, the reader in nccl_parse.py): every
captured form (tests/fixtures/nccl_transport/README.md), the class of forms under every prefix (property
test), and the judge: RDMA expected and sockets taken FAILs with its cause class, its healthy twin PASSes."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verify.bench import causes, nccl_transport
from verify.bench.common import result
from verify.bench.nccl_parse import message_body, parse_nccl_debug
from verify.bench.nccl_transport import RDMA, SOCKET, SOCKET_NOT_RDMA, crossnode, judge_crossnode, judged_record
from verify.judging import verdicts
from verify.result import Status

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nccl_transport"


def read(name: str):
    return parse_nccl_debug((FIXTURES / name).read_text())


# file -> (plugin, kind, devices, gdr, evidence) of what the inter-node traffic rode.
CAPTURED = {
    "socket_2node_rank_prefix_nccl1232.log": ("Socket", SOCKET, ("device 0",), False, "channels"),
    "socket_lo_nccl1053.log": ("Socket", SOCKET, ("lo",), False, "network"),
    "ib_roce_2_19_nccl_tests185.log": ("IB", RDMA, ("mlx5_10:1/RoCE", "mlx5_11:1/RoCE"), False, "network"),
    "ibext_merged_roce_nccl_tests373.log": ("IBext_v8", RDMA, ("mlx5_0:1/RoCE+mlx5_1:1/RoCE",), False, "channels"),
    "ib_gdrdma_busid_nccl707.log": ("IB", RDMA, ("device 5", "device 2", "device 0"), True, "channels"),
    "socket_busid_ib_disabled_nccl_tests188.log": ("Socket", SOCKET, ("ibs85f0",), False, "channels"),
    "socket_2_29_plugin_lines_nccl_pr2047.log": ("Socket", SOCKET, ("eth0",), False, "network"),
    "host_prefix_ibext_sharp_nccl1029.log": ("IBext", RDMA, ("mlx5_9:1/IB/SHARP",), False, "network"),
    "mpirun_prefix_socket_channels_horovod3658.log": ("Socket", SOCKET, ("device 0",), False, "channels"),
    "socket_ipv6_devices_oneflow9115.log": ("Socket", SOCKET, ("eno1", "veth2ea2288", "vethae2223a"), False,
                                            "network"),
    "ring_socket_2_4_nccl226.log": ("Socket", SOCKET, ("ens3",), False, "channels"),
    "ibext_plugin_loaded_nccl1357.log": ("IBext", RDMA, ("mlx5_0:1/IB/SHARP", "mlx5_1:1/IB/SHARP", "mlx5_4:1/IB/SHARP",
                                                         "mlx5_5:1/IB/SHARP"), False, "network"),
}
# file -> the NET plugin library NCCL said it loaded ("internal": its own Socket and IB).
LIBRARIES = {
    "ibext_plugin_loaded_nccl1357.log": "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so",
    "host_prefix_ibext_sharp_nccl1029.log": "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so",
    "internal_plugin_2_21_nccl1504.log": "internal",
    "socket_2_29_plugin_lines_nccl_pr2047.log": "internal",
    "ib_roce_2_19_nccl_tests185.log": "internal",
    "socket_2node_rank_prefix_nccl1232.log": "internal",
    "socket_lo_nccl1053.log": None,
}


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_each_captured_form_names_the_transport_between_nodes(name):
    found = crossnode(read(name))
    assert (found.plugin, found.kind, found.devices, found.gdr, found.evidence) == CAPTURED[name]


@pytest.mark.parametrize("name", sorted(LIBRARIES))
def test_the_net_plugin_library_nccl_loaded(name):
    assert read(name).plugin_library == LIBRARIES[name]


def test_every_fixture_is_in_the_table_or_named_apart():
    apart = {"p2p_cumem_only_2_22_nccl1538.log", "mpirun_prefix_roce_and_sockets_nccl224.log",
             "internal_plugin_2_21_nccl1504.log"}
    assert {p.name for p in FIXTURES.glob("*.log")} == set(CAPTURED) | apart


def test_device_lists_versions_and_what_nccl_could_not_use():
    merged = read("ibext_merged_roce_nccl_tests373.log")
    assert merged.net_devices == {"IB": {0: "mlx5_2:1/RoCE+mlx5_3:1/RoCE", 1: "mlx5_0:1/RoCE+mlx5_1:1/RoCE"}}
    assert merged.networks == ["IBext_v8"] and merged.paths == {"NET/IBext_v8/1": 3}
    newest = read("socket_2_29_plugin_lines_nccl_pr2047.log")
    assert newest.nccl_version == "2.29.2" and newest.net_absent == ["Failed to initialize NET plugin IB"]
    assert read("ib_roce_2_19_nccl_tests185.log").nccl_version == "2.19.3"
    assert read("socket_ipv6_devices_oneflow9115.log").net_absent == ["NET/IB : No device found."]
    # NCCL 2.4 listed both plugins' devices and said nothing of which one a communicator got.
    both = read("mpirun_prefix_roce_and_sockets_nccl224.log")
    assert set(both.net_devices) == {"IB", "Socket"} and both.net_devices["Socket"][2] == "flannel.1"
    assert crossnode(both).plugin is None and crossnode(both).describe() == "transport not reported"
    # "NET/Socket: Using 2 threads and 8 sockets per thread" lists no device.
    assert read("mpirun_prefix_socket_channels_horovod3658.log").net_devices == {}


def test_described_as_the_row_shows_it():
    assert crossnode(read("ring_socket_2_4_nccl226.log")).describe() == "NET/Socket over ens3"
    assert crossnode(read("ib_gdrdma_busid_nccl707.log")).describe().endswith("GPUDirect RDMA")
    assert crossnode(read("socket_lo_nccl1053.log")).describe() == (
        "NET/Socket over lo (the plugin NCCL assigned; no channel line seen)")
    assert crossnode(read("p2p_cumem_only_2_22_nccl1538.log")).describe() == "no network transport: P2P/CUMEM"


def test_plugin_kinds_come_from_the_table_and_an_unknown_plugin_is_never_judged():
    assert [nccl_transport.plugin_kind(p) for p in ("Socket", "IB", "IBext", "IBext_v8", "AWS Libfabric")] == [
        SOCKET, RDMA, RDMA, RDMA, RDMA]
    assert nccl_transport.plugin_kind("GPUDirectTCPX") is None and nccl_transport.plugin_kind("Socketx") is None


# ---- the class of forms: every body under every prefix a launcher or NCCL puts before it --------------------

PREFIXES = st.sampled_from([
    "", "node0:13571:13571 [0] ", "[0] node0:13571:13571 [0] ", "[1,0]<stdout>:gpu6:1407:1595 [3] ",
    "worker-0: worker-0:19491:21059 [7] ", "[default0]:host:12:34 [0] ", "[rank1]:host:12:34 [1] ", "0: h:1:2 [0] ",
    "[2025-03-01 10:00:00] h-1:99:100 [0] ", "10-90-43-152:120890:121560 [0] ",
])
IFNAMES = st.sampled_from(["lo", "eth0", "bond0.526", "ibp24s0", "enp220s0np0"])
HCAS = st.sampled_from(["mlx5_0:1/RoCE", "mlx5_10:1/IB", "mlx5_9:1/IB/SHARP", "mlx5_bond_0:1/RoCE"])


@st.composite
def net_paths(draw):
    """A NET channel path as NCCL 2.18-2.29 prints it: NET/<plugin>/<dev>[(proxy)][/GDRDMA[(PCI)]][/Shared]."""
    plugin = draw(st.sampled_from(["Socket", "IB", "IBext_v8", "AWS Libfabric"]))
    dev = draw(st.integers(0, 15))
    path = f"NET/{plugin}/{dev}"
    if draw(st.booleans()):
        path += f"({draw(st.integers(0, 63))})"
    gdr = plugin != "Socket" and draw(st.booleans())
    if gdr:
        path += "/GDRDMA" + draw(st.sampled_from(["", "(PCI)"]))
    if draw(st.booleans()):
        path += "/Shared"
    return plugin, dev, gdr, path


@st.composite
def channel_line(draw, path):
    rank = lambda: draw(st.integers(0, 511))  # noqa: E731
    gpu = draw(st.sampled_from(["[0]", "[7]", "[2a000]", ""]))
    head = draw(st.sampled_from(["Channel 03/0", "Channel 03", "Channel 31/1", "Ring 00"]))
    side = draw(st.sampled_from(["[send] ", "[receive] ", ""]))
    return f"{head} : {rank()}{gpu} -> {rank()}{gpu} {side}via {path}"


@given(st.data())
def test_property_every_prefix_reads_as_the_bare_body(data):
    plugin, dev, gdr, path = data.draw(net_paths())
    ifname, hca = data.draw(IFNAMES), data.draw(HCAS)
    bodies = [
        f"NET/Socket : Using [{dev}]{ifname}:10.0.0.{dev}<0>",
        f"NET/IB : Using [{dev}]{hca} [RO]; OOB {ifname}:10.0.0.1<0>",
        data.draw(st.sampled_from([f"Using network {plugin}", f"Assigned NET plugin {plugin} to comm",
                                   f"Initialized NET plugin {plugin}"])),
        data.draw(channel_line(path)),
        data.draw(channel_line("P2P/CUMEM/read")),
        data.draw(channel_line("SHM/direct/direct")),
        "Connected all rings",
        data.draw(st.sampled_from(["NET/Plugin: Loaded net plugin NCCL RDMA Plugin v6 (v6)",
                                   "Successfully loaded external network plugin /opt/x/libnccl-net.so",
                                   "NET/Plugin : No plugin found, using internal implementation",
                                   "NET/Plugin: Using internal network plugin.",
                                   "NET/Plugin: Could not find: libnccl-net.so"])),
    ]
    lines = [data.draw(PREFIXES) + "NCCL INFO " + body for body in bodies]
    assert [message_body(line) for line in lines] == bodies
    prefixed, bare = parse_nccl_debug("\n".join(lines)), parse_nccl_debug("\n".join("NCCL INFO " + b for b in bodies))
    assert prefixed.to_dict() == bare.to_dict()
    found = crossnode(prefixed)
    listed = {"Socket": ifname, "IB": hca, "IBext_v8": hca}.get(plugin, f"device {dev}")
    assert (found.plugin, found.devices, found.gdr, found.evidence) == (plugin, (listed,), gdr, "channels")
    assert prefixed.networks == [plugin] and prefixed.unplaced == 0
    assert prefixed.plugin_library in ("internal", "NCCL RDMA Plugin v6", "/opt/x/libnccl-net.so")


@given(st.sampled_from(["Channel 00/0 : 0[0] -> 1[0] [send] via ", "Channel xx : a -> b via NET/IB/0"]))
def test_a_channel_line_that_cannot_be_read_is_counted(body):
    found = parse_nccl_debug("h:1:2 [0] NCCL INFO " + body)
    assert found.unplaced == 1 and found.paths == {}


def test_glued_records_of_two_processes_keep_the_whole_one():
    glued = ("a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Sockb:3:4 [1] NCCL INFO "
             "Channel 00/0 : 1[1] -> 0[0] [send] via NET/Socket/0")
    assert parse_nccl_debug(glued).paths == {"NET/Socket/0": 1}


# ---- the judge ------------------------------------------------------------------------------------------------

SPEC_RDMA = {"gpu": {"rdma_expected": True}}


def pair_row(status: Status = Status.PASS):
    return result("fleet.nccl_pair.lo", status, "busbw 2.1 GB/s at 256 MiB", "1.0 GB/s busbw", 2.1)


LO_PAIR = """h:10:11 [0] NCCL INFO NET/IB : No device found.
h:10:11 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
h:10:11 [0] NCCL INFO Using network Socket
h:10:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0
h:10:12 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0
"""
ROCE_PAIR = """h:10:11 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
h:10:11 [0] NCCL INFO Using network IB
h:10:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
h:10:12 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
"""


def test_rdma_expected_and_sockets_taken_fails_with_its_cause_and_action():
    row = pair_row()
    judge_crossnode(row, parse_nccl_debug(LO_PAIR), nccl_transport.rdma_expected(SPEC_RDMA))
    assert row.status is Status.FAIL
    assert row.details["cause"]["class"] == SOCKET_NOT_RDMA in causes.CAUSE_CLASSES
    assert row.details[verdicts.ACTION_KEY] == verdicts.FIX_CONFIG
    assert "NET/Socket over lo" in row.reason and "NET/IB : No device found." in row.details["cause"]["evidence"]
    assert "NCCL_IB_HCA" in row.remediation and "NCCL_IB_GID_INDEX" in row.remediation
    assert "nvidia_peermem" in row.remediation
    assert row.details["crossnode_transport"]["described"] == "NET/Socket over lo"


def test_its_healthy_twin_rdma_taken_passes_and_shows_the_hca():
    row = pair_row()
    found = judge_crossnode(row, parse_nccl_debug(ROCE_PAIR), True)
    assert row.status is Status.PASS and "cause" not in row.details
    assert found.describe() == "NET/IB mlx5_0:1/RoCE GPUDirect RDMA" and "NET/IB mlx5_0:1/RoCE" in row.reason


def test_sockets_where_no_rdma_is_expected_are_shown_never_judged():
    row = pair_row()
    judge_crossnode(row, parse_nccl_debug(LO_PAIR), nccl_transport.rdma_expected({"gpu": {"rdma_expected": False}}))
    assert row.status is Status.PASS and row.reason.startswith("NCCL NET/Socket over lo: busbw")


def test_a_cross_node_figure_that_never_left_the_host_is_error():
    row = pair_row()
    judge_crossnode(row, read("p2p_cumem_only_2_22_nccl1538.log"), False)
    assert row.status is Status.ERROR and "never met over a network transport" in row.reason


def test_rdma_expected_and_nccl_silent_is_error_never_pass_and_a_fail_stays_fail():
    row = pair_row()
    judge_crossnode(row, parse_nccl_debug("no NCCL here"), True)
    assert row.status is Status.ERROR and "named no transport" in row.reason
    slow = pair_row(Status.FAIL)
    judge_crossnode(slow, parse_nccl_debug(""), True)
    assert slow.status is Status.FAIL


def test_the_expectation_comes_from_the_desired_state_or_the_profiles_vars():
    assert nccl_transport.rdma_expected(SPEC_RDMA) is True
    assert nccl_transport.rdma_expected(None, {"vars": {"gpu_rdma_expected": True}}) is True
    assert nccl_transport.rdma_expected({"gpu": {"rdma_expected": "yes"}}, {"vars": []}) is False
    assert nccl_transport.rdma_expected(None, None) is False


def test_a_fleet_record_keeps_its_role_and_carries_the_transport():
    record = dict(pair_row().to_dict(), role="fleet")
    judged = judged_record(record, LO_PAIR, True)
    assert judged["role"] == "fleet" and judged["status"] == "FAIL"
    assert judged["details"]["crossnode_transport"]["devices"] == ["lo"]


def test_one_machine_env_makes_each_side_its_own_nccl_host_with_intra_node_transports_off():
    env = nccl_transport.one_machine_env("node-a")
    assert env == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
                   "NCCL_HOSTID": "tunefleet-node-a"}
