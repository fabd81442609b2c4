"""The hooks keep their state and read only what they can trust (issue 53 items 1, 3 and 5, scheduler side):
every state the hooks write reads back unchanged (NVLink counters included: the health and npd modes wrote a
state their reader refused on every NVLink node); saved counters with an impossible time give no interval
(judged since driver load, never as a rate over decades); the NVML child's answer and the NVML prime are
total on mistyped answers.

Hypothesis runs the "ci" profile here (fixed seed, `make test`) and the "fuzz" profile under `make fuzz`;
every property test's name holds "total" so `make fuzz -k total` selects it.
"""
from __future__ import annotations

import json
import tempfile

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import drills
from tests.unit.test_scheduler_modes import Machine, row, slurm, spec
from verify.facts import peer_access
from verify.node import Node
from verify.scheduler import nvml, nvml_facts
from verify.scheduler import state as saved
from verify.scheduler.modes import Options, run_mode

TIME = st.floats(min_value=0, max_value=saved.MAX_SECONDS, allow_nan=False)
COUNT = st.one_of(st.none(), st.integers(min_value=0, max_value=saved.MAX_COUNT - 1))
NAME = st.text(min_size=1, max_size=30)
IB_COUNTERS = st.dictionaries(NAME, COUNT, max_size=6)  # health.ib.<dev>/<port>: {counter: count}
NVLINK_COUNTERS = st.dictionaries(st.integers(0, 17).map(str), IB_COUNTERS, max_size=18)  # {link: {counter: n}}
CHECK = st.from_regex(r"health\.(ib\.mlx5_[0-9]{1,2}/[12]|nvlink\.[0-7])", fullmatch=True)
MODES = st.sampled_from(["prolog", "epilog", "health", "npd"])
POLICY_ENTRY = st.tuples(st.integers(1, saved.MAX_RUNS - 1), TIME, TIME).map(list)
STATES = st.builds(
    saved.State,
    boot_id=st.uuids().map(str),
    kernel_uptime_s=st.one_of(st.none(), TIME),
    open_events=st.lists(st.text(max_size=200), max_size=5),
    counters=st.dictionaries(CHECK, st.one_of(IB_COUNTERS, NVLINK_COUNTERS), max_size=8),
    counters_at=st.one_of(st.none(), TIME),
    last_run=st.dictionaries(MODES, TIME),
    policy_runs=st.dictionaries(MODES, st.dictionaries(st.from_regex(r"[a-z][a-z0-9_.:/-]{0,40}", fullmatch=True),
                                                       POLICY_ENTRY, max_size=5)),
)


@given(STATES)
def test_every_state_the_hooks_write_reads_back_unchanged_total(state):
    with tempfile.TemporaryDirectory(prefix="tf-state-") as directory:
        assert saved.save(directory, state) == ""
        back, warning = saved.load(directory)
    assert warning == "" and back == state


H200X2 = drills.HEALTH / "h200x2" / "cmd"


def nvlink_drill(machine: Machine, crc_errors: int = 0):
    """The capture's GPU with the NV18 links and error counters GPU 0 of the 2x H200 printed (the H100 of the
    capture is a PCIe card), link 0's CRC errors set to crc_errors."""
    directory = machine.plant("healthy")
    for name in ("nvlink-s", "nvlink-e"):
        block = (H200X2 / f"{name}.stdout").read_text().split("GPU 1:")[0]
        if name == "nvlink-e":
            block = block.replace("Link 0: CRC Errors: 0", f"Link 0: CRC Errors: {crc_errors}", 1)
        (directory / f"{name}.stdout").write_text(block)
    return machine.node(directory)


def run_on(machine: Machine, node, mode: str, now=None):
    options = Options(mode, state_dir=str(machine.state), use_nvml=False, use_kmsg=False, node_name="tfnode",
                      scheduler="slurm", drain=False)
    return run_mode(spec(), node, options, slurm(), now=now)


def test_the_health_mode_on_an_nvlink_node_keeps_its_state_run_after_run(tmp_path):
    """An NV18 GPU's counters are {link: {counter: count}}, which the reader refused: every run set the state
    aside and started from boot."""
    machine = Machine(tmp_path)
    for mode in ("health", "npd", "health"):
        outcome = run_on(machine, nvlink_drill(machine), mode)
        assert not [r for r in outcome.report["results"] if r["check_id"] == "scheduler.state"], mode
    state, warning = saved.load(str(machine.state))
    assert warning == "" and any(k.startswith("health.nvlink.") for k in state.counters)
    assert isinstance(next(iter(state.counters["health.nvlink.0"].values())), dict)
    assert not (machine.state / saved.DAMAGED_NAME).exists()


def test_counters_dated_before_the_boot_or_in_the_future_give_no_interval_never_a_weaker_verdict(tmp_path):
    machine = Machine(tmp_path)
    machine.tree.write("/proc/stat", "cpu 1 2 3 4\nbtime 1765000000\n")
    now = 1_765_100_000.0
    first = run_on(machine, nvlink_drill(machine), "health", now)
    assert first.report["run"].get("counters_interval_unknown") is None
    fresh = Machine(tmp_path / "fresh")  # a first run judges the count since driver load itself
    since_boot = run_on(fresh, nvlink_drill(fresh, 100_000), "health", now + 60)
    for stamp, why in ((1.0, "before this boot"), (now + 86400, "after now")):
        state, _ = saved.load(str(machine.state))
        state.counters["health.nvlink.0"] = {k: {n: 0 for n in v} for k, v in state.counters["health.nvlink.0"].items()}
        state.counters_at = stamp
        saved.save(str(machine.state), state)
        outcome = run_on(machine, nvlink_drill(machine, 100_000), "health", now + 120)
        run = outcome.report["run"]
        assert why in run["counters_interval_unknown"] and run["counters_interval_s"] is None
        # judged as the count since driver load: as strict as a first run, never a rate over 55 years
        assert row(outcome, "health.nvlink.0")["status"] == row(since_boot, "health.nvlink.0")["status"] != "PASS"


