"""NCCL all-reduce: parsers on the 2x H200 captures, the judge, engine choice, retries, timeouts."""

from __future__ import annotations

import pytest
from bench_helpers import NODE_FIXTURES, fixture, output, scripted_node

from verify.bench import nccl
from verify.bench.common import module_available
from verify.bench.nccl_parse import NcclTransport, parse_nccl_debug, parse_nccl_tests
from verify.bench.torch_allreduce import bus_factor, sweep
from verify.facts.links import parse_nvlink_status
from verify.judging.thresholds import Threshold
from verify.profiles import load_profile
from verify.result import Status

SYSTEM = "h200x2_all_reduce_perf_system_nccl.stdout"
TORCH_NCCL = "h200x2_all_reduce_perf_torch_nccl.stdout"
TORCH_ENGINE = "h200x2_torch_allreduce.stdout"


def test_nccl_tests_curve_ranks_and_footer_from_real_run():
    run = parse_nccl_tests(fixture(SYSTEM))
    assert [p.size_bytes for p in run.points] == [8 << 20 << i for i in range(10)]
    largest = run.points[-1]
    assert largest.busbw_gbps == pytest.approx(341.88)
    assert largest.inplace_busbw_gbps == pytest.approx(343.41)
    assert all(p.wrong == 0 and p.inplace_wrong == 0 for p in run.points)
    assert run.rank_count == 2 and run.ranks[1][4] == "NVIDIA H200"
    assert run.out_of_bounds == 0 and run.out_of_bounds_ok is True
    # The footer averages every size: far below what the largest size reached.
    assert run.footers == 1 and run.avg_busbw_gbps == pytest.approx(276.436)
    assert run.version == "2.19.6"


def test_transport_read_from_nccl_info_lines():
    system = parse_nccl_debug(fixture(SYSTEM))
    assert system.kinds == ["P2P"] and system.paths == {"P2P/direct pointer": 48}
    assert system.nvls is False and system.nccl_version == "2.28.3"
    # "Using network Socket" is the plugin for inter-node traffic; no channel used it.
    assert system.networks == ["Socket"] and not system.socket_fallback
    torch_engine = parse_nccl_debug(fixture(TORCH_ENGINE))
    assert torch_engine.paths == {"P2P/CUMEM": 48} and torch_engine.nccl_version == "2.28.9"


def test_nvlink_status_sums_links_per_gpu():
    links = parse_nvlink_status((NODE_FIXTURES / "nvidia-smi-nvlink-status.txt").read_text())
    assert sorted(links) == [0, 1]
    assert len(links[0]) == 18 and sum(links[0]) == pytest.approx(478.116)


def _measure(stdout: str, engine: str = "nccl-tests", **kw):
    node = scripted_node(lambda argv: output(argv, stdout=stdout, **kw))
    opts = nccl.NcclOptions(tries=1)
    return nccl.measure(node, engine, "/opt/nccl-tests/all_reduce_perf", opts, 2), node


def test_judge_passes_on_largest_size_against_the_h200_x2_profile():
    (measurement, error, _raw), _node = _measure(fixture(TORCH_NCCL))
    assert error is None
    profile = load_profile("h200-x2-nvlink")
    threshold = nccl.resolve_threshold("nccl_allreduce_busbw_gbps", profile, None)
    verdict = nccl.judge(measurement, 2, threshold, nccl.NcclOptions(), profile["nvls_expected"])
    assert verdict.status == Status.PASS
    assert verdict.observed == pytest.approx(344.15)
    assert verdict.details["judged_size_bytes"] == 4 << 30
    assert len(verdict.details["curve"]) == 10


def test_judge_fails_when_fewer_ranks_than_gpus_expected():
    (measurement, _e, _r), _n = _measure(fixture(SYSTEM))
    verdict = nccl.judge(measurement, 8, Threshold(300.0), nccl.NcclOptions(), False)
    assert verdict.status == Status.FAIL and "2 ranks, expected 8" in verdict.reason


def test_judge_fails_below_floor_and_warns_in_band():
    (measurement, _e, _r), _n = _measure(fixture(SYSTEM))
    assert nccl.judge(measurement, 2, Threshold(350.0), nccl.NcclOptions(), False).status == Status.FAIL
    warned = nccl.judge(measurement, 2, Threshold(300.0, warn=345.0), nccl.NcclOptions(), False)
    assert warned.status == Status.WARN


