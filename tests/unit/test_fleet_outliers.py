"""Robust outlier maths and version drift across a fleet."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from verify.fleet.model import NodeReport
from verify.result import CheckResult, Status
from verify.stats.outliers import (
    find_outliers,
    median,
    metric_values,
    modified_z_scores,
    version_drift,
    versions_of,
)


def bench(host: str, busbw: float) -> NodeReport:
    result = CheckResult("bench.nccl_allreduce", "bench", Status.PASS, ">= 100", busbw, "ok",
                         details={"unit": "GB/s"})
    return NodeReport(host, [result, CheckResult("sysctl.net.core.somaxconn", "sysctl", Status.PASS, 4096, 4096)])


def test_a_slow_host_is_named_and_one_bad_host_does_not_move_the_yardstick():
    values = {f"n{i}": v for i, v in enumerate([344.1, 343.8, 345.0, 344.6, 343.9, 344.3, 230.0])}
    found = find_outliers("bench.nccl_allreduce", values, unit="GB/s")
    assert [o.host for o in found] == ["n6"]
    assert found[0].fleet_median == 344.1
    assert "67% of the fleet median 344.1 GB/s" in found[0].reason()


def test_a_fast_host_is_not_an_outlier_for_bandwidth_but_a_slow_one_is_for_latency():
    values = {"a": 10.0, "b": 10.1, "c": 9.9, "d": 10.0, "e": 30.0}
    assert find_outliers("bw", values, higher_is_better=True) == []
    assert [o.host for o in find_outliers("lat", values, higher_is_better=False)] == ["e"]


def test_noise_below_five_percent_is_never_flagged_even_when_mad_is_tiny():
    values = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 100.0, "e": 97.0}
    assert modified_z_scores(values)["e"] < -3.5
    assert find_outliers("bw", values) == []


def test_when_most_hosts_agree_exactly_the_odd_one_is_still_found():
    values = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 100.0, "e": 60.0}
    assert [o.host for o in find_outliers("bw", values)] == ["e"]


def test_fleets_too_small_or_uniform_have_no_outliers():
    assert find_outliers("bw", {"a": 1.0, "b": 100.0}) == []
    assert find_outliers("bw", {"a": 5.0, "b": 5.0, "c": 5.0}) == []


@given(st.lists(st.floats(min_value=0.001, max_value=1e6), min_size=1, max_size=50))
def test_median_lies_between_min_and_max(values):
    assert min(values) <= median(values) <= max(values)


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.floats(min_value=0, max_value=1e4), max_size=30))
def test_outliers_are_always_below_the_median_for_bandwidth(values):
    for o in find_outliers("bw", values):
        assert o.value < o.fleet_median


def test_only_benchmark_measurements_are_compared_across_the_fleet():
    table = metric_values([bench("a", 300.0), bench("b", 310.0)])
    assert list(table) == ["bench.nccl_allreduce"]
    assert table["bench.nccl_allreduce"][0] == {"a": 300.0, "b": 310.0}
    assert table["bench.nccl_allreduce"][2] == "GB/s"


def test_versions_off_the_majority_are_named_with_the_majority_value():
    def node(host, driver, nccl):
        facts = {"gpus": [{"driver_version": driver}, {"driver_version": driver}], "nccl": {"system": nccl},
                 "os": {"name": "Debian"}, "kernel": "6.18",
                 "nics": [{"driver": "mlx5_core" if host == "c" else "bnxt"}]}
        return NodeReport(host, [], versions=versions_of(facts))

    nodes = [node("a", "580.159.04", "2.28.3"), node("b", "580.159.04", "2.28.3"),
             node("c", "575.57.08", "2.28.3")]
    drift = version_drift(nodes)
    assert [(d.host, d.key, d.value, d.majority) for d in drift] == [
        ("c", "gpus[].driver_version", "575.57.08,575.57.08", "580.159.04,580.159.04")]
    assert "2 hosts have" in drift[0].reason()  # a NIC driver's name differing is not a version


def test_a_figure_s_readings_are_its_tries_or_its_engine_s_repeated_runs():
    """verify.bench.common.with_retries records each try's figure; an engine that repeats its read
    (odirect_read --repeat) each run's GB/s. One of either is one reading: no noise can be measured."""
    from verify.bench.storage import judge_floor
    from verify.judging import peaks
    from verify.stats.outliers import readings, relative_noise

    runs = [{"bytes": 1 << 30, "seconds": 4.0, "gbps": 0.268}, {"bytes": 1 << 30, "seconds": 4.2, "gbps": 0.255}]
    read = judge_floor("bench.storage.odirect", "O_DIRECT read:", 0.262, None, {"runs": runs},
                       peaks.unknown_storage_bound())
    assert readings(read) == [0.268, 0.255]
    assert round(relative_noise(readings(read)), 3) == round(0.013 / 0.2615, 3)
    read.details["tries"] = [{"try": 1, "observed": 0.2}, {"try": 2, "observed": 0.21}]
    assert readings(read) == [0.2, 0.21]  # whole re-measurements come first
    read.details = {"runs": runs[:1]}
    assert readings(read) == [] and relative_noise([]) is None
