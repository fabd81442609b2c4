"""Seven functions that raised on hostile input are total (issue 41 items 4 and 5): each returns its result, a
clear "unreadable" one, or raises its module's typed error with a message, on any input; numbers from outside
are bounded before conversion. Inputs: the real captures each function reads, broken the ways
test_parsers_fuzz breaks them, and random values.

Hypothesis runs the "ci" profile here (fixed seed, `make test`) and the "fuzz" profile under `make fuzz`
(random seed, FUZZ_EXAMPLES); every property test's name holds "total" so `make fuzz -k total` selects it.
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".cache" / "collections"))  # the collection link `make venv` creates
sys.path.insert(0, str(REPO / "tests" / "helpers"))

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils import ledger_core  # noqa: E402
from bench_helpers import fixture, output, scripted_node  # noqa: E402

from plugins import load_plugin  # noqa: E402
from tests.unit.test_parsers_fuzz import mutated  # noqa: E402
from tests.unit.test_readers_total import GARBAGE, damaged  # noqa: E402
from verify.bench import gpu_burn, gpu_clocks  # noqa: E402
from verify.engine import read_result  # noqa: E402
from verify.history import drain  # noqa: E402
from verify.judging import peaks, thresholds  # noqa: E402
from verify.node import Node  # noqa: E402
from verify.result import CheckResult, Status  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
network = load_plugin("filter", "network_tuning")
limits = load_plugin("filter", "limits")

TEXT = st.text(max_size=300)
HUGE_DIGITS = st.sampled_from(["9" * 5000, "²", "٣", "1e309", "nan", "-1", "0x10", "18446744073709551616"])
ANY_VALUE = st.one_of(GARBAGE, HUGE_DIGITS, st.integers(min_value=-(10 ** 4000), max_value=10 ** 4000))


def _texts(*names: str) -> list:
    return [(FIXTURES / n).read_bytes() for n in names]


def as_text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# ---- plugins.module_utils.ledger_core.file_bytes ------------------------------------------------------------

@given(st.binary(max_size=300), st.sampled_from(["0644", "0600"]))
def test_file_bytes_gives_back_what_snapshot_file_recorded_total(data, mode):
    """The round trip the restore relies on: any bytes a file held come back byte for byte."""
    with tempfile.TemporaryDirectory(prefix="tf-total-") as root:
        path = Path(root, "etc/x.conf")
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        path.chmod(int(mode, 8))
        entry = ledger_core.snapshot_file(root, "/etc/x.conf")
        assert ledger_core.file_bytes(json.loads(json.dumps(entry))) == data


ENTRY = st.fixed_dictionaries({}, optional={"content": st.one_of(TEXT, GARBAGE, st.just("\ud800"),
                                                                 st.just("!!notbase64")),
                                            "encoding": st.one_of(st.sampled_from(["utf-8", "base64", "latin-1"]),
                                                                  GARBAGE)})


@given(st.one_of(ENTRY, GARBAGE))
def test_file_bytes_of_a_damaged_ledger_entry_is_total(entry):
    try:
        assert isinstance(ledger_core.file_bytes(entry), bytes)
    except ledger_core.LedgerError as exc:
        assert str(exc).strip()


def test_file_bytes_refuses_by_kind():
    with pytest.raises(ledger_core.LedgerError, match="no text 'content'"):
        ledger_core.file_bytes({"content": 7})
    with pytest.raises(ledger_core.LedgerError, match="base64 content cannot be decoded"):
        ledger_core.file_bytes({"content": "!!", "encoding": "base64"})
    with pytest.raises(ledger_core.LedgerError, match="neither 'utf-8' nor 'base64'"):
        ledger_core.file_bytes({"content": "x", "encoding": "rot13"})


# ---- plugins/filter/network_tuning.network_ethtool_parse ------------------------------------------------------

ETHTOOL = _texts("sysfs_net/ethtool_g_virtio_net.txt", "sysfs_net/ethtool_l_virtio_net.txt",
                 "sysfs_net/ethtool_l_veth.txt")


@given(st.one_of(mutated(ETHTOOL), st.binary(max_size=200)))
def test_network_ethtool_parse_is_total(data):
    parsed = network.network_ethtool_parse(as_text(data))
    for section in parsed.values():
        for value in section.values():
            assert value is None or (isinstance(value, int) and 0 <= value < 10 ** 10)


def test_network_ethtool_parse_reads_the_real_capture_and_bounds_numbers():
    parsed = network.network_ethtool_parse(as_text(ETHTOOL[2]))
    assert parsed["maximums"]["rx"] == 2 and parsed["current"]["rx"] == 1
    hostile = as_text(ETHTOOL[2]).replace("RX:\t\t2", "RX:\t\t" + "9" * 5000).replace("TX:\t\t2", "TX:\t\t²")
    assert network.network_ethtool_parse(hostile)["maximums"]["rx"] is None
    with pytest.raises(AnsibleFilterError, match="not text"):
        network.network_ethtool_parse(None)


# ---- plugins/filter/limits.limits_systemd_value ---------------------------------------------------------------

@given(ANY_VALUE, st.one_of(st.none(), ANY_VALUE))
def test_limits_systemd_value_is_total(value, ceiling):
    try:
        text = limits.limits_systemd_value(value, "limits_systemd_nofile", ceiling)
    except AnsibleFilterError as exc:
        assert "limits_systemd_nofile" in str(exc)
        return
    assert limits.SYSTEMD_VALUE.fullmatch(text)


@given(ANY_VALUE, st.one_of(st.none(), ANY_VALUE))
def test_limits_pam_value_is_total(value, ceiling):
    try:
        text = limits.limits_pam_value(value, "limits_nofile", ceiling=ceiling)
    except AnsibleFilterError as exc:
        assert "limits_nofile" in str(exc)
        return
    assert text == "unlimited" or limits.WHOLE.fullmatch(text)


def test_limits_values_refuse_numbers_beyond_a_limit_by_name():
    assert limits.limits_systemd_value("1048576:2097152", "x", "1073741816") == "1048576:2097152"
    for bad in ("9" * 5000, 10 ** 5000, "²", "1:²"):
        with pytest.raises(AnsibleFilterError, match="^x: "):
            limits.limits_systemd_value(bad, "x")
    assert limits.limits_systemd_value("1048576", "x", "9" * 5000) == "1048576"  # no ceiling known
    with pytest.raises(AnsibleFilterError, match="above this node's fs.nr_open"):
        limits.limits_pam_value("2000000", "y", ceiling="1048576")


# ---- verify.judging.peaks.pcie_gen_from_speed -------------------------------------------------------------------

def _captured_speeds() -> list:
    """current_link_speed / max_link_speed as the H100 and H200 machines' sysfs gave them."""
    found = []
    for capture in sorted((FIXTURES / "node" / "health").glob("h*/sysfs/*.txt")):
        found += [line.split("=", 1)[1].encode() + b"\n" for line in capture.read_text().splitlines()
                  if line.startswith(("current_link_speed=", "max_link_speed="))]
    return found


