"""Storage reads: O_DIRECT for real on this machine, gdsio/gdscheck parsers, cuFile reporting."""

from __future__ import annotations

import os

import pytest
from bench_helpers import fixture, output, scripted_node

from verify.bench import storage
from verify.bench.cufile_read import cufile_mode
from verify.bench.gds_parse import parse_gdscheck, parse_gdsio
from verify.bench.odirect_read import make_file, read_direct
from verify.node import Node
from verify.result import Status


def test_odirect_reads_every_block_at_any_queue_depth(tmp_path):
    path = str(tmp_path / "data.bin")
    make_file(path, 8 << 20)
    for depth in (1, 3):
        run = read_direct(path, 1 << 20, depth)
        assert run["bytes"] == 8 << 20 and run["gbps"] > 0 and run["queue_depth"] == depth


def test_odirect_refuses_a_file_smaller_than_a_block(tmp_path):
    path = tmp_path / "tiny.bin"
    path.write_bytes(b"x" * 4096)
    with pytest.raises(ValueError, match="smaller than one"):
        read_direct(str(path), 1 << 20, 1)


@pytest.mark.slow
def test_storage_run_for_real_writes_reads_and_removes_its_scratch_file(tmp_path):
    results = storage.run(
        None, None, Node(), {"dir": str(tmp_path), "size_bytes": 16 << 20, "tries": 1, "engines": ("odirect",)}
    )
    assert [r.check_id for r in results] == ["bench.storage.odirect"]
    assert results[0].status == Status.PASS and results[0].observed > 0
    assert results[0].details["runs"][0]["bytes"] == 16 << 20
    assert os.listdir(tmp_path) == []


def test_odirect_floor_from_verify_thresholds(tmp_path):
    path = str(tmp_path / "f.bin")
    make_file(path, 4 << 20)
    spec = {"verify": {"thresholds": {"storage_odirect_gbps": 1e6}}}
    results = storage.run(spec, None, Node(), {"file": path, "tries": 1, "engines": ("odirect",)})
    assert results[0].status == Status.FAIL and results[0].expected == ">= 1e+06 GB/s"
    assert os.path.exists(path)  # a file the user named is never removed


def test_cufile_failure_on_the_gpu_machine_is_an_error_with_the_stage(tmp_path, monkeypatch):
    path = str(tmp_path / "f.bin")
    make_file(path, 1 << 20)
    monkeypatch.setattr(storage, "module_available", lambda name: True)
    monkeypatch.setattr(storage, "which", lambda name, root="/": None)
    stderr = fixture("h200x2_cufile_handle_error.stderr")

    def answer(argv):
        if "verify.bench.cufile_read" in argv:
            return output(argv, stderr=stderr, returncode=4)
        return output(argv, stdout=fixture("h200x2_odirect_qd1.stdout"))

    results = {r.check_id: r for r in storage.run(None, None, scripted_node(answer), {"file": path, "tries": 1})}
    assert results["bench.storage.odirect"].status == Status.PASS
    cufile = results["bench.storage.cufile"]
    assert cufile.status == Status.ERROR and "HANDLE_NOT_REGISTERED" in cufile.reason


def test_cufile_refused_registration_is_a_skip_unless_the_profile_expects_gds(tmp_path, monkeypatch):
    path = str(tmp_path / "f.bin")
    make_file(path, 1 << 20)
    monkeypatch.setattr(storage, "module_available", lambda name: True)
    monkeypatch.setattr(storage, "which", lambda name, root="/": None)
    # Real stderr from the 1x H100 machine; the engine now exits CANNOT_RUN at handle_register.
    stderr = fixture("h100x1_cufile_handle_not_registered.stderr")
    node = scripted_node(lambda argv: output(argv, stderr=stderr, returncode=storage.CANNOT_RUN))
    options = {"file": path, "tries": 2, "engines": ("cufile",)}
    relaxed = storage.run(None, {"gds_expected": False}, node, options)[0]
    assert relaxed.status == Status.SKIP and "HANDLE_NOT_REGISTERED" in relaxed.reason
    assert len(node.runner.calls) == 1  # a node that cannot run cuFile is not retried
    strict = storage.run(None, {"gds_expected": True}, node, options)[0]
    assert strict.status == Status.FAIL and "expects GPUDirect Storage" in strict.reason
    assert strict.remediation == storage.GDS_REMEDIATION


