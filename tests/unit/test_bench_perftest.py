"""RDMA perftest: parsers on published outputs, command lines, thresholds, loopback/peer orchestration."""

from __future__ import annotations

import pytest
from bench_helpers import fixture, output, scripted_node

from verify.bench import perftest
from verify.bench.perftest_parse import MIB_TO_GBITS, parse_json, parse_text
from verify.facts.links import parse_port_rate
from verify.result import Status


def test_bandwidth_table_in_gbits():
    parsed = parse_text(fixture("perftest_ib_write_bw_gbits_issue273.txt"))
    assert parsed.kind == "bw" and parsed.device == "ib0" and parsed.link_type == "Ethernet"
    row = parsed.largest
    assert (row.size_bytes, row.iterations, row.bw_avg_gbits, row.msg_rate_mpps) == (8, 224958464, 0.48, 7.498617)


def test_sweep_takes_the_largest_size():
    parsed = parse_text(fixture("perftest_ib_write_bw_sweep_issue132.txt"))
    assert [r.size_bytes for r in parsed.rows] == [2, 4, 8]
    assert parsed.largest.bw_avg_gbits == 0.17 and parsed.test == "RDMA_Write BW Test"


def test_latency_table_skips_cpu_frequency_warnings():
    parsed = parse_text(fixture("perftest_ib_read_lat_roce_spiderpool.txt"))
    assert parsed.kind == "lat" and len(parsed.rows) == 1
    assert parsed.largest.latency_us == {
        "t_min": 6.66,
        "t_max": 20.37,
        "t_typical": 6.74,
        "t_avg": 6.82,
        "t_stdev": 0.78,
        "p99": 7.15,
        "p99_9": 20.37,
    }
    assert parsed.warnings[0].startswith("Conflicting CPU frequency")


def test_old_invalid_json_is_still_read():
    parsed = parse_json(fixture("perftest_ib_write_lat_json_issue216.json"))
    assert parsed.kind == "lat" and parsed.test == "RDMA_Write_Latency_Test" and parsed.device == "rxe0"
    assert parsed.largest.size_bytes == 128 and parsed.largest.latency_us["p99_9"] == 4.03


def test_mib_per_second_header_is_converted():
    text = fixture("perftest_ib_write_bw_gbits_issue273.txt").replace("[Gb/sec]", "[MB/sec]")
    assert parse_text(text).largest.bw_avg_gbits == pytest.approx(0.48 * MIB_TO_GBITS)


def test_port_rate():
    assert parse_port_rate("400 Gb/sec (4X NDR)\n") == 400.0
    assert parse_port_rate("200 Gb/sec (4X HDR)") == 200.0
    assert parse_port_rate("") is None


ROCE = perftest.Port("mlx5_0", 1, 400.0, "Ethernet", "4: ACTIVE")
IB = perftest.Port("mlx5_1", 1, 200.0, "InfiniBand", "4: ACTIVE")


def test_client_and_server_command_lines():
    opts = perftest.PerftestOptions(use_cuda=3, bidirectional=True)
    server = perftest.perftest_argv("ib_write_bw", ROCE, opts, 18600, None, None)
    client = perftest.perftest_argv("ib_write_bw", ROCE, opts, 18600, "10.0.0.2", "/tmp/x.json")
    assert server[:7] == ["ib_write_bw", "-d", "mlx5_0", "-i", "1", "-p", "18600"]
    assert "--report_gbits" in server and "-b" in server and "--use_cuda=3" in server
    assert server[server.index("-x") + 1] == "3"  # RoCE needs a GID index; both sides the same
    assert client[-1] == "10.0.0.2" and "--out_json_file=/tmp/x.json" in client
    assert "-x" not in perftest.perftest_argv("ib_write_bw", IB, perftest.PerftestOptions(), 1, None, None)
    lat = perftest.perftest_argv("ib_write_lat", IB, opts, 1, None, None)
    assert "--report_gbits" not in lat and not any(a.startswith("--use_cuda") for a in lat)


def test_threshold_is_ninety_percent_of_port_rate_doubled_when_bidirectional():
    assert perftest.bw_threshold(None, None, ROCE, False).limit == 360.0
    assert perftest.bw_threshold(None, None, ROCE, True).limit == 720.0
    profile = {"name": "p", "thresholds": {"rdma_bw_port_ratio": {"min": 0.95, "source": "s"}}}
    assert perftest.bw_threshold(profile, None, IB, False).limit == 190.0
    spec = {"verify": {"thresholds": {"rdma_bw_gbps": 100}}}
    assert perftest.bw_threshold(profile, spec, IB, False).limit == 100.0


def _sysfs(tmp_path, ports):
    for device, number, rate, layer, state in ports:
        base = tmp_path / "sys" / "class" / "infiniband" / device / "ports" / str(number)
        base.mkdir(parents=True)
        (base / "rate").write_text(rate)
        (base / "link_layer").write_text(layer)
        (base / "state").write_text(state)
    return str(tmp_path)


def test_discovery_reads_ports_and_skips_down_ones(tmp_path):
    root = _sysfs(
        tmp_path,
        [
            ("mlx5_0", 1, "400 Gb/sec (4X NDR)\n", "InfiniBand\n", "4: ACTIVE\n"),
            ("mlx5_1", 1, "400 Gb/sec (4X NDR)\n", "InfiniBand\n", "1: DOWN\n"),
        ],
    )
    ports = perftest.discover_ports(root)
    assert [(p.device, p.active, p.rate_gbits) for p in ports] == [("mlx5_0", True, 400.0), ("mlx5_1", False, 400.0)]


