"""benchmarks/verify_gpu_scaling.py (issue 39 item 4): the per-phase least-squares fit, the report's run
section read into phases, and the table, on numbers (no timing); without a GPU it says so and exits 3."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("verify_gpu_scaling", REPO / "benchmarks" / "verify_gpu_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scaling = load()


def test_an_exact_line_is_recovered_and_noise_is_averaged():
    assert scaling.fit_linear([(1, 5.0), (2, 7.0), (4, 11.0)]) == pytest.approx((3.0, 2.0))
    # two runs at each count, +-1 s around 10 + 3 x: the fit goes through the middle
    a, b = scaling.fit_linear([(1, 12.0), (1, 14.0), (2, 15.0), (2, 17.0), (4, 21.0), (4, 23.0)])
    assert (a, b) == pytest.approx((10.0, 3.0))


def test_one_count_has_no_slope_and_no_points_is_refused():
    assert scaling.fit_linear([(2, 4.0), (2, 6.0)]) == (5.0, None)
    with pytest.raises(ValueError, match="no points"):
        scaling.fit_linear([])


def test_the_run_section_gives_every_phase_that_is_a_number():
    run = {"phases": {"process_start": 0.4, "engine": {"start": 2.5, "hbm": 1.0}, "note": "x", "flag": True},
           "duration_s": 20.1, "config_checks_s": 1.2, "bench": {"wall_s": 17.0, "ran": []}, "started_at": "t"}
    assert scaling.phase_seconds(run) == {"process_start": 0.4, "engine/start": 2.5, "engine/hbm": 1.0,
                                          "duration_s": 20.1, "config_checks_s": 1.2, "bench.wall_s": 17.0}
    assert scaling.phase_seconds({"duration_s": 3, "bench": {"wall_s": None}}) == {"duration_s": 3.0}


def test_the_table_projects_each_phase_to_eight_gpus_whole_command_first():
    measured = {1: [{scaling.WHOLE: 14.0, "pair copies": 0.0, "engine/start": 3.0}],
                2: [{scaling.WHOLE: 16.0, "pair copies": 2.0, "engine/start": 3.0}],
                4: [{scaling.WHOLE: 20.0, "pair copies": 6.0, "engine/start": 3.0},
                    {scaling.WHOLE: 22.0, "pair copies": 6.0, "engine/start": 3.0}]}
    rows = scaling.scaling_rows(measured, 8)
    assert [row[0] for row in rows] == [scaling.WHOLE, "pair copies", "engine/start"]
    whole, pairs, start = rows
    assert whole[1] == {1: 14.0, 2: 16.0, 4: 21.0} and whole[4] == pytest.approx(whole[2] + whole[3] * 8)
    assert (pairs[2], pairs[3], pairs[4]) == pytest.approx((-2.0, 2.0, 14.0))  # 2 s a GPU added
    assert start[3] == pytest.approx(0.0) and start[4] == pytest.approx(3.0)
    lines = scaling.format_table(rows, [1, 2, 4], 8)
    assert lines[0].split() == ["phase", "1", "GPU", "2", "GPU", "4", "GPU", "a", "s", "b", "s/GPU", "@8", "GPUs"]
    assert lines[3].split() == ["engine/start", "3.00", "3.00", "3.00", "3.00", "0.000", "3.00"]


def test_a_phase_measured_at_one_count_only_says_no_projection():
    rows = scaling.scaling_rows({1: [{"x": 2.0}], 2: [{"x": 3.0, "only_here": 5.0}]}, 8)
    only = next(row for row in rows if row[0] == "only_here")
    assert only[1] == {2: 5.0} and only[3] is None and only[4] is None
    line = next(line for line in scaling.format_table(rows, [1, 2], 8) if line.startswith("only_here"))
    assert line.split() == ["only_here", "-", "5.00", "5.00", "-", "-"]


def test_counts_default_to_one_two_and_all_and_a_bad_count_is_named():
    assert scaling.parse_counts(None, 4) == [1, 2, 4] and scaling.parse_counts(None, 1) == [1]
    assert scaling.parse_counts("4,1,2,2", 8) == [1, 2, 4]
    with pytest.raises(ValueError, match="'9' is not a GPU count from 1 to 8"):
        scaling.parse_counts("1,9", 8)


def test_without_a_gpu_it_says_so_and_exits_3(monkeypatch, capsys):
    monkeypatch.setattr(scaling, "GPU_LIST_ARGV", ["/nonexistent/nvidia-smi", "--query-gpu=index"])
    assert scaling.main([]) == scaling.NO_GPU
    assert capsys.readouterr().err == "verify_gpu_scaling needs a GPU: nvidia-smi is not installed\n"