def test_cufile_compat_mode_is_said_and_fails_where_gds_is_expected(tmp_path, monkeypatch):
    path = str(tmp_path / "f.bin")
    make_file(path, 1 << 20)
    monkeypatch.setattr(storage, "module_available", lambda name: True)
    monkeypatch.setattr(storage, "which", lambda name, root="/": None)
    # A real compatibility-mode run on the GPU machine (see tests/fixtures/bench/README.md).
    line = fixture("h200_cufile_compat.stdout")
    node = scripted_node(lambda argv: output(argv, stdout=line))
    relaxed = storage.run(None, {"gds_expected": False}, node, {"file": path, "tries": 1, "engines": ("cufile",)})
    assert relaxed[0].status == Status.PASS and "compatibility mode" in relaxed[0].reason
    assert "1.17 GB/s" in relaxed[0].reason
    strict = storage.run(None, {"gds_expected": True}, node, {"file": path, "tries": 1, "engines": ("cufile",)})
    assert strict[0].status == Status.FAIL and "not GPUDirect" in strict[0].reason


def test_cufile_mode_needs_nvidia_fs_counters_to_move():
    assert cufile_mode(None, None) == "compatibility"
    assert cufile_mode(10, 10) == "compatibility"
    assert cufile_mode(10, 42) == "gds"


def test_gdsio_lines_parse_and_convert_gib_to_gb():
    docs = parse_gdsio(fixture("gdsio_cpuonly_read_nvidia_docs.txt"))[0]
    assert (docs.io_type, docs.xfer_type, docs.threads, docs.io_size_kib) == ("READ", "CPUONLY", 4, 1024)
    assert docs.throughput_gbps == pytest.approx(3.22766 * 1.073741824)
    assert docs.avg_latency_us == pytest.approx(1209.149901) and docs.ops == 4089
    issue = parse_gdsio(fixture("gdsio_gpud_write_issue78.txt"))[0]
    assert issue.xfer_type == "GPUD" and issue.io_size_kib == 4


def test_gdscheck_from_cufile_log_on_the_gpu_machine_says_no_gds_path():
    check = parse_gdscheck(fixture("h200x2_cufile_trace_config.log"))
    assert check.gds_version == "1.15.1.6" and check.nvidia_fs_version is None
    assert check.drivers["NVMe"] == "Unsupported" and check.supported == []
    assert check.compat_allowed is True and check.gds_possible is False


def test_gdscheck_published_report_reads_versions():
    check = parse_gdscheck(fixture("gdscheck_h200_issue75_excerpt.txt"))
    assert check.gds_version == "1.14.0.30" and check.nvidia_fs_version == "2.27"
    assert check.drivers["NVMe P2PDMA"] == "Unsupported" and not check.gds_possible


def test_gdsio_same_file_both_paths_and_ratio_judged(tmp_path, monkeypatch):
    path = str(tmp_path / "f.bin")
    make_file(path, 1 << 20)
    monkeypatch.setattr(storage, "which", lambda name, root="/": "/usr/local/cuda/gds/tools/" + name)
    gpud = fixture("gdsio_cpuonly_read_nvidia_docs.txt").replace("CPUONLY", "GPUD")
    cpu = fixture("gdsio_cpuonly_read_nvidia_docs.txt").replace("3.227660", "2.000000")

    def answer(argv):
        if argv[-1] == "-p":
            return output(argv, stdout=fixture("gdscheck_h200_issue75_excerpt.txt"))
        if "verify.bench.odirect_read" in argv:
            return output(argv, stdout=fixture("h200x2_odirect_qd1.stdout"))
        return output(argv, stdout=gpud if argv[argv.index("-x") + 1] == "0" else cpu)

    node = scripted_node(answer)
    results = {r.check_id: r for r in storage.run(None, None, node, {"file": path, "tries": 1})}
    gdsio_calls = [c["argv"] for c in node.runner.calls if c["argv"][0].endswith("gdsio")]
    assert [c[c.index("-x") + 1] for c in gdsio_calls] == ["0", "2"]
    assert all(c[c.index("-f") + 1] == path for c in gdsio_calls)
    # gdscheck lists no supported driver path: GPUD numbers come from compatibility mode and say so.
    assert results["bench.storage.gdsio.gpud"].status == Status.WARN
    assert "compatibility mode" in results["bench.storage.gdsio.gpud"].reason
    assert "bench.storage.cufile" not in results


def test_scratch_file_is_not_written_where_it_would_fill_the_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "free_bytes", lambda directory: 2 << 30)
    node = scripted_node(lambda argv: output(argv))
    results = storage.run(None, None, node, {"dir": str(tmp_path), "size_bytes": 4 << 30})
    assert results[0].status == Status.ERROR and "2 GiB free" in results[0].reason
    assert node.runner.calls == []
    monkeypatch.undo()
    missing = storage.run(None, None, node, {"dir": str(tmp_path / "nowhere"), "size_bytes": 1 << 20})
    assert "unknown free" in missing[0].reason