def test_no_hca_is_a_skip(tmp_path):
    results = perftest.run(None, None, scripted_node(lambda a: output(a), root=str(tmp_path)), {})
    assert results[0].status == Status.SKIP and "no active RDMA port" in results[0].reason


def test_hca_without_perftest_is_an_error(tmp_path, monkeypatch):
    root = _sysfs(tmp_path, [("mlx5_0", 1, "400 Gb/sec (4X NDR)", "InfiniBand", "4: ACTIVE")])
    monkeypatch.setattr(perftest, "which", lambda name, root="/": None)
    results = perftest.run(None, None, scripted_node(lambda a: output(a), root=root), {})
    assert results[0].status == Status.ERROR and "not installed" in results[0].reason


def _fast(**kw):
    base = {"tool_dir": "/opt/perftest/bin", "server_start_s": 0, "tries": 1}
    base.update(kw)
    return base


def test_loopback_starts_server_then_client_and_judges_against_port_rate(tmp_path):
    root = _sysfs(tmp_path, [("mlx5_0", 1, "400 Gb/sec (4X NDR)", "InfiniBand", "4: ACTIVE")])
    sweep = fixture("perftest_ib_write_bw_sweep_issue132.txt")
    node = scripted_node(lambda argv: output(argv, stdout=sweep if argv[-1] == "127.0.0.1" else ""), root=root)
    results = perftest.run(None, None, node, _fast())
    verdict = results[0]
    assert verdict.check_id == "bench.rdma.mlx5_0.write_bw"
    assert verdict.status == Status.FAIL and verdict.expected == ">= 360 Gb/s" and verdict.observed == 0.17
    server, client = (c for c in node.runner.calls)
    assert server["argv"][0] == "/opt/perftest/bin/ib_write_bw" and server["argv"][-1] != "127.0.0.1"
    assert client["argv"][-1] == "127.0.0.1"
    assert server["timeout_s"] > client["timeout_s"]


def test_peer_run_bounds_the_remote_server_with_timeout(tmp_path):
    root = _sysfs(tmp_path, [("mlx5_0", 1, "200 Gb/sec (4X HDR)", "InfiniBand", "4: ACTIVE")])
    lat = fixture("perftest_ib_read_lat_roce_spiderpool.txt")
    node = scripted_node(lambda argv: output(argv, stdout=lat), root=root)
    results = perftest.run(None, None, node, _fast(peer="node-b", tests=["write_lat"]))
    assert results[0].status == Status.PASS and results[0].observed == 6.74
    server = next(c["argv"] for c in node.runner.calls if c["argv"][0] == "ssh")
    assert server[:5] == ["ssh", "-o", "BatchMode=yes", "--", "node-b"] and server[5] == "timeout"
    client = next(c["argv"] for c in node.runner.calls if c["argv"][0] != "ssh")
    assert client[-1] == "node-b"


def test_a_peer_that_ssh_could_read_as_an_option_is_refused_before_anything_runs(tmp_path):
    root = _sysfs(tmp_path, [("mlx5_0", 1, "200 Gb/sec (4X HDR)", "InfiniBand", "4: ACTIVE")])
    node = scripted_node(lambda argv: output(argv, stdout=""), root=root)
    rows = perftest.run(None, None, node, _fast(peer="-oProxyCommand=x", tests=["write_lat"]))
    assert [(r.check_id, r.status) for r in rows] == [("bench.rdma", Status.ERROR)]
    assert "--peer '-oProxyCommand=x' could be read as an option" in rows[0].reason
    assert node.runner.calls == []


def test_latency_ceiling_from_verify_thresholds(tmp_path):
    root = _sysfs(tmp_path, [("mlx5_0", 1, "200 Gb/sec (4X HDR)", "Ethernet", "4: ACTIVE")])
    lat = fixture("perftest_ib_read_lat_roce_spiderpool.txt")
    spec = {"verify": {"thresholds": {"rdma_lat_us": 5.0}}}
    results = perftest.run(
        spec, None, scripted_node(lambda a: output(a, stdout=lat), root=root), _fast(tests=["send_lat"])
    )
    assert results[0].status == Status.FAIL and results[0].expected == "<= 5 us"


def test_hung_client_is_error_and_both_sides_were_bounded(tmp_path):
    root = _sysfs(tmp_path, [("mlx5_0", 1, "400 Gb/sec (4X NDR)", "InfiniBand", "4: ACTIVE")])
    node = scripted_node(lambda argv: output(argv, stdout=" #bytes  #iterations", timed_out=True), root=root)
    results = perftest.run(None, None, node, _fast(timeout_s=2))
    assert results[0].status == Status.ERROR and "hung" in results[0].reason
    assert all(c["timeout_s"] <= 12 for c in node.runner.calls)


def test_unknown_test_name_is_one_clear_error(tmp_path):
    results = perftest.run(None, None, scripted_node(lambda a: output(a), root=str(tmp_path)), {"tests": ["atomic"]})
    assert results[0].status == Status.ERROR and "atomic" in results[0].reason
