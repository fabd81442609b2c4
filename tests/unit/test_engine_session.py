"""One engine per run (issue 39) and verdicts on a real multi-GPU node (issue 40), through the real Node.

The engine's output is the marked line ONE `verify.bench.gpu_engine` process printed on a 4x H200 node
(tests/fixtures/bench/README.md), the GPUs' processes and links the same node's `nvidia-smi` captures; a
runner replays them, so the planning (sections, busy GPUs, pair schedule), the argv, and every family's
judging of its section run as on the node.
"""
from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

import pytest
from bench_helpers import fixture, output, scripted_node

from verify import bench
from verify.bench import causes, engine_session, gpu_engine, hostcopy, nccl
from verify.bench.common import result
from verify.engine import RESULT_MARKER, read_result
from verify.facts import gpu_processes
from verify.facts.gpu_query import Gpu, GpuInventory
from verify.facts.hardware import MEMO_KEY, GpuLinks, Hardware
from verify.judging import peaks, verdicts
from verify.node import Node
from verify.result import Status

NODE = Path(__file__).resolve().parent.parent / "fixtures" / "node"
BUSY_CSV = (NODE / "gpu_processes" / "h200x4-busy-job.csv").read_text()
IDLE_CSV = (NODE / "gpu_processes" / "h200x4-idle.csv").read_text()
TOPO_M = (NODE / "peer_access" / "h200x4-topo-m.stdout").read_text()
BUSES = ["00000000:00:06.0", "00000000:00:07.0", "00000000:00:08.0", "00000000:00:09.0"]


def engine_payload() -> dict:
    return read_result(fixture("gpu_engine_sections_h200x4.stdout"))


def only_gpus(csv: str, buses: list) -> str:
    """The captured busy-job listing cut to some GPUs' lines (each line as nvidia-smi printed it)."""
    header, *rows = csv.splitlines()
    return "\n".join([header, *[r for r in rows if r.split(",")[0] in buses]]) + "\n"


def h200x4_node(apps: str = IDLE_CSV, payload=None):
    """The real Node of the 4x H200: its inventory, links, processes and topology as captured; the engine's
    argv answers `payload` (the captured engine line by default)."""
    payload = engine_payload() if payload is None else payload

    def reply(argv):
        if "verify.bench.gpu_engine" in argv:
            return output(argv, stdout="gpu0: ...\n" + RESULT_MARKER + json.dumps(payload) + "\n")
        if argv[:2] == ["nvidia-smi", "--query-compute-apps=gpu_bus_id,pid,process_name,used_memory"]:
            return output(argv, stdout=apps)
        if argv == ["nvidia-smi", "topo", "-m"]:
            return output(argv, stdout=TOPO_M)
        return output(argv, missing=True)

    node = scripted_node(reply)
    node.memo["gpus"] = GpuInventory("nvml", [Gpu(i, bus, "NVIDIA H200", True, 143771) for i, bus in enumerate(BUSES)])
    node.memo[MEMO_KEY] = Hardware(gpus=[GpuLinks(i, "NVIDIA H200", bus, 18, 478.116, pcie_gen_max=5, pcie_width_max=16)
                                         for i, bus in enumerate(BUSES)])
    return node


@pytest.fixture(autouse=True)
def torch_present(monkeypatch):
    for module in (engine_session, nccl, hostcopy, bench.gpu):
        monkeypatch.setattr(module, "module_available", lambda name: True)
    monkeypatch.setattr(nccl, "which", lambda name, root="/": None)  # no nccl-tests: the torch engine


def engine_calls(node) -> list:
    return [c for c in node.runner.calls if "verify.bench.gpu_engine" in c["argv"]]


def run_families(node, families=("gpu", "nccl", "hostcopy")):
    record: dict = {}
    rows = bench.run_benchmarks({"verify": {"benchmarks": list(families)}}, None, node, list(families), record=record)
    return {r.check_id: r for r in rows}, record


# ---- the processes on each GPU ----------------------------------------------------------------------

def test_the_captured_busy_job_holds_every_gpu_and_the_idle_listing_none():
    busy = gpu_processes.parse_compute_apps(BUSY_CSV)
    assert sorted(busy) == BUSES
    assert {(p.pid, p.name, p.used_mib) for procs in busy.values() for p in procs} == {(4983, "python3", 129050)}
    assert gpu_processes.parse_compute_apps(IDLE_CSV) == {}


