"""benchmarks/scheduler_modes.py times NVML's parts apart: the per-GPU figure the 8-GPU estimate scales by
is verify.scheduler.nvml.read_gpu alone, never the import or nvmlInit (which an 8-GPU node pays once).
A stand-in pynvml whose init is slow and whose GPU queries are quick tells the two apart."""
from __future__ import annotations

import importlib.util
import sys
import threading
import types
from pathlib import Path

from tests.helpers.fake_pynvml import HANDLE_S, INIT_S, fake_pynvml
from verify.facts import peer_access
from verify.scheduler import nvml, nvml_facts

REPO = Path(__file__).resolve().parents[2]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("scheduler_modes", REPO / "benchmarks" / "scheduler_modes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_per_gpu_time_excludes_init_and_scales_the_estimate(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(2))
    bench = load_benchmark()
    timings = bench.nvml_timings(3)
    assert timings["gpus"] == 2 and len(timings["gpu_s"]) == 6 and len(timings["init_s"]) == 3
    assert min(timings["init_s"]) >= INIT_S and HANDLE_S <= max(timings["gpu_s"]) < INIT_S
    lines = bench.report_nvml(timings, prolog_p99=0.3)
    per_gpu_p99 = bench.percentile(timings["gpu_s"], 99)
    assert f"prolog p99 ~ {0.3 + 6 * per_gpu_p99:.3f} s" in lines[-1]


def test_read_gpu_is_what_the_prolog_reads(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(2))
    driver, gpus = nvml.read_raw()
    assert driver == "580.159.04" and [g["bus_id"] for g in gpus] == ["00000000:18:00.0", "00000000:19:00.0"]
    assert gpus[0]["persistence"] is True and gpus[0]["temperature_c"] == 39 and gpus[0]["ecc_mode"] is None


def test_without_nvml_the_benchmark_gives_no_estimate(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    bench = load_benchmark()
    lines = bench.report_nvml(bench.nvml_timings(3), prolog_p99=0.3)
    assert lines == ["NVML: not measured here (pynvml is not installed): the modes used nvidia-smi or saw no GPU; "
                     "no 8-GPU estimate from this machine"]


def test_the_gpus_are_read_side_by_side_in_their_own_order(monkeypatch):
    """Eight GPUs read in parallel threads (NVML is thread-safe): the session costs about one reading, not
    eight, and the readings keep the driver's order. Counted, not timed: each handle call waits until all
    eight are in flight at once, which only a side-by-side read reaches (a loaded machine slows a timed
    version of this test past any limit)."""
    slow = fake_pynvml(8)
    monkeypatch.setattr(slow, "nvmlInit", lambda: None)
    lock = threading.Lock()
    all_in = threading.Event()
    in_flight = {"now": 0, "most": 0}

    def handle(index):
        with lock:
            in_flight["now"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["now"])
            if in_flight["now"] == 8:
                all_in.set()
        all_in.wait(timeout=2)  # one at a time, none would ever see the other seven
        with lock:
            in_flight["now"] -= 1
        return index

    monkeypatch.setattr(slow, "nvmlDeviceGetHandleByIndex", handle)
    monkeypatch.setitem(sys.modules, "pynvml", slow)
    driver, gpus = nvml.read_raw()
    assert driver == "580.159.04" and [g["bus_id"] for g in gpus] == [f"00000000:{i + 0x18:02X}:00.0" for i in range(8)]
    assert in_flight["most"] == 8


def with_p2p_status(fake: types.SimpleNamespace, refused: dict) -> types.SimpleNamespace:
    """The fake NVML answering nvmlDeviceGetP2PStatus as ctypes would: an index that is not a plain int (pynvml's
    own NVML_P2P_CAPS_INDEX_READ is the tuple (0,)) is refused with the TypeError seen on the 2x H200 machine."""
    asked = []

    def p2p_status(first, second, caps_index):
        if type(caps_index) is not int:
            raise TypeError("argument 3: TypeError: Don't know how to convert parameter 3")
        asked.append((first, second, caps_index))
        return refused.get((first, second, caps_index), 0)

    fake.nvmlDeviceGetP2PStatus = p2p_status
    fake.asked = asked
    return fake


def test_the_health_hook_reads_every_pairs_p2p_status_and_the_prolog_none(monkeypatch):
    from verify.node import Node

    fake = with_p2p_status(fake_pynvml(3), {(0, 2, 1): 5})  # GPU0 -> GPU2: WRITE NOT_SUPPORTED
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    driver, gpus = nvml.read_raw()
    assert "p2p" not in gpus[0] and fake.asked == []  # the prolog does not ask
    driver, gpus = nvml.read_raw(peer_access.P2P_CAPS)
    assert sorted(fake.asked) == [(a, b, caps) for a in range(3) for b in range(3) if a != b for caps in (0, 1)]
    assert gpus[0]["p2p"] == {1: {"read": 0, "write": 0}, 2: {"read": 0, "write": 5}}
    node = Node()
    nvml_facts.prime(node, driver, gpus)
    access = node.memo[peer_access.MEMO_P2P]
    assert access.source == peer_access.SOURCE_NVML and access.refused == [(0, 2)] and len(access.can_access) == 6
    assert access.status[(0, 2)] == {"read": "OK", "write": "NOT_SUPPORTED"}


def test_pynvmls_own_tuple_index_would_be_refused_and_leaves_p2p_to_nvidia_smi(monkeypatch):
    from verify.node import Node

    fake = with_p2p_status(fake_pynvml(2), {})
    refuse = fake.nvmlDeviceGetP2PStatus
    fake.nvmlDeviceGetP2PStatus = lambda a, b, index: refuse(a, b, (index,))  # as pynvml's constant is spelt
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    driver, gpus = nvml.read_raw(peer_access.P2P_CAPS)
    assert driver == "580.159.04" and gpus[0]["p2p"] is None  # refused: no answer, not a verdict
    node = Node()
    nvml_facts.prime(node, driver, gpus)
    assert peer_access.MEMO_P2P not in node.memo and "gpus" in node.memo


# ---- --busy (issue 39 item 5): the pieces that need no GPU ---------------------------------------------

def test_busy_without_a_gpu_says_so_and_exits_3(monkeypatch, capsys):
    bench = load_benchmark()
    monkeypatch.setattr(bench, "GPU_LIST_ARGV", ["/nonexistent/nvidia-smi", "--query-gpu=index"])
    assert bench.main(["--busy"]) == bench.NO_GPU
    assert capsys.readouterr().err == "--busy needs a GPU: nvidia-smi is not installed\n"


def test_the_gpu_count_and_why_none():
    bench = load_benchmark()

    def answer(rc, stdout, stderr=""):
        return lambda argv, **_: types.SimpleNamespace(returncode=rc, stdout=stdout, stderr=stderr)

    assert bench.count_gpus(answer(0, "0\n1\n2\n3\n")) == (4, "")
    assert bench.count_gpus(answer(0, "")) == (0, "nvidia-smi lists no GPU")
    failed = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    assert bench.count_gpus(answer(9, failed)) == (0, "nvidia-smi exited 9: " + failed.strip())


def test_compute_apps_rows_are_read_and_notes_skipped():
    """Rows in nvidia-smi's csv,noheader form for pid,process_name,used_memory (written here, not captured)."""
    bench = load_benchmark()
    text = "3858903, VLLM::EngineCore, 6265 MiB\n44966, /opt/a, b/stub, 974 MiB\nNo running processes found\n"
    assert bench.parse_compute_apps(text) == [(3858903, "VLLM::EngineCore", "6265 MiB"),
                                              (44966, "/opt/a,b/stub", "974 MiB")]


def fake_proc(tmp_path: Path, parents: dict) -> str:
    """A /proc with a status file per pid naming its parent (the real file's PPid: line)."""
    for pid, ppid in parents.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "status").write_text(f"Name:\tpython3\nState:\tS (sleeping)\nPPid:\t{ppid}\n")
    return str(tmp_path)


def test_a_process_a_hook_started_is_found_by_its_parents(tmp_path):
    bench = load_benchmark()
    proc = fake_proc(tmp_path, {500: 400, 400: 300, 300: 1, 900: 1})
    assert bench.parent_chain(500, proc) == [400, 300, 1] and bench.parent_chain(77, proc) == []
    seen = {500: ("python3", bench.parent_chain(500, proc)), 900: ("train.py", bench.parent_chain(900, proc)),
            400: ("python3", bench.parent_chain(400, proc))}
    assert bench.hooks_among_apps(seen, {400}) == [(400, "python3", 400), (500, "python3", 400)]
    assert bench.hooks_among_apps(seen, {123}) == []


def test_the_busy_report_says_no_hook_appeared_or_names_it():
    bench = load_benchmark()
    sampler = bench.ComputeAppsSampler()
    sampler.samples, sampler.seen = 42, {1000: ("python3", [999, 1])}
    job = {"gpus": 2, "held_mib": [120000, 120100], "total_mib": [143771, 143771]}
    lines, hooks = bench.report_busy(job, "STOPPED after 9 matmul rounds on every GPU; exit 0", sampler,
                                     {2000, 2001}, 1000)
    assert hooks == [] and lines[-1].startswith("no hook process")
    assert lines[0].startswith("busy job (pid 1000): 2 GPU(s), held 120000/143771 MiB, 120100/143771 MiB")
    assert "42 samples" in lines[1] and "pids listed [1000]" in lines[1]
    sampler.seen[2500] = ("python3", [2001, 1])  # an engine under a hook's process
    lines, hooks = bench.report_busy(job, "stopped", sampler, {2000, 2001}, 1000)
    assert hooks == [(2500, "python3", 2001)]
    assert "HOOK PROCESS HELD A CUDA CONTEXT: pid 2500 (python3), started under hook pid 2001" in lines


def test_each_timed_run_reports_its_pid(tmp_path):
    bench = load_benchmark()
    pids: set = set()
    times, codes = bench.timed([sys.executable, "-c", "pass"], 2, pids)
    assert len(times) == 2 and codes == {0} and len(pids) == 3  # the warm-up's pid too