# ---- the NVML child's answer and the prime ---------------------------------------------------------------

VALUE = st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 30), 10 ** 30), st.floats(), st.text(max_size=8),
                  st.lists(st.integers(), max_size=5), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3))
KEYS = st.sampled_from(["index", "bus_id", "name", "uuid", "persistence", "memory_mib", "ecc_mode",
                        "ecc_uncorrected_volatile", "remapped_rows", "clock_reasons", "temperature_c", "power_mw",
                        "fabric", "p2p", "vbios", "retired_pending", "tlimit_margin_c"])
PEER_KEY = st.one_of(st.sampled_from(["1", "²", "٣", "-1", "1.5", "0x1", "9" * 40, "", " 1"]), st.text(max_size=4))
P2P = st.dictionaries(PEER_KEY, st.one_of(VALUE, st.fixed_dictionaries({"read": VALUE, "write": VALUE})),
                      max_size=4)


def good_gpu(index: int) -> dict:
    """One GPU as read_raw(P2P_CAPS) gives it on a 2x H200 (every field of its kind)."""
    return {"index": index, "bus_id": f"00000000:0{index + 6}:00.0", "name": "NVIDIA H200", "uuid": f"GPU-{index}",
            "persistence": True, "memory_mib": 143771, "ecc_mode": True, "ecc_uncorrected_volatile": 0,
            "ecc_uncorrected_aggregate": 0, "retired_pending": 0, "remapped_rows": (0, 0, False, False),
            "clock_reasons": 0, "temperature_c": 31, "tlimit_margin_c": 56, "power_mw": 75000,
            "power_limit_mw": 700000, "vbios": "96.00.AF.00.01", "fabric": (3, 0),
            "p2p": {1 - index: {"read": 0, "write": 0}}}


GPUS = st.lists(st.builds(lambda base, changes: {**base, **changes}, st.integers(0, 1).map(good_gpu),
                          st.dictionaries(KEYS, st.one_of(VALUE, P2P), max_size=3)), max_size=3)


@given(GPUS, st.one_of(st.just("580.159.04"), VALUE))
def test_the_nvml_prime_on_a_mistyped_answer_is_total(gpus, driver):
    node = Node(root="/nonexistent-root")
    problem = nvml_facts.prime(node, driver, gpus)
    assert isinstance(problem, str)
    assert (problem == "") == ("gpus" in node.memo)


@given(GPUS, P2P)
def test_the_nvml_childs_answer_with_an_odd_peer_key_is_total(gpus, p2p):
    for gpu in gpus:
        gpu["p2p"] = p2p
        for key in ("remapped_rows", "fabric"):
            if isinstance(gpu.get(key), tuple):
                gpu[key] = list(gpu[key])
    data = json.dumps(["580.159.04", gpus], default=str).encode()
    driver, answer = nvml._unpack(data, lambda: "exit 0")
    assert (driver is None and isinstance(answer, str)) or nvml.reading_problem(driver, answer) == ""


def test_a_good_reading_primes_every_fact_and_a_superscript_peer_is_refused_by_name():
    node = Node(root="/nonexistent-root")
    assert nvml_facts.prime(node, "580.159.04", [good_gpu(0), good_gpu(1)]) == ""
    assert node.memo["gpus"].gpus[1].bus_id == "00000000:07:00.0" and peer_access.MEMO_P2P in node.memo
    odd = json.dumps(["580.159.04", [dict(good_gpu(0), p2p={"²": {"read": 0, "write": 0}}), good_gpu(1)]],
                     default=list)
    driver, why = nvml._unpack(odd.encode(), lambda: "exit 0")
    assert driver is None and "p2p peer '²' is not another GPU's index" in why
    half = [good_gpu(0), dict(good_gpu(1), p2p={0: {"read": 0}})]  # a capability missing: nvidia-smi answers
    node = Node(root="/nonexistent-root")
    assert nvml_facts.prime(node, "580.159.04", half) == "" and peer_access.MEMO_P2P not in node.memo


def test_a_mistyped_reading_leaves_the_gpus_to_nvidia_smi_and_says_why(tmp_path):
    class Answer:
        def answer(self):
            return "580.159.04", [dict(good_gpu(0), clock_reasons="0x1")]

    machine = Machine(tmp_path)
    node = machine.node(machine.plant("healthy"))
    options = Options("prolog", state_dir="", use_nvml=True, use_kmsg=False, node_name="tfnode", scheduler="slurm",
                      nvml_reading=Answer(), drain=False)
    outcome = run_mode(spec(), node, options, slurm())
    assert outcome.report["run"]["gpu_source"] == \
        "nvidia-smi (the NVML answer is not a reading: GPU 0: clock_reasons is not a number)"
    assert row(outcome, "health.gpu.presence")["status"] == "PASS" and drills.BUS


def test_a_kernel_log_cursor_past_the_uptime_reads_from_boot_and_misses_no_event(tmp_path):
    machine = Machine(tmp_path)
    machine.tree.write("/proc/uptime", "5000.00 9000.00\n")
    state = saved.State(boot_id="0f1e2d3c-0000-4000-8000-000000000001", kernel_uptime_s=1e9)
    machine.state.mkdir(mode=0o700)
    saved.save(str(machine.state), state)
    outcome = machine.run("prolog", "xid79")
    assert "past this boot's uptime" in outcome.report["run"]["kernel_log_cursor_reset"]
    assert row(outcome, drills.XID_ROW)["status"] == "FAIL"  # the planted Xid 79 is read, not skipped