def test_socket_channels_are_a_fail_naming_the_fallback():
    (measurement, _e, _r), _n = _measure(fixture(SYSTEM))
    measurement.transport = NcclTransport(paths={"NET/Socket/0": 24})
    verdict = nccl.judge(measurement, 2, Threshold(1.0), nccl.NcclOptions(), False)
    assert verdict.status == Status.FAIL and "TCP sockets" in verdict.reason
    allowed = nccl.judge(measurement, 2, Threshold(1.0), nccl.NcclOptions(allow_socket=True), False)
    assert allowed.status == Status.PASS


def test_nvls_expected_but_off_is_said_in_the_reason():
    (measurement, _e, _r), _n = _measure(fixture(SYSTEM))
    verdict = nccl.judge(measurement, 2, Threshold(300.0), nccl.NcclOptions(), True)
    assert "NVLS was off" in verdict.reason


def test_truncated_output_is_an_error_not_a_verdict():
    text = fixture(SYSTEM)
    cut = text[: text.index("# Out of bounds")]
    (measurement, error, raw), _n = _measure(cut, returncode=139)
    assert measurement is None and "before its summary" in error
    assert "4294967296" in raw["stdout_tail"]


def test_two_footers_mean_independent_runs():
    text = fixture(SYSTEM)
    (measurement, error, _raw), _n = _measure(text + text)
    assert error is None and "2 separate nccl-tests runs" in measurement.problems[0]


def test_hung_run_is_error_with_partial_output_kept():
    text = fixture(SYSTEM)
    partial = text[: text.index("  1073741824")]
    node = scripted_node(lambda argv: output(argv, stdout=partial, timed_out=True))
    results = nccl.run(
        None,
        None,
        node,
        {"engine": "nccl-tests", "binary": "/x/all_reduce_perf", "gpus": 2, "tries": 1, "timeout_s": 5},
    )
    assert results[0].status == Status.ERROR and "hung" in results[0].reason
    assert "536870912" in results[0].details["partial_output"]["stdout_tail"]


def test_nccl_tests_argv_uses_one_process_for_all_gpus_and_debug_env():
    node = scripted_node(lambda argv: output(argv, stdout=fixture(SYSTEM)))
    nccl.run(
        None,
        None,
        node,
        {"engine": "nccl-tests", "binary": "/x/all_reduce_perf", "gpus": 2, "tries": 1, "max_bytes": 4 << 30},
    )
    call = node.runner.calls[-1]
    assert call["argv"][:3] == ["/x/all_reduce_perf", "-b", str(8 << 20)]
    assert call["argv"][call["argv"].index("-g") + 1] == "2"
    assert call["argv"][call["argv"].index("-e") + 1] == str(4 << 30)
    assert call["env"]["NCCL_DEBUG"] == "INFO"


def test_retry_passes_on_second_try_and_records_both():
    answers = iter([fixture(SYSTEM).replace("341.88", "141.88"), fixture(SYSTEM)])
    node = scripted_node(lambda argv: output(argv, stdout=next(answers)))
    spec = {"verify": {"thresholds": {"nccl_allreduce_busbw_gbps": 300}}}
    results = nccl.run(spec, None, node, {"engine": "nccl-tests", "binary": "/x/a", "gpus": 2, "tries": 3})
    assert results[0].status == Status.PASS
    tries = results[0].details["tries"]
    assert [t["status"] for t in tries] == ["FAIL", "PASS"] and len(node.runner.calls) == 2


def test_no_engine_at_all_is_a_skip_with_the_reason(monkeypatch):
    monkeypatch.setattr(nccl, "which", lambda name, root="/": None)
    monkeypatch.setattr(nccl, "module_available", lambda name: False)
    results = nccl.run(None, None, scripted_node(lambda argv: output(argv)), {})
    assert results[0].status == Status.SKIP
    assert "neither nccl-tests" in results[0].reason and "PyTorch" in results[0].reason


def test_derived_floor_from_nvlink_when_no_profile():
    status = (NODE_FIXTURES / "nvidia-smi-nvlink-status.txt").read_text()
    per_gpu = min(sum(speeds) for speeds in parse_nvlink_status(status).values())
    threshold = nccl.derive_threshold(per_gpu, 2)
    assert threshold.limit == pytest.approx(0.6 * 478.116, abs=0.1)
    assert nccl.derive_threshold(per_gpu, 1) is None and nccl.derive_threshold(None, 2) is None


def test_busbw_factor_and_sweep_match_nccl_tests():
    assert bus_factor(2) == 1.0 and bus_factor(8) == pytest.approx(1.75)
    sizes = sweep(8 << 20, 4 << 30)
    assert sizes[0] == 8 << 20 and sizes[-1] == 4 << 30 and len(sizes) == 10
    assert sweep(1 << 20, 3 << 20)[-1] == 3 << 20