@pytest.mark.parametrize("text", ["index, name\n0, x\n", "gpu_bus_id, pid\n00000000:00:06.0, " + "9" * 40 + "\n",
                                  "gpu_bus_id, pid, process_name\n00000000:00:06.0, 1\n"])
def test_a_listing_that_is_not_one_is_a_parse_error_and_the_reader_says_so(text):
    with pytest.raises(gpu_processes.AppsParseError):
        gpu_processes.parse_compute_apps(text)
    node = scripted_node(lambda argv: output(argv, stdout=text))
    found = gpu_processes.read_gpu_processes(node)
    assert found.by_bus == {} and "--query-compute-apps" in found.unknown_reason


# ---- one engine for the run ----------------------------------------------------------------------------

def test_one_engine_process_measures_every_gpu_family_and_each_family_judges_its_section():
    node = h200x4_node()
    rows, record = run_families(node)
    assert len(engine_calls(node)) == 1  # not one per family
    argv = engine_calls(node)[0]["argv"]
    assert argv[argv.index("--sections") + 1] == "gpu,pairs,peer,hostcopy,allreduce"
    assert argv[argv.index("--pair-schedule") + 1] == "concurrent"
    assert rows["bench.gpu_hbm.gpu3"].status is Status.PASS
    assert "GPU 3 (00000000:00:09.0)" in rows["bench.gpu_hbm.gpu3"].reason
    identity = rows["bench.h2d.gpu2"].details["gpu_identity"]
    assert identity["bus_id"] == "00000000:00:08.0" and identity["serial"]
    allreduce = rows["bench.nccl_allreduce"]
    assert allreduce.status is Status.PASS and "(GPUs 0, 1, 2, 3)" in allreduce.reason
    assert record["engine"]["phases"]["allreduce_s"] > 0 and record["engine"]["pair_schedule"]["mode"] == "concurrent"


def test_the_all_reduce_shows_the_peak_its_algorithm_can_reach_beside_the_garbage_bound():
    rows, _ = run_families(h200x4_node())
    details = rows["bench.nccl_allreduce"].details
    reachable, physical = details["reachable_peak"]["gbps"], details["physical_peak"]["gbps"]
    assert reachable == pytest.approx(478.116) and physical > 2 * reachable  # 1082: links summed, x2 for NVLS
    assert 0.7 < rows["bench.nccl_allreduce"].observed / reachable < 0.8  # 356.6 of 478: a healthy ring
    assert peaks.allreduce_reachable(478.116, None, nvls_ran=True).gbps == pytest.approx(956.232)


def test_a_gpu_another_job_holds_is_hidden_from_the_engine_and_named_with_its_process_never_a_fail():
    payload = engine_payload()
    node = h200x4_node(only_gpus(BUSY_CSV, [BUSES[3]]), payload)
    rows, record = run_families(node)
    argv = engine_calls(node)[0]["argv"]
    assert argv[argv.index("--exclude-bus-ids") + 1] == BUSES[3]
    for check_id in ("bench.gpu_hbm.gpu3", "bench.gpu_matmul.gpu3", "bench.h2d.gpu3", "bench.d2h.gpu3"):
        row = rows[check_id]
        assert row.status is Status.ERROR and row.details["action"] == verdicts.APPLICATION
        assert "GPU 3 (00000000:00:09.0) in use by pid 4983 (python3, 129050 MiB)" in row.reason
    assert not [r for r in rows.values() if r.status is Status.FAIL]
    assert record["engine"]["busy"] == ["GPU 3 (00000000:00:09.0) in use by pid 4983 (python3, 129050 MiB)"]


def test_with_every_gpu_busy_no_engine_starts_and_nothing_is_blamed_on_the_hardware():
    node = h200x4_node(BUSY_CSV)
    rows, _ = run_families(node)
    assert engine_calls(node) == []
    assert rows["bench.nccl_allreduce"].status is Status.ERROR
    assert rows["bench.nccl_allreduce"].details["action"] == verdicts.APPLICATION
    assert {r.status for k, r in rows.items() if k.startswith(("bench.gpu", "bench.h2d", "bench.hostcopy"))} == {
        Status.ERROR}
    assert all(r.details.get("action") == verdicts.APPLICATION for k, r in rows.items() if r.status is Status.ERROR)