# The captured Gen5 readings, and the other rates in the form the kernel prints them (PCIE_SPEED2STR).
SPEEDS = _captured_speeds() + [b"16.0 GT/s PCIe\n", b"8.0 GT/s PCIe\n", b"2.5 GT/s PCIe\n", b"Unknown\n"]


@given(st.one_of(mutated(SPEEDS), st.binary(max_size=200)), st.one_of(st.none(), GARBAGE))
def test_pcie_gen_from_speed_is_total(data, other):
    assert peaks.pcie_gen_from_speed(as_text(data)) in (None, 1, 2, 3, 4, 5, 6)
    if not isinstance(other, str):
        assert peaks.pcie_gen_from_speed(other) is None


def test_pcie_gen_from_speed_reads_sysfs_and_nothing_else():
    assert {peaks.pcie_gen_from_speed(s.decode()) for s in SPEEDS[:-4]} == {5}
    assert [peaks.pcie_gen_from_speed(s.decode()) for s in SPEEDS[-4:]] == [4, 3, 1, None]
    for bad in ("1.2.3 GT/s", "9" * 5000 + " GT/s", "٣2.0 GT/s", "32.0.0 GT/s"):
        assert peaks.pcie_gen_from_speed(bad) is None


# ---- verify.bench.gpu_clocks.summarise --------------------------------------------------------------------------