needs_torch = pytest.mark.skipif(not module_available("torch"), reason="torch is not installed")


@pytest.mark.slow
@needs_torch
def test_torch_engine_on_gloo_runs_the_same_code_path_for_real():
    from verify.node import Node

    results = nccl.run(
        None,
        None,
        Node(),
        {
            "backend": "gloo",
            "gpus": 2,
            "min_bytes": 1 << 20,
            "max_bytes": 4 << 20,
            "iters": 2,
            "warmup": 1,
            "tries": 1,
            "timeout_s": 120,
        },
    )
    verdict = results[0]
    assert verdict.status == Status.PASS, verdict.reason
    assert verdict.details["engine"] == "torch" and verdict.details["ranks"] == 2
    curve = verdict.details["curve"]
    assert [p["size_bytes"] for p in curve] == [1 << 20, 2 << 20, 4 << 20]
    assert all(p["wrong"] == 0 and p["busbw_gbps"] > 0 for p in curve)
    # n=2: busbw equals algbw
    assert all(p["busbw_gbps"] == pytest.approx(p["algbw_gbps"]) for p in curve)


@pytest.mark.slow
@needs_torch
def test_torch_engine_killed_at_timeout_is_error():
    from verify.node import Node

    results = nccl.run(
        None,
        None,
        Node(),
        {
            "backend": "gloo",
            "gpus": 2,
            "min_bytes": 1 << 20,
            "max_bytes": 64 << 20,
            "iters": 50,
            "tries": 1,
            "timeout_s": 1,
        },
    )
    assert results[0].status == Status.ERROR and "hung" in results[0].reason


def test_node_with_fewer_gpus_than_its_profile_runs_and_fails_on_rank_count(tmp_path):
    for index in (0, 1):
        (tmp_path / "dev").mkdir(exist_ok=True)
        (tmp_path / "dev" / f"nvidia{index}").write_text("")
    (tmp_path / "dev" / "nvidiactl").write_text("")
    assert nccl.count_gpus(str(tmp_path)) == 2
    node = scripted_node(lambda argv: output(argv, stdout=fixture(SYSTEM)), root=str(tmp_path))
    results = nccl.run(None, load_profile("h200-sxm-8x"), node, {"engine": "nccl-tests", "binary": "/x/a", "tries": 1})
    assert node.runner.calls[0]["argv"][node.runner.calls[0]["argv"].index("-g") + 1] == "2"
    assert results[0].status == Status.FAIL and "expected 8 GPUs" in results[0].reason


# The 1x H100 machine once printed PASS, busbw 49592.7 GB/s for a 1-rank all-reduce (a local copy).
H100_ONE_RANK = nccl.Measurement(
    "torch", [nccl.CurvePoint(4 << 30, 1 << 30, "float", "sum", 86.6, 49592.7, 49592.7, 0)], 1,
    NcclTransport(), [], {},
)


def test_one_gpu_node_skips_the_all_reduce_with_needs_2_ranks(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    node = scripted_node(lambda argv: output(argv), root=str(tmp_path))
    results = nccl.run(None, None, node, {"engine": "nccl-tests", "binary": "/x/a"})
    assert results[0].status == Status.SKIP and results[0].reason == "needs 2 ranks, this node has 1 GPU"
    forced = nccl.run(None, None, node, {"engine": "nccl-tests", "binary": "/x/a", "gpus": 1})
    assert forced[0].status == Status.SKIP and node.runner.calls == []


def test_the_impossible_one_rank_figure_is_never_a_pass():
    for threshold in (None, Threshold(300.0)):
        verdict = nccl.judge(H100_ONE_RANK, 1, threshold, nccl.NcclOptions(), False)
        assert verdict.status == Status.ERROR and "needs 2 ranks" in verdict.reason


def test_busbw_above_the_links_peak_is_an_error_with_the_peak_named():
    from verify.judging.peaks import Peak, allreduce_peak

    (measurement, _e, _r), _n = _measure(fixture(SYSTEM))
    gen5 = Peak(63.015, "PCIe Gen5 x16")
    peak = allreduce_peak(478.116, gen5, nvls=False)
    assert nccl.judge(measurement, 2, Threshold(300.0), nccl.NcclOptions(), False, peak).status == Status.PASS
    measurement.points[-1].busbw_gbps = 5000.0
    for threshold in (Threshold(300.0), None):
        verdict = nccl.judge(measurement, 2, threshold, nccl.NcclOptions(), False, peak)
        assert verdict.status == Status.ERROR and "above the physical peak 541.1" in verdict.reason
        assert "NVLink 478.1 GB/s per GPU" in verdict.reason