def test_the_all_reduce_runs_on_the_gpus_the_process_sees():
    payload = engine_payload()
    payload["measured"], payload["visible"] = [2, 3], "2,3"
    payload["allreduce"]["world_size"] = 2
    rows, _ = run_families(h200x4_node(payload=payload), ("nccl",))
    assert rows["bench.nccl_allreduce"].status is Status.PASS and "(GPUs 2, 3)" in rows["bench.nccl_allreduce"].reason
    payload["measured"] = [3]
    rows, _ = run_families(h200x4_node(payload=payload), ("nccl",))
    assert rows["bench.nccl_allreduce"].status is Status.SKIP and "1 GPU visible" in rows["bench.nccl_allreduce"].reason


def test_an_engine_that_dies_out_of_memory_names_the_processes_holding_the_gpus():
    def reply(argv):
        if "verify.bench.gpu_engine" in argv:
            return output(argv, stderr="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                          returncode=1)
        if "--query-compute-apps=gpu_bus_id,pid,process_name,used_memory" in argv:
            return output(argv, stdout=only_gpus(BUSY_CSV, BUSES[:1]))
        return output(argv, missing=True)

    node = h200x4_node()
    node.runner.answer = reply
    rows, _ = run_families(node, ("gpu",))
    assert rows["bench.gpu"].status is Status.ERROR
    assert "out of GPU memory" in rows["bench.gpu"].reason and "pid 4983 (python3" in rows["bench.gpu"].reason


# ---- which pairs run side by side ---------------------------------------------------------------

def test_disjoint_pairs_run_side_by_side_only_where_each_gpus_links_all_reach_every_other():
    node = h200x4_node()
    assert engine_session.pair_schedule(node, 4)[0] == "concurrent"
    assert engine_session.pair_schedule(node, 2) == ("serial", "2 GPU(s): no two disjoint pairs to copy side by side")
    direct = TOPO_M.replace("NV18", "NV6")  # the same board with 6 links per pair: direct NVLink, not a switch
    node.runner.answer = lambda argv: output(argv, stdout=direct)
    mode, why = engine_session.pair_schedule(node, 4)
    assert mode == "serial" and "direct NVLink" in why


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8])
def test_the_round_robin_covers_every_pair_once_in_rounds_of_disjoint_pairs(count):
    rounds = gpu_engine.round_robin(list(range(count)))
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(count), 2))
    assert all(len({g for p in r for g in p}) == 2 * len(r) for r in rounds)  # no GPU twice in a round
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)


def test_the_engine_names_every_gpu_by_nvml_index_whatever_cuda_numbered_it():
    payload = {"per_gpu": [{"index": 0}, {"index": 1}], "pairs": [{"src": 0, "dst": 1}],
               "peer": {"pairs": [{"src": 1, "dst": 0, "can_access": True}]},
               "hostcopy": {"gpus": [{"index": 1}]}, "per_gpu_errors": {"0": "x"}, "pair_errors": {"0-1": "y"},
               "pair_schedule": {"rounds": [[(0, 1)]]}, "allreduce": {"cuda_ordinals": [0, 1]}}
    gpu_engine.renumbered(payload, {0: 3, 1: 2})  # CUDA_VISIBLE_DEVICES=3,2
    assert [r["index"] for r in payload["per_gpu"]] == [3, 2]
    assert (payload["pairs"][0]["src"], payload["pairs"][0]["dst"]) == (3, 2)
    assert payload["peer"]["pairs"][0]["src"] == 2 and payload["hostcopy"]["gpus"][0] == {"index": 2, "cuda_ordinal": 1}
    assert payload["per_gpu_errors"] == {"3": "x"} and payload["pair_errors"] == {"3-2": "y"}
    assert payload["pair_schedule"]["rounds"] == [[[3, 2]]] and payload["allreduce"]["gpus"] == [3, 2]


# ---- every slow figure says why --------------------------------------------------------------------------

def slow_allreduce(kinds: list) -> object:
    return result("bench.nccl_allreduce", Status.FAIL, "busbw 24.9 GB/s at 1 GiB: below the floor 286.9",
                  details={"gpus": [0, 1, 2, 3], "transport": {"kinds": kinds}})