BURN = read_result(fixture("gpu_burn_h200x2.stdout"))
READING = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(min_value=-(10 ** 400), max_value=10 ** 400), st.text(max_size=5), st.booleans())
SAMPLE = st.one_of(
    st.fixed_dictionaries({}, optional={"t": READING, "sm_mhz": READING, "mem_mhz": READING, "temp_c": READING,
                                        "power_w": READING, "reasons": st.one_of(READING, HUGE_DIGITS,
                                                                                 st.just("0x0000000000000004"))}),
    GARBAGE)


@given(st.one_of(st.lists(SAMPLE, max_size=8), GARBAGE))
def test_gpu_clocks_summarise_is_total(samples):
    window = gpu_clocks.summarise(samples)
    for key, most in gpu_clocks.READING_MAX.items():
        if key in window:
            assert all(math.isfinite(window[key][m]) and 0 <= window[key][m] <= most
                       for m in ("min", "median", "max"))
    assert all(isinstance(name, str) for name in window["reasons"])
    gpu_clocks.describe(window)  # the report line is made of it


def test_gpu_clocks_counts_what_it_could_not_read():
    window = gpu_clocks.summarise([{"sm_mhz": 1980, "reasons": 4}, {"sm_mhz": float("nan"), "reasons": "0x" + "f" * 40},
                                   {"sm_mhz": 10 ** 400}, "not a sample"])
    assert window["sm_mhz"] == {"min": 1980.0, "median": 1980.0, "max": 1980.0}
    assert window["reasons"] == ["sw_power_cap"] and window["unreadable"] == 4 and window["samples"] == 4


# ---- verify.bench.gpu_burn.judge_payload ------------------------------------------------------------------------

def _health_reading() -> dict:
    """health_reading over the real 1x H100 capture (nvidia-smi query, dmesg)."""
    cmd = FIXTURES / "node" / "health" / "h100x1" / "cmd"

    def answer(argv):
        if argv[0] == "nvidia-smi":
            return output(argv, stdout=(cmd / "query-gpu.stdout").read_text())
        if argv[0] == "dmesg":
            return output(argv, stdout=(cmd / "dmesg-kernel.stdout").read_text())
        return output(argv, missing=True)

    return gpu_burn.health_reading(scripted_node(answer))


HEALTH = _health_reading()


def _never_garbage_pass(rows: list) -> None:
    for row in rows:
        assert isinstance(row, CheckResult)
        if row.status is Status.PASS and isinstance(row.observed, (int, float)):
            assert thresholds.broken_measurement(row.observed) is None, row.reason


@given(damaged([BURN, read_result(fixture("gpu_burn_h100x1.stdout"))]), damaged([HEALTH]), damaged([HEALTH]))
def test_gpu_burn_judge_payload_is_total(payload, before, after):
    rows = gpu_burn.judge_payload(payload, before, after, gpu_burn.DEFAULT_CLOCK_FRACTION)
    _never_garbage_pass(rows)
    assert rows[-1].check_id in (f"{gpu_burn.CHECK_ID}.errors", f"{gpu_burn.CHECK_ID}.payload")


@given(GARBAGE, GARBAGE, st.one_of(GARBAGE, st.floats()))
def test_gpu_burn_judge_payload_of_anything_is_total(payload, reading, fraction):
    try:
        rows = gpu_burn.judge_payload(payload, reading, reading, fraction)
    except ValueError as exc:
        assert "clock_fraction" in str(exc)
        return
    _never_garbage_pass(rows)