def test_a_p2p_disabling_nccl_conf_line_is_named_as_the_cause_with_its_line(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nccl.conf").write_text("NCCL_NVLS_ENABLE=0\nTORCH_SYMM_MEM_DISABLE_MULTICAST=1\n"
                                                "NVSHMEM_DISABLE_NVLS=1\nNCCL_P2P_DISABLE=1\n")
    row = slow_allreduce(["SHM"])
    causes.explain([row], Node(root=str(tmp_path)), environment={"HOME": "/root"})
    assert "because NCCL_P2P_DISABLE=1 (/etc/nccl.conf line 4)" in row.reason
    assert row.status is Status.FAIL and row.details["action"] == verdicts.FIX_CONFIG
    assert row.details["cause"]["evidence"].endswith("NCCL used SHM")


def test_the_healthy_twin_blames_no_setting_and_takes_the_default_action(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nccl.conf").write_text("NCCL_NVLS_ENABLE=0\nNCCL_P2P_DISABLE=1\n")
    row = slow_allreduce(["P2P"])  # P2P was used: the line did not take it away (an environment overrode it)
    causes.explain([row], Node(root=str(tmp_path)), environment={"HOME": "/root", "NCCL_P2P_DISABLE": "0"})
    assert "because" not in row.reason and row.details["action"] == verdicts.REBOOT


def test_the_environment_wins_over_the_files_and_the_users_file_over_the_systems(tmp_path):
    from verify.facts import nccl_settings

    (tmp_path / "etc").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "etc" / "nccl.conf").write_text("NCCL_P2P_DISABLE=1\nNCCL_ALGO=Tree\n")
    (tmp_path / "home" / ".nccl.conf").write_text("NCCL_ALGO=Ring\n")
    found = nccl_settings.effective(Node(root=str(tmp_path)), {"NCCL_P2P_DISABLE": "0"}, home="/home")
    assert found["NCCL_P2P_DISABLE"].describe() == "NCCL_P2P_DISABLE=0 (the environment)"
    assert found["NCCL_ALGO"].describe() == "NCCL_ALGO=Ring (/home/.nccl.conf line 1)"


def test_a_hardware_slowdown_during_the_figure_is_its_cause():
    row = result("bench.gpu_matmul.gpu1", Status.FAIL, "GPU 1 BF16 matmul 500 TFLOPS",
                 details={"nvml": {"1": {"reasons": ["hw_thermal_slowdown"], "samples": 3}}})
    node = h200x4_node()
    causes.explain([row], node)
    assert row.details["action"] == verdicts.DRAIN_RMA and "hw_thermal_slowdown was active" in row.reason
    assert "cooling" in row.remediation


def test_a_process_that_appeared_on_the_gpu_makes_a_slow_figure_an_application_error():
    row = result("bench.gpu_hbm.gpu2", Status.FAIL, "GPU 2 HBM copy 2000 GB/s", details={})
    causes.explain([row], h200x4_node(only_gpus(BUSY_CSV, [BUSES[2]])))
    assert row.status is Status.ERROR and row.details["action"] == verdicts.APPLICATION
    assert "GPU 2: pid 4983 (python3, 129050 MiB)" in row.reason


def test_a_family_summary_carries_the_worst_action_of_its_rows():
    rows = [result("bench.gpu", Status.ERROR, "GPU engines: 3 GPU(s)"),
            engine_session.busy_row("bench.gpu_hbm.gpu3", engine_session.BusyGpu(
                3, BUSES[3], gpu_processes.parse_compute_apps(BUSY_CSV)[BUSES[3]]))]
    causes.explain(rows, h200x4_node())
    assert rows[0].details["action"] == verdicts.APPLICATION


# ---- bounds that are numbers ---------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["bus_width_bits", "max_mem_mhz", "max_sm_mhz"])
def test_nan_hardware_facts_make_no_bound_and_an_impossible_figure_is_still_an_error(field):
    payload = engine_payload()
    for gpu in payload["gpus"]:
        gpu["nvml"][field] = float("nan")
    for row in payload["per_gpu"]:
        row["hbm"]["gbps"], row["matmul"]["tflops"] = 1e8, 1e8
    rows, _ = run_families(h200x4_node(payload=copy.deepcopy(payload)), ("gpu",))
    for index in range(4):
        for kind in ("hbm", "matmul"):
            assert rows[f"bench.gpu_{kind}.gpu{index}"].status is Status.ERROR


@pytest.mark.parametrize("payload", [None, [], {"gpus": 5}, {"per_gpu": [{"index": [1]}]},
                                     {"per_gpu_errors": ["x"], "pair_errors": 3},
                                     {"pairs": [{"src": "a", "dst": None, "gbps": "x"}]},
                                     {"gpus": [{"index": 0, "nvml": {"bus_width_bits": "wide"}}],
                                      "per_gpu": [{"index": 0, "hbm": {"gbps": float("inf")}}]}])
def test_figures_take_any_payload_without_raising(payload):
    from verify.bench import gpu_judge

    found, errors = gpu_judge.figures(payload, {0: "x"}, None)
    for item in found:
        assert gpu_judge.judge(item, found, None).status is not Status.PASS


@pytest.mark.parametrize("gpu", [None, {}, {"index": [0], "h2d_gbps": "fast"},
                                 {"index": 0, "pcie": {"gen_max": [5], "width_max": "16"}, "h2d_gbps": 1e12},
                                 {"index": 0, "pcie": {"gen_max": 99, "width_max": -1}, "h2d_gbps": float("nan")}])
def test_a_copy_row_of_any_shape_is_judged_never_raised_and_never_passes_garbage(gpu):
    for direction in ("h2d", "d2h"):
        verdict = hostcopy.judge_copy(direction, gpu, None, hostcopy.DERIVED_RATIO)
        assert verdict.status is not Status.PASS


def test_the_report_shows_the_all_reduce_against_its_reachable_peak_not_the_garbage_bound():
    from verify.report import bench_table

    rows, _ = run_families(h200x4_node(), ("nccl",))
    shown = bench_table.row_of(rows["bench.nccl_allreduce"])
    assert shown.peak == pytest.approx(478.116) and 74 < shown.percent_of_peak < 76  # 356.6 of 478.1


def test_health_p2p_after_the_benchmarks_is_cudas_own_answer_from_the_same_engine():
    from verify import local_run
    from verify.checks import health_p2p

    node = h200x4_node()
    run_families(node, ("gpu",))
    earlier = result("health.p2p", Status.PASS, "all 4 GPUs (NVML)")
    rows = local_run.peer_access_from_engine([earlier], {}, node)
    judged = next(r for r in rows if r.check_id == health_p2p.CHECK_ID)
    assert judged is not earlier and judged.status is Status.PASS
    assert judged.details["answered_by"].startswith("CUDA")
    assert judged.details["config_phase"]["reason"] == earlier.reason
    session = engine_session.last_session(node)
    session.payload["peer"]["pairs"][0]["can_access"] = False  # GPU 0 -> 1 refused over NV18
    node.runner.answer = lambda argv: output(argv, stdout=TOPO_M) if argv == ["nvidia-smi", "topo", "-m"] else \
        output(argv, missing=True)
    refused = next(r for r in local_run.peer_access_from_engine([earlier], {}, node) if r.check_id == "health.p2p")
    assert refused.status is Status.FAIL and refused.details["action"] == verdicts.REBOOT and "0->1" in refused.reason


def test_the_in_process_all_reduce_names_its_transport_and_the_p2p_off_line_is_its_cause(tmp_path):
    from verify.bench.nccl_parse import parse_nccl_debug

    log = fixture("h200x4_engine_allreduce_p2p_disabled.log")
    transport = parse_nccl_debug(log)
    assert transport.kinds == ["SHM"] and transport.nvls is False
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nccl.conf").write_text("NCCL_NVLS_ENABLE=0\nNCCL_P2P_DISABLE=1\n")
    row = slow_allreduce(transport.kinds)
    causes.explain([row], Node(root=str(tmp_path)), environment={"HOME": "/root"})
    assert "because NCCL_P2P_DISABLE=1 (/etc/nccl.conf line 2)" in row.reason and "NCCL used SHM" in \
        row.details["cause"]["evidence"]


def test_the_4x_h200s_own_p2p_matrix_with_its_underlined_header_reads_every_pair_ok():
    from verify.facts import peer_access

    captured = (NODE / "peer_access" / "h200x4-topo-p2p-r.stdout").read_text()
    assert "\x1b[4m" in captured  # nvidia-smi underlines the header even into a pipe
    statuses = peer_access.parse_p2p_matrix(captured)
    assert len(statuses) == 12 and set(statuses.values()) == {0}  # nvmlGpuP2PStatus_t OK
    assert len(peer_access.parse_topo_gpu_links(TOPO_M)) == 12