def test_a_malformed_burn_row_is_named_and_the_others_are_judged():
    payload = json.loads(json.dumps(BURN))
    payload["burn"]["gpus"][1]["nvml"]["sm_mhz"]["median"] = float("nan")
    rows = {r.check_id: r for r in gpu_burn.judge_payload(payload, HEALTH, HEALTH, 0.6)}
    assert rows["bench.gpu_burn.gpu0"].status is Status.PASS and "bench.gpu_burn.gpu1" not in rows
    assert rows["bench.gpu_burn.payload"].status is Status.ERROR
    assert "burn.gpus[1].nvml.sm_mhz.median: nan is out of range" in rows["bench.gpu_burn.payload"].reason
    broken = gpu_burn.judge_payload({"gpus": "x"}, {"ecc": []}, HEALTH, 0.6)
    assert [r.status for r in broken] == [Status.ERROR, Status.WARN]
    assert "the before reading is malformed (before.ecc: expected dict" in broken[1].reason


# ---- verify.history.drain.drained_by_us (and k8s_state: the same kubectl JSON) ----------------------------------

def _kubectl(name: str) -> dict:
    return json.loads(json.loads((FIXTURES / "scheduler" / f"{name}.json").read_text())["stdout"])


# `kubectl get nodes -o json` is a List of the Node objects `kubectl get node NAME -o json` prints: built
# from the two captured nodes (one tainted by tunefleet), as kubectl lists them.
NODES = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
         "items": [_kubectl("k8s_get_node_clean"), _kubectl("k8s_get_node_tainted_by_tunefleet")]}


def _answering(stdout: str) -> Node:
    return scripted_node(lambda argv: output(argv, stdout=stdout))


def test_drained_by_us_reads_the_real_node_list():
    total, ours = drain.drained_by_us(_answering(json.dumps(NODES)), "kubernetes")
    assert total == 2 and ours == [NODES["items"][1]["metadata"]["name"]]


@given(st.one_of(damaged([NODES]).map(json.dumps), mutated([json.dumps(NODES).encode()]).map(as_text),
                 st.integers(70, 100_000).map(lambda depth: '{"items": ' + "[" * depth + "]" * depth + "}")))
def test_drained_by_us_on_damaged_kubectl_json_is_total(text):
    try:
        total, ours = drain.drained_by_us(_answering(text), "kubernetes")
    except drain.SchedulerError as exc:
        assert str(exc).startswith("kubectl get nodes -o json")
        return
    assert isinstance(total, int) and all(isinstance(name, str) for name in ours)


@given(st.one_of(damaged([_kubectl("k8s_get_node_tainted_by_tunefleet")]).map(json.dumps),
                 st.integers(70, 100_000).map(lambda depth: "[" * depth + "]" * depth)))
def test_k8s_state_on_damaged_kubectl_json_is_total(text):
    try:
        label, tainted, reason = drain.k8s_state(text)
    except drain.SchedulerError as exc:
        assert str(exc).startswith("kubectl get node -o json")
        return
    assert label is None or isinstance(label, str)
    assert isinstance(tainted, bool) and isinstance(reason, str)



@pytest.mark.parametrize("digits", ["²", "٣", "１２", "⁵"])
def test_non_ascii_digits_are_never_int_ed(digits):
    # str.isdigit() is true for '²', '٣' and fullwidth digits, and int() refuses some of them: every reader that
    # guards int() with isdigit() takes ASCII digits only (make fuzz found the first in aer.parse_counters).
    from verify.checks import limits
    from verify.facts import aer, nccl_settings

    assert aer.parse_counters(f"TOTAL_ERR_COR {digits}") is None
    assert nccl_settings._int(digits) is None
    with pytest.raises(limits.LimitsParseError):
        limits.normalize(digits, "nofile", None)
